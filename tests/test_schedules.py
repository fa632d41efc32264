"""Pipeline schedules: 1F1B warm-up counts, the steady-state (forward, backward) pairs that
EP all-to-all overlap runs against each other, the order in which a pair's tasks are issued
(Megatron's combined 1F1B), and DualPipeV's V-shaped order and its rules."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reports.summary import format_summary
from simulator.memory import estimate_memory
from simulator.results import result_document
from simulator.scenario import check_scenario, run_scenario
from workloads.parallelism import ParallelPlan
from workloads.recipes import recipe, recipe_with
from workloads.schedules import (RankSchedule, Unit, activations_in_flight, chunk_stages,
                                 dualpipe_v, one_f_one_b, rank_of_stage, rank_schedule,
                                 warmup_forwards)
from workloads.step import StepSpec, build_step

PLANS = [(1, 1, 8), (4, 1, 8), (4, 2, 8), (2, 8, 4)]  # (pp, vpp, micro batches)


def _pairs(schedule: RankSchedule) -> list[tuple[Unit, ...]]:
    return [schedule.units[i:i + 2] for i in schedule.pair_starts]


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
    attention, shared expert and router, forward dispatch, backward experts and dispatch,
    forward experts (after the host reads the token counts) and combine, backward router and
    attention; the forward combine's post-processing only then, so that the attention runs
    under the combine on an in-order compute stream."""
    plan = ParallelPlan(num_gpus=16, mbs=1, gbs=32, seq_len=256, tp=1, pp=1, ep=8)
    eager_experts = recipe_with(recipe("mbridge-26.06"), cuda_graphs="partial",
                                rank_capacity_factor=None)
    graph = build_step(StepSpec(model=small_moe, plan=plan, recipe=eager_experts))
    tasks = sorted((t for t in graph.tasks if t.rank == 0 and "/2t." in t.name
                    and ("/F1/" in t.name or "/B0/" in t.name)), key=lambda t: t.position)
    order = [(t.name.split("/")[1][0], t.name.rsplit(".", 1)[1]) for t in tasks]
    assert order == [("B", "unpermute"), ("B", "combine"),
                     ("F", "norms"), ("F", "attn_proj"), ("F", "core_attn"),
                     ("F", "shared_expert"), ("F", "router"),
                     ("F", "dispatch"),
                     ("B", "experts"), ("B", "dispatch"), ("B", "shared_expert"),
                     ("F", "experts"), ("F", "combine"),
                     ("B", "router"), ("B", "core_attn"), ("B", "attn_proj"), ("B", "norms"),
                     ("F", "unpermute"), ("F", "join")]
    assert [t.name.rsplit(".", 1)[1] for t in tasks if t.host_sync] == ["experts"]
    assert next(t for t in tasks if t.host_sync).name.split("/")[1] == "F1"


def test_an_overlapped_shared_expert_is_launched_with_the_dispatch_and_runs_under_it(
        small_moe, make_scenario):
    """With `shared_expert_overlap` the forward shared expert follows the router in launch
    order, so on the in-order compute stream it runs while the dispatch is in flight; without
    it, Megatron computes it before routing (`MoELayer.shared_experts_compute`)."""
    plan = ParallelPlan(num_gpus=16, mbs=1, gbs=32, seq_len=256, tp=1, pp=1, ep=8)
    serial = recipe_with(recipe("mbridge-26.06"), a2a_overlap=False)
    for overlap, step in ((True, -1), (False, 1)):
        graph = build_step(StepSpec(model=small_moe, plan=plan,
                                    recipe=recipe_with(serial, shared_expert_overlap=overlap)))
        layer = [t.name.rsplit(".", 1)[1] for t in sorted(graph.tasks, key=lambda t: t.position)
                 if t.rank == 0 and "/F0/" in t.name and "/2t." in t.name]
        assert layer[layer.index("shared_expert") + step] == "router"
    scenario = make_scenario(tp=1, pp=1, ep=8)
    scenario = replace(scenario, recipe=recipe_with(scenario.recipe, a2a_overlap=False))
    hidden = replace(scenario, recipe=recipe_with(scenario.recipe, shared_expert_overlap=True))
    assert run_scenario(hidden).metrics.step_time_s < run_scenario(scenario).metrics.step_time_s


def test_an_uncaptured_shared_expert_runs_after_the_dispatchs_host_sync(small_moe):
    """Before the moe_router graph scope captured it (recipe.graph_shared_expert off, the GB200
    guide's steps 00-08), Megatron computed the shared expert in `experts_compute`: after the
    dispatch, launched once the host has read the token counts, ahead of the routed experts."""
    plan = ParallelPlan(num_gpus=16, mbs=1, gbs=32, seq_len=256, tp=1, pp=1, ep=8)
    eager = recipe_with(recipe("mbridge-26.02"), shared_expert_overlap=False,
                        graph_shared_expert=False)
    graph = build_step(StepSpec(model=small_moe, plan=plan, recipe=eager))
    layer = [t for t in sorted(graph.tasks, key=lambda t: t.position)
             if t.rank == 0 and "/F0/" in t.name and "/2t." in t.name]
    names = [t.name.rsplit(".", 1)[1] for t in layer]
    assert names.index("dispatch") < names.index("shared_expert") == names.index("experts") - 1
    assert [t.name.rsplit(".", 1)[1] for t in layer if t.host_sync] == ["shared_expert"]


def test_a_chunks_forwards_and_nothing_else_wait_for_its_parameter_gathers(small_moe):
    """Overlapped parameter gathering: the step launches every chunk's all-gathers first, and
    on the in-order compute stream only that chunk's forwards may wait for them (a wait at
    the head of the step would hold the stream until every chunk's gather ended)."""
    plan = ParallelPlan(num_gpus=16, mbs=1, gbs=64, seq_len=256, tp=1, pp=2, vpp=2, ep=4)
    graph = build_step(StepSpec(model=small_moe, plan=plan, recipe=recipe("mbridge-26.06")))
    tasks = [t for t in graph.tasks if t.rank == 0]
    gathers = {t.id: t.chunk if t.chunk >= 0 else int(t.name.split("/c")[1].split("/")[0])
               for t in tasks if "/ag/" in t.name}
    assert gathers and all(graph.tasks[i].collective is not None for i in gathers)
    waiting = [t for t in tasks if set(t.deps) & set(gathers)]
    assert {t.microbatch for t in waiting} == set(range(plan.num_microbatches))
    for task in waiting:
        assert "/F" in task.name and task.work is not None
        assert {gathers[d] for d in task.deps if d in gathers} == {task.chunk}


@pytest.mark.parametrize("pp, vpp", [(1, 1), (2, 1), (2, 2)])
def test_fsdp_gathers_and_reduces_per_micro_batch_alone_but_once_a_step_under_a_pipeline(
        small_moe, pp, vpp):
    """Without a pipeline every unit gathers its chunk's parameters and every backward
    reduces its gradients; under one (PyTorch's pipeline stage, TorchTitan, AutoModel) each
    chunk gathers before its first forward and reduces after its last backward."""
    plan = ParallelPlan(num_gpus=16, mbs=1, gbs=64, seq_len=256, pp=pp, vpp=vpp, ep=4,
                        dp_sharding="fsdp")
    graph = build_step(StepSpec(model=small_moe, plan=plan, recipe=recipe("megatron-defaults")))
    names = [t.name for t in graph.tasks if t.rank == 0 and t.collective is not None]
    gathers = [n for n in names if "/fsdp_ag/" in n]
    reductions = [n for n in names if "/fsdp_rs/" in n or "/rs/" in n]
    units = plan.num_microbatches * vpp
    expected = (vpp, vpp) if pp > 1 else (2 * units, units)
    assert (len({n.split("/fsdp_ag/")[0] for n in gathers}),
            len({n.rsplit("/", 1)[0] for n in reductions})) == expected
    first_forwards = {f"0/F0/v{chunk_stages('1f1b', 0, pp, vpp)[c]}" for c in range(vpp)}
    if pp > 1:
        assert {n.split("/fsdp_ag/")[0] for n in gathers} == first_forwards
    # What stays gathered stays in memory: under a pipeline the whole stage's weights.
    fsdp = estimate_memory(small_moe, plan, recipe("megatron-defaults"), 0)
    optimizer = estimate_memory(small_moe, replace(plan, dp_sharding="distributed-optimizer"),
                                recipe("megatron-defaults"), 0)
    assert (fsdp.weights_bytes == optimizer.weights_bytes) == (pp > 1)
    assert fsdp.optimizer_bytes == optimizer.optimizer_bytes


@pytest.mark.parametrize("schedule, vpp", [("1f1b", 1), ("1f1b", 2), ("dualpipev", 2)])
def test_a_schedule_run_per_local_batch_repeats_with_micro_batches_numbered_on(schedule, vpp):
    once = rank_schedule(schedule, 1, 2, vpp, 4, a2a_overlap=True)
    twice = rank_schedule(schedule, 1, 2, vpp, 4, a2a_overlap=True, runs=2)
    size = len(once.units)
    assert twice.units[:size] == once.units
    assert twice.units[size:] == tuple(replace(u, microbatch=u.microbatch + 4)
                                       for u in once.units)
    assert twice.pair_starts == once.pair_starts + tuple(i + size for i in once.pair_starts)


def test_a_local_batch_refills_the_pipeline_but_gathers_and_reduces_once_a_step(make_scenario):
    """AutoModel runs the pipeline schedule once per local batch (Recipe.local_batch_size):
    8 sequences per DP rank in local batches of 2 are four schedules of two micro batches,
    each with its own warm-up and drain, so the step is longer (long sequences, so that the
    GPU and not the host sets its pace); FSDP still gathers each chunk once a step."""
    scenario = make_scenario(tp=1, pp=2, ep=4, dp_sharding="fsdp",
                             recipe_=recipe("automodel-2026"))
    scenario = replace(scenario, plan=replace(scenario.plan, gbs=64, seq_len=65536))
    whole = replace(scenario, recipe=recipe_with(scenario.recipe, local_batch_size=0))
    local = replace(scenario, recipe=recipe_with(scenario.recipe, local_batch_size=2))
    graphs = [build_step(StepSpec(model=s.model, plan=s.plan, recipe=s.recipe))
              for s in (whole, local)]
    for graph in graphs:
        names = [t.name for t in graph.tasks if t.rank == 0]
        assert sum(n.endswith("/end") for n in names) == 2 * scenario.plan.num_microbatches
        assert len({n.split("/fsdp_ag/")[0] for n in names if "/fsdp_ag/" in n}) == 1
        assert len({n.rsplit("/", 1)[0] for n in names if "/fsdp_rs/" in n or "/rs/" in n}) == 1
    result = run_scenario(local)
    assert result.metrics.step_time_s > 1.05 * run_scenario(whole).metrics.step_time_s
    assert ("8 micro batches per DP rank in 4 pipeline schedules of 2"
            in format_summary(result_document(result)))


@pytest.mark.parametrize("local_batch_size", [3, 16])
def test_a_local_batch_that_does_not_split_the_batch_is_a_one_line_error(
        make_scenario, local_batch_size):
    scenario = make_scenario(tp=1, pp=2, ep=4, recipe_=recipe_with(
        recipe("automodel-2026"), local_batch_size=local_batch_size))
    with pytest.raises(ValueError, match=f"local_batch_size={local_batch_size}: must be a "
                       "multiple of mbs=1 that divides each DP rank's gbs/dp=4 sequences"):
        check_scenario(scenario)


def _host_nodes(graph, unit: str) -> int:
    return sum(t.host_nodes for t in graph.tasks if t.rank == 0 and f"/{unit}/" in t.name)


def test_a_paired_units_phases_are_schedule_nodes_for_the_host(small_moe):
    """pp = 1, two micro batches per rank: forward 1 runs against backward 0. Each phase of a
    paired unit's layout symbols (embedding, 4 layers, loss: 6 of 3 phases)
    and its end is one schedule node the host runs (a node without tasks of its own is
    charged to the next task the host launches, maybe the other unit's); a unit outside a
    pair (forward 0, the last backward), a step without the overlap and a full-iteration
    graph have none."""
    plan = ParallelPlan(num_gpus=16, mbs=1, gbs=32, seq_len=256, tp=1, pp=1, ep=8)
    eager = recipe_with(recipe("mbridge-26.06"), cuda_graphs="partial")
    graph = build_step(StepSpec(model=small_moe, plan=plan, recipe=eager))
    nodes = 6 * 3 + 1
    assert _host_nodes(graph, "F1") + _host_nodes(graph, "B0") == 2 * nodes
    assert _host_nodes(graph, "F1") > 0 and _host_nodes(graph, "B0") > 0
    assert _host_nodes(graph, "F0") == _host_nodes(graph, "B1") == 0
    assert sum(t.host_nodes for t in graph.tasks if t.rank == 0) == 2 * nodes
    for other in (recipe_with(eager, a2a_overlap=False), recipe("mbridge-26.06")):
        graph = build_step(StepSpec(model=small_moe, plan=plan, recipe=other))
        assert all(t.host_nodes == 0 for t in graph.tasks)


def test_schedule_node_host_time_slows_an_eager_overlapped_step_only(make_scenario):
    """The host's per-node bookkeeping delays an eager combined 1F1B; a full-iteration graph
    replays the step without the host, so its step time does not move."""
    full = make_scenario(tp=1, pp=1, ep=8)
    eager = replace(full, recipe=recipe_with(full.recipe, cuda_graphs="none"))
    for scenario, slower in ((eager, True), (full, False)):
        cheap, dear = (run_scenario(replace(scenario, params=replace(
            scenario.params, schedule_node_host_s=seconds))).metrics.step_time_s
            for seconds in (0.0, 200e-6))
        assert (dear > cheap) if slower else dear == cheap


def _synced_units(graph, rank: int) -> list[str]:
    return [t.name.split("/")[1] for t in sorted(graph.tasks, key=lambda t: t.position)
            if t.rank == rank and t.name.endswith("/p2p_sync")]


def test_without_interleaving_the_host_syncs_at_every_pipeline_exchange(small_moe):
    """Megatron's non-interleaved 1F1B synchronises the device after each batched send and
    receive: pp = 2, four micro batches, one warmup forward on the first stage. The first
    stage exchanges after each forward (it sends it, and in the steady state receives a
    gradient), so before the second forward and every backward, and not after a backward
    (it sends no gradient); the last stage before each forward (it receives the input, and
    from the second on sent a gradient) and not between a forward and its own backward. Each
    sync waits for the unit's inputs and the send before it."""
    plan = ParallelPlan(num_gpus=16, mbs=1, gbs=32, seq_len=256, tp=1, pp=2, ep=8)
    eager = recipe_with(recipe("mbridge-26.02"), cuda_graphs="none")
    graph = build_step(StepSpec(model=small_moe, plan=plan, recipe=eager))
    last = plan.ranks_per_stage
    assert _synced_units(graph, 0) == ["F1", "B0", "B1", "B2", "B3"]
    assert _synced_units(graph, last) == ["F0", "F1", "F2", "F3"]
    by_name = {t.name: t for t in graph.tasks}
    sync = by_name[f"{last}/F1/v1/p2p_sync"]
    assert sync.host_sync and sync.work is not None and sync.work.kernels == 0
    waits = {graph.tasks[d].name for d in sync.deps}
    assert waits >= {f"{last}/B0/v1/end", f"{last}/B0/v1/send", "0/F1/v0/send"}


def test_pytorchs_pipeline_schedules_do_not_sync_the_host_at_exchanges(small_moe):
    """TorchTitan and AutoModel pipeline with PyTorch's schedules, which make the stream, not
    the host, wait for an exchange; Megatron's non-interleaved 1F1B synchronises."""
    plan = ParallelPlan(num_gpus=16, mbs=1, gbs=32, seq_len=256, tp=1, pp=2, ep=8)
    for name in ("torchtitan-2025", "automodel-2026"):  # gbs 64: AutoModel's local batch of 8
        graph = build_step(StepSpec(model=small_moe, plan=replace(plan, gbs=64),
                                    recipe=recipe(name)))
        assert _synced_units(graph, 0) == [] and not recipe(name).p2p_host_sync
    graph = build_step(StepSpec(model=small_moe, plan=plan, recipe=recipe("megatron-defaults")))
    assert _synced_units(graph, 0) == ["F1", "B0", "B1", "B2", "B3"]


@pytest.mark.parametrize("changes", [{"vpp": 2}, {"pp": 1}])
def test_interleaved_or_unpipelined_steps_do_not_sync_at_exchanges(small_moe, changes):
    plan = ParallelPlan(num_gpus=16, mbs=1, gbs=32, seq_len=256, tp=1, pp=2, ep=8)
    eager = recipe_with(recipe("mbridge-26.02"), cuda_graphs="none")
    graph = build_step(StepSpec(model=small_moe, plan=replace(plan, **changes), recipe=eager))
    assert not any(t.name.endswith("/p2p_sync") for t in graph.tasks)


def test_the_exchange_sync_slows_an_eager_pipeline_that_ran_ahead(make_scenario, monkeypatch):
    """An eager host that ran ahead of the GPU loses that lead at every exchange."""
    scenario = make_scenario(tp=1, pp=2, ep=8, recipe_=recipe_with(
        recipe("mbridge-26.02"), cuda_graphs="none"))
    synced = run_scenario(scenario).metrics.step_time_s
    monkeypatch.setattr("workloads.step.syncs_after_p2p", lambda recipe_, plan: False)
    assert run_scenario(scenario).metrics.step_time_s < synced


@pytest.mark.parametrize("pp, microbatches", [(2, 4), (4, 8), (4, 11), (8, 20)])
def test_dualpipev_runs_each_unit_once_in_order_and_pairs_one_chunk_against_the_other(
        pp, microbatches):
    """Every rank runs each micro batch forward and backward through both of its chunks, in
    micro-batch order, a backward after its forward; an overlapped pair is a forward of one
    chunk against a backward of the other: (F0 & B1) and (F1 & B0) m - 2 pp + r + 1 times,
    (F1 & B0) pp - r - 1 more, less the middle rank's first (F0, B1), run unpaired."""
    for rank in range(pp):
        schedule = dualpipe_v(rank, pp, microbatches)
        for phase in "FB":
            for chunk in (0, 1):
                assert [u.microbatch for u in schedule.units
                        if (u.phase, u.chunk) == (phase, chunk)] == list(range(microbatches))
        position = {unit: index for index, unit in enumerate(schedule.units)}
        assert all(position[Unit("F", unit.microbatch, unit.chunk)] < index
                   for unit, index in position.items() if unit.phase == "B")
        pairs = _pairs(schedule)
        assert all((f.phase, b.phase) == ("F", "B") and f.chunk != b.chunk for f, b in pairs)
        main = microbatches - 2 * pp + rank + 1
        assert len(pairs) == 2 * main + (pp - rank - 1) - (rank == pp - 1)


@pytest.mark.parametrize("schedule, vpp", [("1f1b", 1), ("1f1b", 3), ("dualpipev", 2)])
def test_each_virtual_stage_is_run_by_the_rank_that_holds_it(schedule, vpp):
    """Interleaved 1F1B loops the virtual stages over the ranks; DualPipeV folds them in a V,
    so that rank 0 holds the first and the last."""
    pp = 4
    held = [v for rank in range(pp) for v in chunk_stages(schedule, rank, pp, vpp)]
    assert sorted(held) == list(range(pp * vpp))
    for rank in range(pp):
        assert all(rank_of_stage(schedule, v, pp) == rank
                   for v in chunk_stages(schedule, rank, pp, vpp))
    assert (chunk_stages(schedule, 0, pp, vpp)[-1] == pp * vpp - 1) == (schedule == "dualpipev")


def test_dualpipev_holds_two_pp_chunks_of_activations_at_its_peak():
    """After its warm-up every rank holds 2 pp chunks; overlapped pairs free a layer as they
    store one, so only the middle rank's unpaired first forward, or a step without the
    overlap, adds one."""
    pp, microbatches = 4, 12
    assert [activations_in_flight("dualpipev", r, pp, 2, microbatches, True)
            for r in range(pp)] == [8, 8, 8, 9]
    assert [activations_in_flight("dualpipev", r, pp, 2, microbatches, False)
            for r in range(pp)] == [9] * pp


def test_dualpipev_steps_overlap_expert_traffic_under_the_other_chunks_compute(make_scenario):
    """pp = 2, four micro batches: the same DualPipeV step with its F&B pairs overlapped is
    shorter and exposes less expert-parallel traffic than run unpaired, and its two chunks
    share the ranks' layers with neither a rank nor a stage left out."""
    base = make_scenario(tp=1, pp=2, vpp=2, ep=4)
    paired = replace(base, recipe=recipe_with(base.recipe, pipeline_schedule="dualpipev"))
    unpaired = replace(paired, recipe=recipe_with(paired.recipe, a2a_overlap=False))
    results = [run_scenario(s) for s in (paired, unpaired)]
    with_overlap, without = (r.metrics for r in results)
    assert with_overlap.step_time_s < without.step_time_s
    assert with_overlap.breakdown_s["exposed_ep"] < without.breakdown_s["exposed_ep"]
    stages = {name.split("/")[2] for name in (t.name for t in results[0].trace.records)
              if name.count("/") >= 3 and name.split("/")[1][:1] in "FB"}
    assert stages == {"v0", "v1", "v2", "v3"}


@pytest.mark.parametrize("plan, changes, message", [
    (dict(pp=2, vpp=1, ep=4), dict(pipeline_schedule="dualpipev"), "set vpp=2"),
    (dict(pp=4, vpp=2, ep=4, gbs=16), dict(pipeline_schedule="dualpipev"),
     "needs at least 2\\*pp=8"),
    (dict(pp=4, vpp=2, ep=4, gbs=24), {}, "needs a multiple of pp=4"),
])
def test_a_schedule_the_pipeline_cannot_run_is_a_one_line_error(make_scenario, plan, changes,
                                                                message):
    """DualPipeV needs two chunks per rank and at least 2 pp micro batches; interleaved 1F1B
    a multiple of pp."""
    scenario = make_scenario(tp=1)
    parallel = ParallelPlan(num_gpus=16, mbs=1, seq_len=256, **{"gbs": 32, **plan})
    scenario = replace(scenario, plan=parallel,
                       recipe=recipe_with(scenario.recipe, **changes))
    with pytest.raises(ValueError, match=message) as failure:
        check_scenario(scenario)
    assert "\n" not in str(failure.value)
