"""Steady-state extrapolation: a long step predicted from short ones equals the whole
simulation (its breakdown categories to within 2 % of the step), for plain and interleaved
1F1B and DualPipeV, eager and graphed recipes, with and without all-to-all overlap, and a
schedule run once per local batch; a step whose short samples have not settled is simulated
whole."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator import steady_state
from simulator.scenario import Scenario, run_scenario
from simulator.steady_state import (STEADY_TOLERANCE, WARMUP_DEPTHS, is_settled,
                                    run_steady_state, sample_microbatches, scenario_samples)
from workloads.models import model_spec
from workloads.recipes import Recipe, recipe, recipe_with
from workloads.schedules import SCHEDULES


def test_short_steps_are_simulated_whole():
    assert sample_microbatches(18, 2) is None
    assert sample_microbatches(19, 2) == (4, 6, 8)
    assert sample_microbatches(128, 4) == (8, 12, 16)
    assert sample_microbatches(25, 2, "dualpipev") == (6, 8, 10)
    assert sample_microbatches(24, 2, "dualpipev") is None
    assert sample_microbatches(16, 2, per_run=2) == (2, 4, 6)
    assert sample_microbatches(12, 2, per_run=2) is None
    assert set(WARMUP_DEPTHS) == set(SCHEDULES)


def _software(name: str) -> Recipe:
    if name == "dualpipev":
        return recipe_with(recipe("mbridge-26.02"), pipeline_schedule="dualpipev",
                           a2a_overlap=True, shared_expert_overlap=False)
    if name == "local-batch":
        return recipe_with(recipe("automodel-2026"), local_batch_size=2)
    return recipe(name)


@pytest.mark.parametrize("plan, software, gbs", [
    ({"tp": 1, "pp": 2, "vpp": 2, "ep": 4}, "mbridge-26.06", 160),
    ({"tp": 1, "pp": 4, "ep": 4}, "mbridge-25.11", 160),
    ({"tp": 1, "pp": 4, "vpp": 2, "ep": 4}, "mbridge-26.02", 160),
    ({"tp": 2, "pp": 1, "ep": 8}, "mbridge-gb200-guide-2025-11", 80),
    ({"tp": 1, "pp": 2, "vpp": 2, "ep": 4}, "dualpipev", 200),
    ({"tp": 1, "pp": 2, "ep": 4}, "local-batch", 128),
], ids=["pp2-vpp2-graphed", "pp4-eager", "pp4-vpp2-overlap", "pp1-guide", "pp2-dualpipev",
        "pp2-local-batches"])
def test_extrapolation_equals_the_whole_step(make_scenario, plan, software, gbs):
    software_ = _software(software)
    scenario = make_scenario(recipe_=software_, **plan)
    scenario = replace(scenario, plan=replace(scenario.plan, gbs=gbs))
    assert scenario_samples(scenario) is not None
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


def test_settled_means_the_same_period_over_each_span():
    assert is_settled((4, 6, 8), (2.0, 3.0, 4.0))
    assert is_settled((4, 6, 8), (2.0, 3.0, 4.0 + 0.5 * STEADY_TOLERANCE))
    # mb2511-dsv3-gb300-256-bf16's samples: 0.5616 then 0.5681 s per micro batch.
    assert not is_settled((4, 6, 8), (2.4359, 3.5591, 4.6953))


@pytest.mark.parametrize("tolerance, runs", [(1.0, 3), (-1.0, 4)], ids=["settled", "unsettled"])
def test_an_unsettled_step_is_simulated_whole(make_scenario, monkeypatch, tolerance, runs):
    scenario = make_scenario(tp=1, pp=2, vpp=2, ep=4)
    scenario = replace(scenario, plan=replace(scenario.plan, gbs=160))
    microbatches: list[int] = []

    def counted(run: Scenario):
        microbatches.append(run.plan.num_microbatches)
        return run_scenario(run)
    monkeypatch.setattr(steady_state, "STEADY_TOLERANCE", tolerance)
    monkeypatch.setattr(steady_state, "run_scenario", counted)
    metrics = run_steady_state(scenario)
    assert microbatches == [4, 6, 8, 20][:runs]
    if runs == 4:
        assert metrics == run_scenario(scenario).metrics
