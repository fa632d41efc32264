"""Invariants of whole training steps: a small MoE on 16 GB300 NVL72 GPUs in two NVLink domains
of 8, so that pipeline, data-parallel and (with domains of 4) expert traffic crosses the
scale-out fabric.

- folding the symmetric ranks changes nothing but the speed of the simulator;
- more link bandwidth never slows a step;
- model FLOPs do not depend on the plan;
- the metrics agree with each other and the breakdown adds up to the step time;
- the replay respects dependencies, host issue and one task at a time per lane;
- the same inputs give the same outputs.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from simulator.engine import simulate
from simulator.metrics import rank_breakdown
from simulator.scenario import run_scenario, scenario_topology
from topologies.hardware import gpu_spec
from topologies.systems import load_system, system_with
from workloads.flops import model_flops_per_step
from workloads.graph import Op
from workloads.parallelism import stage_of
from workloads.recipes import recipe, recipe_with
from workloads.step import StepSpec, build_step

GB300 = load_system("gb300-nvl72")
PP2_VPP2_EP4 = {"tp": 1, "pp": 2, "vpp": 2, "ep": 4}
TP2_EP8 = {"tp": 2, "pp": 1, "ep": 8}
EP8 = {"tp": 1, "pp": 1, "ep": 8}
PP4_EP4 = {"tp": 1, "pp": 4, "ep": 4}
PLANS = {"pp2-vpp2-ep4": PP2_VPP2_EP4, "tp2-ep8": TP2_EP8, "ep8": EP8}


def _plan_id(plan: dict[str, int]) -> str:
    return "-".join(f"{key}{value}" for key, value in plan.items())


# --- folding --------------------------------------------------------------------------------

@pytest.mark.parametrize("plan, software", [
    (PP2_VPP2_EP4, "mbridge-26.06"),
    (TP2_EP8, "mbridge-26.06"),
    (TP2_EP8, "mbridge-25.11"),
    (PP4_EP4, "mbridge-26.06"),
], ids=lambda value: _plan_id(value) if isinstance(value, dict) else value)
def test_a_folded_run_equals_the_unfolded_run(run_small, plan, software):
    folded = run_small(folded=True, recipe_=recipe(software), **plan)
    unfolded = run_small(folded=False, recipe_=recipe(software), **plan)
    assert len(folded.trace.simulated_ranks) < len(unfolded.trace.simulated_ranks) == 16
    assert folded.metrics.step_time_s == pytest.approx(unfolded.metrics.step_time_s, rel=1e-3)


@pytest.mark.parametrize("plan", [
    PP2_VPP2_EP4, TP2_EP8,
    PP4_EP4,
], ids=_plan_id)
def test_folded_collectives_stand_for_the_instances_of_their_own_stage(make_scenario, plan):
    # A folded task of rank r stands for every instance of its collective among the GPUs of
    # r's pipeline stage: r is in one of its groups (the sender, for a pipeline send), and
    # every sender or group member belongs to that stage (a pipeline send's peer does not).
    scenario = make_scenario(**plan)
    graph = build_step(StepSpec(model=scenario.model, plan=scenario.plan,
                                recipe=scenario.recipe), folded=True)
    checked = 0
    for task in graph.tasks:
        if task.collective is None:
            continue
        stage = stage_of(scenario.plan, task.rank)
        groups = task.collective.groups
        if task.collective.op is Op.SEND_RECV:
            senders = [pair[0] for pair in groups]
            assert task.rank in senders, task.name
            assert {stage_of(scenario.plan, r) for r in senders} == {stage}, task.name
            assert len(groups) == scenario.plan.ranks_per_stage, task.name
        else:
            assert any(task.rank in group for group in groups), task.name
            members = {rank for group in groups for rank in group}
            assert {stage_of(scenario.plan, r) for r in members} == {stage}, task.name
        checked += 1
    assert checked > 0


# --- more bandwidth never slows a step ------------------------------------------------------

@pytest.mark.parametrize("plan", list(PLANS.values()), ids=list(PLANS))
@pytest.mark.parametrize("domain_size", [8, 4])
def test_a_faster_nic_never_slows_the_step(run_small, plan, domain_size):
    cx8 = run_small(system=GB300, domain_size=domain_size, **plan).metrics.step_time_s
    cx7 = run_small(system=system_with(GB300, nic="connectx-7"), domain_size=domain_size,
                    **plan).metrics.step_time_s
    assert cx8 <= cx7
    if domain_size == 4:
        # EP or DP traffic crosses domains on the critical path: half the NIC rate shows.
        assert cx8 < cx7


@pytest.mark.parametrize("plan", list(PLANS.values()), ids=list(PLANS))
def test_a_non_blocking_fabric_never_slows_the_step(run_small, plan):
    # Domains of 4 put expert-parallel all-to-all across rails, so through the spine.
    blocking = system_with(GB300, oversubscription=2.0)
    full = run_small(system=GB300, domain_size=4, **plan).metrics.step_time_s
    halved = run_small(system=blocking, domain_size=4, **plan).metrics.step_time_s
    assert full <= halved


NCCL_A2A = recipe_with(recipe("mbridge-26.06"), dispatcher="alltoall", dispatcher_sms=0)


def test_oversubscription_slows_cross_rail_expert_traffic(run_small):
    # NCCL's all-to-all sends every pair its share directly, so across rails via the spine.
    blocking = system_with(GB300, oversubscription=2.0)
    full = run_small(system=GB300, domain_size=4, recipe_=NCCL_A2A, **EP8).metrics.step_time_s
    assert full < run_small(system=blocking, domain_size=4, recipe_=NCCL_A2A,
                            **EP8).metrics.step_time_s


def test_rail_aligned_dispatch_does_not_cross_the_spine(run_small):
    # HybridEP sends a token once per remote domain to the GPU at its own local position
    # (same rail) and forwards it over NVLink there: an oversubscribed spine is never used.
    blocking = system_with(GB300, oversubscription=2.0)
    full = run_small(system=GB300, domain_size=4, **EP8).metrics
    halved = run_small(system=blocking, domain_size=4, **EP8).metrics
    assert full.breakdown_s["exposed_ep"] > 0
    assert halved.step_time_s == pytest.approx(full.step_time_s)


@pytest.mark.parametrize("tier", ["nvlink", "nic"])
@pytest.mark.parametrize("plan", [PP2_VPP2_EP4, TP2_EP8], ids=_plan_id)
def test_scaling_a_tier_up_never_slows_the_step(make_scenario, plan, tier):
    scenario = make_scenario(**plan)
    topology = scenario_topology(scenario)
    graph = build_step(StepSpec(model=scenario.model, plan=scenario.plan,
                                recipe=scenario.recipe))
    links = [index for index, link in enumerate(topology.links) if link.tier == tier]
    times = [simulate(graph, topology.with_capacity_scaled(links, factor), scenario.params,
                      nvls=scenario.recipe.nccl_nvls).step_time_s
             for factor in (0.5, 1.0, 2.0, 4.0)]
    assert all(slower >= faster for slower, faster in zip(times, times[1:])), times
    assert times[0] > times[-1], times


# --- model FLOPs and metrics ----------------------------------------------------------------

def test_model_flops_do_not_depend_on_the_plan(run_small):
    # Same tp, different pp / vpp / ep / dp: identical Megatron model FLOPs per token.
    tp1_plans = (PP2_VPP2_EP4, EP8, {"tp": 1, "pp": 2, "ep": 8}, {"tp": 1, "pp": 1, "ep": 2})
    tp1 = [run_small(**plan).model_flops_per_token for plan in tp1_plans]
    assert tp1[0] > 0
    assert tp1 == [tp1[0]] * len(tp1)
    tp2_plans = (TP2_EP8, {"tp": 2, "pp": 2, "ep": 4})
    tp2 = [run_small(**plan).model_flops_per_token for plan in tp2_plans]
    assert tp2 == [tp2[0]] * len(tp2)


@pytest.mark.parametrize("plan", list(PLANS.values()), ids=list(PLANS))
def test_metrics_agree_and_the_breakdown_adds_up(run_small, small_moe, plan):
    result = run_small(**plan)
    metrics, scenario = result.metrics, result.scenario
    step, gpus = metrics.step_time_s, scenario.plan.num_gpus
    flops = model_flops_per_step(small_moe, scenario.plan.seq_len, scenario.plan.gbs,
                                 scenario.plan.tp)
    assert metrics.tflops_per_gpu * 1e12 * step * gpus == pytest.approx(flops, rel=1e-9)
    assert result.model_flops_per_token * scenario.plan.seq_len * scenario.plan.gbs \
        == pytest.approx(flops, rel=1e-9)
    tokens = scenario.plan.gbs * scenario.plan.seq_len
    assert metrics.tokens_per_s_per_gpu * step * gpus == pytest.approx(tokens, rel=1e-9)
    peak = gpu_spec(scenario.system.gpu).peak("fp8")  # MXFP8 runs at the FP8 peak
    assert metrics.mfu == pytest.approx(metrics.tflops_per_gpu * 1e12 / peak, rel=1e-9)
    assert 0 < metrics.mfu < 1
    assert step == result.trace.step_time_s > 0
    assert all(value > 0 for value in metrics.breakdown_s.values())
    assert sum(metrics.breakdown_s.values()) == pytest.approx(step, rel=1e-6)
    assert metrics.breakdown_s["compute"] > 0


@pytest.mark.parametrize("plan", [PP2_VPP2_EP4, TP2_EP8], ids=_plan_id)
def test_every_rank_breakdown_adds_up_to_the_step_time(run_small, plan):
    trace = run_small(folded=False, **plan).trace
    by_rank = defaultdict(list)
    for record in trace.records:
        by_rank[record.rank].append(record)
    assert sorted(by_rank) == list(range(16))
    for rank, records in by_rank.items():
        parts = rank_breakdown(records, trace.step_time_s)
        assert all(value >= -1e-15 for value in parts.values()), (rank, parts)
        assert sum(parts.values()) == pytest.approx(trace.step_time_s, rel=1e-6), rank


# --- the replay -----------------------------------------------------------------------------

@pytest.mark.parametrize("folded", [True, False], ids=["folded", "unfolded"])
@pytest.mark.parametrize("software", ["mbridge-26.06", "mbridge-25.11"])
def test_the_replay_respects_dependencies_host_issue_and_lanes(make_scenario, software, folded):
    scenario = make_scenario(recipe_=recipe(software), **PP2_VPP2_EP4)
    graph = build_step(StepSpec(model=scenario.model, plan=scenario.plan,
                                recipe=scenario.recipe), folded=folded)
    trace = simulate(graph, scenario_topology(scenario), scenario.params,
                     nvls=scenario.recipe.nccl_nvls)
    records = trace.records
    assert [record.task_id for record in records] == list(range(len(graph.tasks)))
    tolerance = 1e-12
    for task, record in zip(graph.tasks, records):
        assert record.name == task.name
        assert record.issued_s <= record.start_s + tolerance <= record.end_s + 2 * tolerance
        for dep in task.deps:
            assert records[dep].end_s <= record.start_s + tolerance, (task.name, dep)
    lanes = defaultdict(list)
    for record in records:
        lanes[record.rank, record.lane].append((record.start_s, record.end_s))
    for spans in lanes.values():
        spans.sort()
        assert all(end <= start + tolerance for (_, end), (start, _) in zip(spans, spans[1:]))


def test_members_of_one_unfolded_collective_finish_together(run_small):
    trace = run_small(folded=False, **TP2_EP8).trace
    scenario = run_small(folded=False, **TP2_EP8).scenario
    graph = build_step(StepSpec(model=scenario.model, plan=scenario.plan,
                                recipe=scenario.recipe), folded=False)
    ends = defaultdict(set)
    for task, record in zip(graph.tasks, trace.records):
        if task.collective is not None and len(task.collective.members) > 1:
            ends[task.collective.key].add(record.end_s)
    assert ends
    assert all(len(times) == 1 for times in ends.values())


# --- determinism ----------------------------------------------------------------------------

@pytest.mark.parametrize("folded", [True, False], ids=["folded", "unfolded"])
def test_two_runs_give_identical_results(make_scenario, folded):
    scenario = make_scenario(recipe_=recipe_with(recipe("mbridge-26.06"), cuda_graphs="none"),
                             **TP2_EP8)
    first, second = (run_scenario(scenario, folded=folded) for _ in range(2))
    assert first.metrics.step_time_s == second.metrics.step_time_s
    assert first.metrics == second.metrics
    assert first.trace == second.trace
