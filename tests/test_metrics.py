"""The breakdown's interval arithmetic: what idle time a rank's communication covers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.metrics import _merge, _subtract


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 10)), max_size=30),
       st.floats(0, 100), st.floats(0, 50))
@settings(max_examples=200, deadline=None)
def test_the_uncovered_parts_of_an_interval_are_exactly_what_no_cut_covers(raw, start, width):
    cuts = _merge([(a, a + w) for a, w in raw])
    interval = (start, start + width)
    pieces = _subtract(interval, cuts, [end for _, end in cuts])
    assert all(interval[0] <= a < b <= interval[1] for a, b in pieces)
    for a, b in pieces:
        assert not any(c < b and d > a for c, d in cuts)
    covered = sum(max(0.0, min(d, interval[1]) - max(c, interval[0])) for c, d in cuts)
    assert sum(b - a for a, b in pieces) + covered == pytest.approx(width, abs=1e-9)
