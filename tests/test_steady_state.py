"""Steady-state extrapolation: a long step predicted from two short ones equals the whole
simulation (its breakdown categories to within 2 % of the step), for plain and interleaved
1F1B and DualPipeV, eager and graphed recipes, with and without all-to-all overlap."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.scenario import run_scenario
from simulator.steady_state import WARMUP_DEPTHS, run_steady_state, sample_microbatches
from workloads.models import model_spec
from workloads.recipes import recipe, recipe_with
from workloads.schedules import SCHEDULES


def test_short_steps_are_simulated_whole():
    assert sample_microbatches(6, 2) is None
    assert sample_microbatches(8, 2) == (4, 6)
    assert sample_microbatches(128, 4) == (8, 12)
    assert sample_microbatches(12, 2, "dualpipev") == (6, 8)
    assert sample_microbatches(8, 2, "dualpipev") is None
    assert set(WARMUP_DEPTHS) == set(SCHEDULES)


@pytest.mark.parametrize("plan, software, gbs", [
    ({"tp": 1, "pp": 2, "vpp": 2, "ep": 4}, "mbridge-26.06", 128),
    ({"tp": 1, "pp": 4, "ep": 4}, "mbridge-25.11", 128),
    ({"tp": 1, "pp": 4, "vpp": 2, "ep": 4}, "mbridge-26.02", 128),
    ({"tp": 2, "pp": 1, "ep": 8}, "mbridge-gb200-guide-2025-11", 64),
    ({"tp": 1, "pp": 2, "vpp": 2, "ep": 4}, "dualpipev", 96),
], ids=["pp2-vpp2-graphed", "pp4-eager", "pp4-vpp2-overlap", "pp1-guide", "pp2-dualpipev"])
def test_extrapolation_equals_the_whole_step(make_scenario, plan, software, gbs):
    software_ = (recipe_with(recipe("mbridge-26.02"), pipeline_schedule="dualpipev",
                             a2a_overlap=True, shared_expert_overlap=False)
                 if software == "dualpipev" else recipe(software))
    scenario = make_scenario(recipe_=software_, **plan)
    scenario = replace(scenario, plan=replace(scenario.plan, gbs=gbs))
    assert sample_microbatches(scenario.plan.num_microbatches, scenario.plan.pp,
                               software_.pipeline_schedule) is not None
    whole = run_scenario(scenario).metrics
    extrapolated = run_steady_state(scenario)
    # The step is affine in the micro batches from 2 pp on under 1F1B, from 3 pp under
    # DualPipeV (at 2 pp its host-bound warm-up ran 0.3 % short of the steady period here).
    rel = 1e-6
    assert extrapolated.step_time_s == pytest.approx(whole.step_time_s, rel=rel)
    assert extrapolated.tflops_per_gpu == pytest.approx(whole.tflops_per_gpu, rel=rel)
    assert extrapolated.tokens_per_s_per_gpu == pytest.approx(whole.tokens_per_s_per_gpu,
                                                              rel=rel)
    for key in set(whole.breakdown_s) | set(extrapolated.breakdown_s):
        assert extrapolated.breakdown_s.get(key, 0.0) == pytest.approx(
            whole.breakdown_s.get(key, 0.0), abs=0.02 * whole.step_time_s)


def test_a_plan_that_does_not_fit_fails_before_the_short_runs(make_scenario):
    scenario = make_scenario(tp=1, pp=1, ep=1)
    scenario = replace(scenario, model=model_spec("llama3.1-405b"),
                       plan=replace(scenario.plan, gbs=256))
    with pytest.raises(ValueError, match="GiB"):
        run_steady_state(scenario)
