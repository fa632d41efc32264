"""How often CPython's cyclic garbage collector runs while a step is built, replayed and measured.

A replay allocates millions of short-lived objects (SimPy's events and the processes they resume, in
reference cycles) beside hundreds of thousands that live to the end (the task graph, every task's
record). At CPython's default thresholds (700, 10, 10) the collector walks that long-lived heap in a
full collection every hundred thousand or so allocations: a third of the time of an eager
256-micro-batch row went there (`moesim run --row
../shared/data/calibration.csv:mb2602-qwen235b-b200-256`, timed with `gc.callbacks`: 8.5 s in full
collections against 0.1 s at SPARSE_THRESHOLDS, of a 25 s run). Young collections every 10,000
allocations still free SimPy's cycles while they are young, so memory stays where it was; only the
full walks become rare. The results are the same: no object's finaliser plays a part in the model.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

SPARSE_THRESHOLDS = (10_000, 50, 100)

# The thresholds are the process's: blocks open at once (nested, or in threads side by side, as
# in a Dask worker) share one sparse pace, set by the first to open and undone by the last to close.
_lock = threading.Lock()
_open_blocks = 0
_thresholds_before: tuple[int, ...] = gc.get_threshold()


@contextmanager
def sparse_collections() -> Iterator[None]:
    """Run the block at SPARSE_THRESHOLDS; the thresholds found when no block was open come back
    once none is, whether the blocks return or raise."""
    global _open_blocks, _thresholds_before
    with _lock:
        if _open_blocks == 0:
            _thresholds_before = gc.get_threshold()
            gc.set_threshold(*SPARSE_THRESHOLDS)
        _open_blocks += 1
    try:
        yield
    finally:
        with _lock:
            _open_blocks -= 1
            if _open_blocks == 0:
                gc.set_threshold(*_thresholds_before)
