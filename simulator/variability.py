"""GPU-to-GPU speed variation: a synchronous step runs at the pace of its slowest GPU.

Identical GPUs of one cluster do not compute equally fast (manufacturing spread and power
management; Sinha et al., "Not All GPUs Are Created Equal", SC22, arXiv 2208.11035). If each
GPU's speed is persistently 1 - cv * z with z standard normal, the slowest of N GPUs is
expected to run at 1 - cv * E[max of N standard normals], and every GPU of a step that
synchronises them all (expert all-to-all, pipeline sends, the data-parallel gradient reduction
before the optimizer) waits for it:

    slowdown(N) = 1 / (1 - cv * E[max_N z])

The engine runs every simulated GPU's compute at that pace; simulator.metrics then moves the
time a typical GPU spends waiting, busy * (1 - 1 / slowdown), out of its busy categories into
"gpu_variation". This is where weak scaling loses throughput though the step per GPU is the
same: E[max_N z] grows like sqrt(2 ln N).
"""

from __future__ import annotations

from functools import lru_cache
from math import erf

import numpy as np

_STEP = 1e-3
_GRID = np.arange(-10.0, 10.0, _STEP) + _STEP / 2
_NORMAL_CDF = 0.5 * (1.0 + np.vectorize(erf)(_GRID / np.sqrt(2.0)))


@lru_cache(maxsize=None)
def expected_max_normal(count: int) -> float:
    """E[max of `count` independent standard normals]: the integral of 1 - F above 0 less
    that of F below 0, F = Phi^count (midpoint rule on [-10, 10])."""
    if count < 1:
        raise ValueError(f"count={count}: must be >= 1")
    cdf = _NORMAL_CDF ** count
    return float(np.where(_GRID > 0, 1.0 - cdf, -cdf).sum() * _STEP)


def slowest_gpu_slowdown(num_gpus: int, speed_cv: float) -> float:
    """How many times as long the slowest of `num_gpus` GPUs takes for the same compute."""
    shortfall = speed_cv * expected_max_normal(num_gpus)
    if not 0 <= shortfall < 1:
        raise ValueError(f"gpu_speed_cv={speed_cv}: the slowest of {num_gpus} GPUs would run "
                         f"at {1 - shortfall:.2f} of the typical speed; allowed is [0, 1)")
    return 1.0 / (1.0 - shortfall)
