"""Pipeline schedules: 1F1B warm-up counts, the steady-state (forward, backward) pairs that
EP all-to-all overlap runs against each other, and the order in which a pair's tasks are
issued (Megatron's combined 1F1B)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.scenario import run_scenario
from workloads.parallelism import ParallelPlan
from workloads.recipes import recipe, recipe_with
from workloads.schedules import RankSchedule, Unit, one_f_one_b, warmup_forwards
from workloads.step import StepSpec, build_step

PLANS = [(1, 1, 8), (4, 1, 8), (4, 2, 8), (2, 8, 4)]  # (pp, vpp, micro batches)


def _pairs(schedule: RankSchedule) -> list[tuple[Unit, ...]]:
    return [schedule.units[i:i + 2] for i in schedule.pair_starts()]


@pytest.mark.parametrize("pp, vpp, microbatches", PLANS)
def test_overlap_adds_one_warmup_forward_on_every_rank(pp, vpp, microbatches):
    for rank in range(pp):
        plain = warmup_forwards(rank, pp, vpp, microbatches)
        assert warmup_forwards(rank, pp, vpp, microbatches, a2a_overlap=True) == plain + 1
        schedule = one_f_one_b(rank, pp, vpp, microbatches, a2a_overlap=True)
        assert schedule.warmup == plain + 1
        assert sorted(schedule.units, key=repr) == sorted(
            one_f_one_b(rank, pp, vpp, microbatches).units, key=repr)


@pytest.mark.parametrize("pp, vpp, microbatches", PLANS)
def test_with_overlap_no_pair_runs_a_forward_against_its_own_backward(pp, vpp, microbatches):
    for rank in range(pp):
        schedule = one_f_one_b(rank, pp, vpp, microbatches, a2a_overlap=True)
        for forward, backward in _pairs(schedule):
            assert (forward.phase, backward.phase) == ("F", "B")
            assert (forward.microbatch, forward.chunk) != (backward.microbatch, backward.chunk)


@pytest.mark.parametrize("pp, vpp, microbatches", PLANS)
def test_without_the_extra_forward_the_last_stage_pairs_a_unit_with_itself(
        pp, vpp, microbatches):
    schedule = one_f_one_b(pp - 1, pp, vpp, microbatches)
    forward, backward = _pairs(schedule)[0]
    assert (forward.microbatch, forward.chunk) == (backward.microbatch, backward.chunk)


def test_all_to_all_overlap_hides_expert_traffic_without_pipelining(make_scenario):
    """pp = 1: forward k+1 runs against backward k, so the step is shorter with the overlap
    and less of its expert-parallel traffic is exposed."""
    overlapped = make_scenario(tp=1, pp=1, ep=8)
    serial = replace(overlapped, recipe=recipe_with(recipe("mbridge-26.06"), a2a_overlap=False))
    with_overlap, without = (run_scenario(s).metrics for s in (overlapped, serial))
    assert with_overlap.step_time_s < without.step_time_s
    assert with_overlap.breakdown_s["exposed_ep"] < without.breakdown_s["exposed_ep"]


def test_a_pair_is_issued_in_megatrons_combined_1f1b_order(small_moe):
    """Forward 1 against backward 0 (pp = 1), MoE layer 2 of each: backward combine, forward
    attention and router, forward dispatch, backward experts and dispatch, forward experts
    (after the host reads the token counts) and combine, backward router and attention."""
    plan = ParallelPlan(num_gpus=16, mbs=1, gbs=32, seq_len=256, tp=1, pp=1, ep=8)
    eager_experts = recipe_with(recipe("mbridge-26.06"), cuda_graphs="partial",
                                rank_capacity_factor=None)
    graph = build_step(StepSpec(model=small_moe, plan=plan, recipe=eager_experts))
    tasks = sorted((t for t in graph.tasks if t.rank == 0 and "/2t." in t.name
                    and ("/F1/" in t.name or "/B0/" in t.name)), key=lambda t: t.position)
    order = [(t.name.split("/")[1][0], t.name.rsplit(".", 1)[1]) for t in tasks]
    assert order == [("B", "unpermute"), ("B", "combine"),
                     ("F", "norms"), ("F", "attn_proj"), ("F", "core_attn"), ("F", "router"),
                     ("F", "dispatch"),
                     ("B", "experts"), ("B", "dispatch"), ("B", "shared_expert"),
                     ("F", "experts"), ("F", "combine"), ("F", "unpermute"),
                     ("F", "shared_expert"), ("F", "join"),
                     ("B", "router"), ("B", "core_attn"), ("B", "attn_proj"), ("B", "norms")]
    assert [t.name.rsplit(".", 1)[1] for t in tasks if t.host_sync] == ["experts"]
    assert next(t for t in tasks if t.host_sync).name.split("/")[1] == "F1"
