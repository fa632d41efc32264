"""The garbage collector's pace around a run (simulator.collector): set inside, restored after,
and no part of the result."""

from __future__ import annotations

import gc
import threading

import pytest

from simulator import scenario as scenario_module
from simulator.collector import SPARSE_THRESHOLDS, sparse_collections

CALLER_THRESHOLDS = (321, 7, 9)


@pytest.fixture
def caller_thresholds():
    before = gc.get_threshold()
    gc.set_threshold(*CALLER_THRESHOLDS)
    yield
    gc.set_threshold(*before)


def test_the_block_runs_at_the_sparse_pace_and_the_callers_comes_back(caller_thresholds):
    with sparse_collections():
        assert gc.get_threshold() == SPARSE_THRESHOLDS
    assert gc.get_threshold() == CALLER_THRESHOLDS


def test_the_callers_pace_comes_back_when_the_block_raises(caller_thresholds):
    with pytest.raises(ValueError, match="inside"):
        with sparse_collections():
            raise ValueError("inside")
    assert gc.get_threshold() == CALLER_THRESHOLDS


def test_nested_blocks_keep_the_sparse_pace_until_the_outermost_closes(caller_thresholds):
    with sparse_collections():
        with sparse_collections():
            pass
        assert gc.get_threshold() == SPARSE_THRESHOLDS
    assert gc.get_threshold() == CALLER_THRESHOLDS


def test_a_block_closing_in_another_thread_leaves_this_ones_pace_sparse(caller_thresholds):
    opened, release = threading.Event(), threading.Event()

    def other_thread() -> None:
        with sparse_collections():
            opened.set()
            release.wait(timeout=10)

    worker = threading.Thread(target=other_thread)
    worker.start()
    assert opened.wait(timeout=10)
    with sparse_collections():
        release.set()
        worker.join(timeout=10)
        assert not worker.is_alive()
        assert gc.get_threshold() == SPARSE_THRESHOLDS
    assert gc.get_threshold() == CALLER_THRESHOLDS


def test_a_run_measures_the_same_step_at_either_pace(make_scenario, caller_thresholds):
    scenario = make_scenario(pp=2, vpp=2, ep=4)
    sparse = scenario_module.run_scenario(scenario)
    assert gc.get_threshold() == CALLER_THRESHOLDS
    default = scenario_module._run_scenario(scenario, True)
    assert sparse.metrics == default.metrics
    assert sparse.trace == default.trace
