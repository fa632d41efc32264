"""GPU-to-GPU speed variation (simulator.variability): the order statistic, the pace of the
slowest GPU, and the breakdown that shows the wait, on the small MoE of tests/conftest.py."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from simulator.calibration import CostParams
from simulator.scenario import run_scenario
from simulator.metrics import VARIATION as VARIATION_KEY
from simulator.metrics import with_variation_wait
from simulator.variability import expected_max_normal, slowest_gpu_slowdown


@pytest.mark.parametrize("count, expected", [
    (1, 0.0), (2, 1 / math.sqrt(math.pi)), (3, 1.5 / math.sqrt(math.pi)),
    (5, 1.16296), (10, 1.53875), (100, 2.50759)])
def test_expected_max_of_normals_matches_known_values(count, expected):
    assert expected_max_normal(count) == pytest.approx(expected, abs=2e-5)


def test_the_slowest_gpu_falls_further_behind_as_the_job_grows():
    paces = [slowest_gpu_slowdown(n, 0.013) for n in (8, 256, 1024, 4096)]
    assert paces == sorted(paces) and paces[0] > 1
    assert slowest_gpu_slowdown(1024, 0.0) == 1.0


def test_a_cv_that_would_stop_the_slowest_gpu_is_refused():
    with pytest.raises(ValueError, match="gpu_speed_cv=0.5"):
        slowest_gpu_slowdown(1024, 0.5)
    with pytest.raises(ValueError, match=r"gpu_speed_cv=0.3: must be in \[0, 0.2\)"):
        CostParams(gpu_speed_cv=0.3)


def test_the_wait_comes_out_of_busy_time_only():
    breakdown = {"compute": 8.0, "optimizer": 2.0, "exposed_ep": 1.0, "pipeline_bubble": 0.5}
    typical = with_variation_wait(breakdown, 1.25)
    assert typical["compute"] == pytest.approx(6.4)
    assert typical["optimizer"] == pytest.approx(1.6)
    assert typical["exposed_ep"] == 1.0 and typical["pipeline_bubble"] == 0.5
    assert typical[VARIATION_KEY] == pytest.approx(2.0)
    assert sum(typical.values()) == pytest.approx(sum(breakdown.values()))


def test_a_step_runs_at_the_slowest_gpus_pace(make_scenario):
    base = make_scenario(tp=1, pp=2, vpp=2, ep=4)
    steady = run_scenario(replace(base, params=replace(base.params, gpu_speed_cv=0.0)))
    varied = run_scenario(replace(base, params=replace(base.params, gpu_speed_cv=0.02)))
    pace = slowest_gpu_slowdown(base.plan.num_gpus, 0.02)
    assert VARIATION_KEY not in steady.metrics.breakdown_s
    assert steady.metrics.step_time_s < varied.metrics.step_time_s
    assert varied.metrics.step_time_s <= steady.metrics.step_time_s * pace * (1 + 1e-9)
    assert sum(varied.metrics.breakdown_s.values()) == pytest.approx(varied.metrics.step_time_s)
    assert varied.metrics.breakdown_s["compute"] == pytest.approx(
        steady.metrics.breakdown_s["compute"], rel=1e-2)
