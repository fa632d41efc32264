"""Exact, hand-computed timelines of tiny task graphs replayed by simulator.engine.

Unless a test says otherwise: the toy GPU runs 1e12 FLOP/s (a task of s * 1e12 FLOPs takes
s seconds), every link of the toy topology moves 1e9 B/s with zero latency, and the cost
parameters are ideal (no launch cost, no kernel gaps, efficiencies 1, no collective overhead).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.engine import TaskRecord, simulate
from topologies.builders import build_topology
from topologies.systems import load_system
from workloads.graph import Collective, GraphBuilder, Lane, Op

GB = 1e9
EXACT = 1e-9


def _run(builder: GraphBuilder, topology, params, ranks: tuple[int, ...],
         **options) -> dict[str, TaskRecord]:
    trace = simulate(builder.build(ranks), topology, params, **options)
    records = {record.name: record for record in trace.records}
    assert trace.step_time_s == max(record.end_s for record in trace.records)
    return records


def _span(record: TaskRecord) -> tuple[float, float]:
    return record.start_s, record.end_s


def _approx(*values: float):
    return pytest.approx(values, rel=EXACT, abs=1e-15)


def _all_reduce(bytes_per_rank: float, group: tuple[int, ...]) -> Collective:
    """NCCL's all-reduce of `bytes_per_rank` over `group`, every member simulated."""
    return Collective(op=Op.ALL_REDUCE, key="ar", bytes_per_rank=bytes_per_rank,
                      groups=(group,), members=group, algorithm="nccl")


def _all_reduce_graph(bytes_per_rank: float, group: tuple[int, ...]) -> GraphBuilder:
    """Each rank of `group` runs `_all_reduce` (task `ar<rank>`) on its DP lane."""
    collective = _all_reduce(bytes_per_rank, group)
    g = GraphBuilder()
    for rank in group:
        g.add(f"ar{rank}", rank=rank, lane=Lane.DP, category="dp", collective=collective)
    return g


# --- lanes ---------------------------------------------------------------------------------

def test_independent_tasks_on_one_compute_lane_run_back_to_back(
        toy_topology, ideal_params, compute):
    g = GraphBuilder()
    g.add("a", rank=0, lane=Lane.COMPUTE, category="compute", work=compute(1.0))
    g.add("b", rank=0, lane=Lane.COMPUTE, category="compute", work=compute(2.0))
    records = _run(g, toy_topology(), ideal_params, (0,))
    assert _span(records["a"]) == _approx(0.0, 1.0)
    assert _span(records["b"]) == _approx(1.0, 3.0)


def test_the_compute_lane_keeps_launch_order_so_a_ready_kernel_waits_behind_a_blocked_one(
        toy_topology, ideal_params, compute):
    # A CUDA stream: "late" (launched second) waits for rank 1's "gate" until t=3 while holding
    # rank 0's compute lane, so "early", ready since t=0, runs only after it.
    g = GraphBuilder()
    g.add("gate", rank=1, lane=Lane.COMPUTE, category="compute", work=compute(3.0))
    g.add("long", rank=0, lane=Lane.COMPUTE, category="compute", work=compute(2.0))
    g.add("late", after=("gate",), rank=0, lane=Lane.COMPUTE, category="compute",
          work=compute(1.0))
    g.add("early", rank=0, lane=Lane.COMPUTE, category="compute", work=compute(1.0))
    records = _run(g, toy_topology(), ideal_params, (0, 1))
    assert _span(records["long"]) == _approx(0.0, 2.0)
    assert _span(records["late"]) == _approx(3.0, 4.0)
    assert _span(records["early"]) == _approx(4.0, 5.0)


def test_a_slower_host_never_makes_the_step_faster(toy_topology, ideal_params, compute):
    # Rank 0 launches "x" (waits for rank 1's "gate") then "y"; rank 1's long "z" needs "x".
    # Were the lane to serve whichever launched kernel is ready, an instant host would run "y"
    # first and delay "z" (step 8 s) while a 1 s-per-launch host would not (step 7 s).
    g = GraphBuilder()
    g.add("gate", rank=1, lane=Lane.COMPUTE, category="compute", work=compute(1.0))
    g.add("x", after=("gate",), rank=0, lane=Lane.COMPUTE, category="compute",
          work=compute(1.0))
    g.add("y", rank=0, lane=Lane.COMPUTE, category="compute", work=compute(3.0))
    g.add("z", after=("x",), rank=1, lane=Lane.COMPUTE, category="compute", work=compute(4.0))
    graph = g.build((0, 1))
    instant = simulate(graph, toy_topology(), ideal_params)
    slow = simulate(graph, toy_topology(), replace(ideal_params, host_launch_s=1.0))
    spans = {r.name: _span(r) for r in instant.records}
    assert spans["x"] == _approx(1.0, 2.0)
    assert spans["y"] == _approx(2.0, 5.0)
    assert spans["z"] == _approx(2.0, 6.0)
    assert instant.step_time_s == pytest.approx(6.0, rel=EXACT)
    assert slow.step_time_s == pytest.approx(7.0, rel=EXACT)


def test_compute_tasks_on_different_ranks_run_concurrently(toy_topology, ideal_params, compute):
    g = GraphBuilder()
    g.add("r0", rank=0, lane=Lane.COMPUTE, category="compute", work=compute(1.5))
    g.add("r1", rank=1, lane=Lane.COMPUTE, category="compute", work=compute(1.0))
    trace = simulate(g.build((0, 1)), toy_topology(), ideal_params)
    spans = {r.name: (r.start_s, r.end_s) for r in trace.records}
    assert spans["r0"] == _approx(0.0, 1.5)
    assert spans["r1"] == _approx(0.0, 1.0)
    assert trace.step_time_s == pytest.approx(1.5, rel=EXACT)
    assert trace.simulated_ranks == (0, 1)


def test_compute_overlaps_a_send_and_a_dependent_compute_waits_for_it(
        toy_topology, ideal_params, compute, send):
    # 2e9 bytes over NVLink gpu0 -> nvsw0 -> gpu1 at 1e9 B/s: [0, 2], under "work" [0, 1].
    g = GraphBuilder()
    g.add("work", rank=0, lane=Lane.COMPUTE, category="compute", work=compute(1.0))
    g.add("send", rank=0, lane=Lane.PP, category="pp", collective=send("s", 0, 1, 2 * GB))
    g.add("after", after=("send",), rank=0, lane=Lane.COMPUTE, category="compute",
          work=compute(1.0))
    records = _run(g, toy_topology(), ideal_params, (0,))
    assert _span(records["work"]) == _approx(0.0, 1.0)
    assert _span(records["send"]) == _approx(0.0, 2.0)
    assert _span(records["after"]) == _approx(2.0, 3.0)


# --- the fluid network ---------------------------------------------------------------------

def _sends_into_gpu0(toy_topology, params, send, sources: tuple[int, ...]):
    g = GraphBuilder()
    for src in sources:
        g.add(f"from{src}", rank=src, lane=Lane.PP, category="pp",
              collective=send(f"s{src}", src, 0, 1 * GB))
    return _run(g, toy_topology(), params, sources)


def test_two_flows_into_one_gpu_share_its_ingress_link(toy_topology, ideal_params, send):
    # Cross-domain routes gpu{2,3} -> nic -> leaf0 -> nic0 -> gpu0 share leaf0->nic0->gpu0.
    alone = _sends_into_gpu0(toy_topology, ideal_params, send, (2,))
    assert _span(alone["from2"]) == _approx(0.0, 1.0)
    both = _sends_into_gpu0(toy_topology, ideal_params, send, (2, 3))
    assert _span(both["from2"]) == _approx(0.0, 2.0)
    assert _span(both["from3"]) == _approx(0.0, 2.0)


def test_max_min_fairness_with_three_flows_over_two_links(
        toy_topology, ideal_params, send, link_index):
    # Flows: a gpu3 -> gpu0, b gpu2 -> gpu0, c gpu2 -> gpu1 (all cross-domain, over the leaf).
    # Every link at 4 GB/s except X = nic0->gpu0 (a, b) at 3 GB/s, Y = gpu2->nic2 (b, c) 1 GB/s.
    # [0, 1]: Y saturates first (b = c = 0.5); a takes the rest of X: 2.5 GB/s.
    #         c (0.5 GB) ends at t=1; a has moved 2.5 of 4.5 GB, b 0.5 of 2.5 GB.
    # [1, 2]: Y holds only b: b = 1 (its bottleneck), a = 3 - 1 = 2 GB/s; a's 2 GB end at t=2.
    # [2, 3]: b alone, still 1 GB/s on Y: its last 1 GB ends at t=3.
    base = toy_topology(nvlink=4 * GB, nic=4 * GB)
    x, y = link_index(base, "nic0", "gpu0"), link_index(base, "gpu2", "nic2")
    topology = base.with_capacity_scaled([x], 0.75).with_capacity_scaled([y], 0.25)
    assert topology.links[x].capacity_bytes_per_s == 3 * GB
    assert topology.links[y].capacity_bytes_per_s == 1 * GB
    g = GraphBuilder()
    g.add("a", rank=3, lane=Lane.PP, category="pp", collective=send("a", 3, 0, 4.5 * GB))
    g.add("b", rank=2, lane=Lane.PP, category="pp", collective=send("b", 2, 0, 2.5 * GB))
    g.add("c", rank=2, lane=Lane.DP, category="dp", collective=send("c", 2, 1, 0.5 * GB))
    records = _run(g, topology, ideal_params, (2, 3))
    assert [records[name].end_s for name in "abc"] == _approx(2.0, 3.0, 1.0)


def test_ring_all_reduce_inside_a_domain(toy_topology, ideal_params):
    # Reduce-scatter then all-gather on the ring 0 -> 1 -> 0: each phase moves half the buffer
    # one way on each GPU's own NVLink port, (2 GB / 2) / 1 GB/s = 1 s per phase.
    group = (0, 1)
    records = _run(_all_reduce_graph(2 * GB, group), toy_topology(), ideal_params, group)
    assert _span(records["ar0"]) == _approx(0.0, 2.0)
    assert _span(records["ar1"]) == _approx(0.0, 2.0)


def test_hierarchical_all_reduce_over_two_domains(toy_topology, ideal_params):
    # Group 0..3, two GPUs per domain: RS inside each domain (1/2 of 4 GB over NVLink at
    # 2 GB/s: 1 s), RS across domains on rails (0, 2), (1, 3) ((k-1)/(k d) = 1/4 of 4 GB over
    # NICs at 1 GB/s: 1 s), then the same two phases in reverse for the all-gather: 4 s.
    group = (0, 1, 2, 3)
    records = _run(_all_reduce_graph(4 * GB, group), toy_topology(nvlink=2 * GB, nic=1 * GB),
                   ideal_params, group)
    for rank in group:
        assert _span(records[f"ar{rank}"]) == _approx(0.0, 4.0)


def test_send_latency_is_the_sum_of_the_devices_it_enters_on_gb300(ideal_params, compute):
    # GB300 NVL72, 4 GPUs in domains of 2: gpu0 and gpu2 share rail 0 and its leaf, so the
    # route is gpu0 -> nic0 (1.25 us) -> leaf0 (0.3 us) -> nic2 (1.25 us) -> gpu2 (0), at the
    # ConnectX-8 line rate of 100 GB/s. 1 GB: 2.8 us + 10 ms.
    topology = build_topology(load_system("gb300-nvl72"), num_gpus=4, domain_size=2)
    assert [topology.links[i].tier for i in topology.route(0, 2)] == ["nic"] * 4
    collective = Collective(op=Op.SEND_RECV, key="s", bytes_per_rank=1 * GB, groups=((0, 2),),
                            members=(0,), algorithm="p2p")
    g = GraphBuilder()
    g.add("send", rank=0, lane=Lane.PP, category="pp", collective=collective)
    records = _run(g, topology, ideal_params, (0,))
    assert _span(records["send"]) == _approx(0.0, 2.8e-6 + 1e-2)


def _with_overheads(params, **overheads: float):
    return replace(params, collective_overhead_s={**params.collective_overhead_s, **overheads})


def test_a_send_pays_the_collective_overhead_once(toy_topology, ideal_params, send):
    params = _with_overheads(ideal_params, p2p=0.125)
    g = GraphBuilder()
    g.add("send", rank=0, lane=Lane.PP, category="pp", collective=send("s", 0, 1, 1 * GB))
    records = _run(g, toy_topology(), params, (0,))
    assert _span(records["send"]) == _approx(0.0, 1.125)


def test_an_all_reduce_pays_the_collective_overhead_once(toy_topology, ideal_params):
    # calibration.CostParams.collective_overhead_s: "Fixed start-up cost of one collective
    # (launch, handshake, kernel tail)". 0.25 s once + two 1 s ring phases = 2.25 s.
    params = _with_overheads(ideal_params, nccl=0.25)
    group = (0, 1)
    records = _run(_all_reduce_graph(2 * GB, group), toy_topology(), params, group)
    assert _span(records["ar0"]) == _approx(0.0, 2.25)


# --- the host ------------------------------------------------------------------------------

def _two_tasks(compute, *, kernels: tuple[int, int], graphed: bool,
               sync_second: bool = False) -> GraphBuilder:
    g = GraphBuilder()
    g.add("first", rank=0, lane=Lane.COMPUTE, category="compute",
          work=compute(1.0, kernels=kernels[0], graphed=graphed))
    g.add("second", after=("first",) if sync_second else (), rank=0, lane=Lane.COMPUTE,
          category="compute", work=compute(1.0, kernels=kernels[1], graphed=graphed),
          host_sync=sync_second)
    return g


def test_eager_tasks_wait_for_the_host_to_launch_their_kernels(
        toy_topology, ideal_params, compute):
    # 0.25 s per kernel launch: "first" (2 kernels) is issued at 0.5 and runs [0.5, 1.5];
    # "second" (8 kernels) is issued 2 s after that, at 2.5, although the lane is free at 1.5.
    params = replace(ideal_params, host_launch_s=0.25)
    records = _run(_two_tasks(compute, kernels=(2, 8), graphed=False), toy_topology(),
                   params, (0,))
    assert (records["first"].issued_s, records["second"].issued_s) == _approx(0.5, 2.5)
    assert _span(records["first"]) == _approx(0.5, 1.5)
    assert _span(records["second"]) == _approx(2.5, 3.5)


def test_cuda_graphs_remove_the_host_launch_delay(toy_topology, ideal_params, compute):
    params = replace(ideal_params, host_launch_s=0.25)
    records = _run(_two_tasks(compute, kernels=(2, 8), graphed=True), toy_topology(),
                   params, (0,))
    assert (records["first"].issued_s, records["second"].issued_s) == (0.0, 0.0)
    assert _span(records["first"]) == _approx(0.0, 1.0)
    assert _span(records["second"]) == _approx(1.0, 2.0)


def test_a_host_sync_makes_the_host_wait_for_the_tasks_inputs(
        toy_topology, ideal_params, compute):
    # Without the sync "second" (1 kernel) is issued at 0.75 and runs when the lane frees at
    # 1.5; with it the host waits for its input "first" to end at 1.5, then launches at 1.75.
    params = replace(ideal_params, host_launch_s=0.25)
    free = _run(_two_tasks(compute, kernels=(2, 1), graphed=False), toy_topology(),
                params, (0,))
    assert free["second"].issued_s == pytest.approx(0.75, rel=EXACT)
    assert _span(free["second"]) == _approx(1.5, 2.5)
    synced = _run(_two_tasks(compute, kernels=(2, 1), graphed=False, sync_second=True),
                  toy_topology(), params, (0,))
    assert _span(synced["first"]) == _approx(0.5, 1.5)
    assert synced["second"].issued_s == pytest.approx(1.75, rel=EXACT)
    assert _span(synced["second"]) == _approx(1.75, 2.75)


def test_the_host_runs_a_tasks_schedule_nodes_before_launching_it(
        toy_topology, ideal_params, compute):
    # 0.25 s per launch and 0.5 s per schedule node: "first" (2 kernels) is issued at 0.5;
    # "second" (1 kernel, charged 2 nodes by the builder) 1 + 0.25 s later, at 1.75.
    params = replace(ideal_params, host_launch_s=0.25, schedule_node_host_s=0.5)
    g = GraphBuilder()
    g.add("first", rank=0, lane=Lane.COMPUTE, category="compute",
          work=compute(1.0, kernels=2))
    g.charge_host_node(0)
    g.charge_host_node(0)
    g.add("second", rank=0, lane=Lane.COMPUTE, category="compute",
          work=compute(1.0, kernels=1))
    records = _run(g, toy_topology(), params, (0,))
    assert (records["first"].issued_s, records["second"].issued_s) == _approx(0.5, 1.75)
    assert _span(records["second"]) == _approx(1.75, 2.75)


def test_collectives_cost_the_host_one_launch_unless_graphed(
        toy_topology, ideal_params, compute, send):
    # Host: the send takes one 0.25 s launch, then "work" its 2 kernels: issued at 0.75.
    params = replace(ideal_params, host_launch_s=0.25)
    for graphed, send_issued, work_issued in ((False, 0.25, 0.75), (True, 0.0, 0.5)):
        g = GraphBuilder()
        g.add("send", rank=0, lane=Lane.PP, category="pp",
              collective=send("s", 0, 1, 1 * GB, graphed=graphed))
        g.add("work", rank=0, lane=Lane.COMPUTE, category="compute",
              work=compute(1.0, kernels=2))
        records = _run(g, toy_topology(), params, (0,))
        assert records["send"].issued_s == pytest.approx(send_issued, rel=EXACT, abs=0)
        assert _span(records["send"]) == _approx(send_issued, send_issued + 1.0)
        assert _span(records["work"]) == _approx(work_issued, work_issued + 1.0)


# --- SMs held by communication kernels -----------------------------------------------------

def test_a_collective_holding_half_the_sms_halves_overlapped_compute_speed(
        toy_topology, ideal_params, compute, send, toy_gpu):
    # "work" needs 2 s. The send holds 4 of 8 SMs over [0.5, 1.5] (it waits for rank 1's
    # 0.5 s "gate", then moves 1 GB at 1 GB/s). Work done: 0.5 by t=0.5, +0.5 by t=1.5
    # (half speed), the remaining 1.0 at full speed: ends at 2.5.
    g = GraphBuilder()
    g.add("gate", rank=1, lane=Lane.COMPUTE, category="compute", work=compute(0.5))
    g.add("work", rank=0, lane=Lane.COMPUTE, category="compute", work=compute(2.0))
    g.add("send", after=("gate",), rank=0, lane=Lane.EP, category="ep",
          collective=send("s", 0, 1, 1 * GB, held_sms=toy_gpu.sm_count // 2))
    g.add("next", after=("send",), rank=0, lane=Lane.COMPUTE, category="compute",
          work=compute(1.0))
    records = _run(g, toy_topology(), ideal_params, (0, 1))
    assert _span(records["send"]) == _approx(0.5, 1.5)
    assert _span(records["work"]) == _approx(0.0, 2.5)
    assert _span(records["next"]) == _approx(2.5, 3.5)
    assert _span(records["gate"]) == _approx(0.0, 0.5)


def test_held_sms_of_another_gpu_do_not_slow_compute(toy_topology, ideal_params, compute, send,
                                                     toy_gpu):
    g = GraphBuilder()
    g.add("work", rank=0, lane=Lane.COMPUTE, category="compute", work=compute(2.0))
    g.add("send", rank=1, lane=Lane.EP, category="ep",
          collective=send("s", 1, 0, 1 * GB, held_sms=toy_gpu.sm_count // 2))
    records = _run(g, toy_topology(), ideal_params, (0, 1))
    assert _span(records["work"]) == _approx(0.0, 2.0)


# --- collective arrival --------------------------------------------------------------------

def test_a_collective_with_two_simulated_members_starts_when_both_have_arrived(
        toy_topology, ideal_params, compute):
    # Rank 0 arrives at t=0 (holding its DP lane), rank 1 only after its 1 s "work"; the
    # all-reduce then runs 1 s (two phases of 0.5 GB at 1 GB/s) and ends for both at t=2.
    group = (0, 1)
    collective = _all_reduce(1 * GB, group)
    g = GraphBuilder()
    g.add("ar0", rank=0, lane=Lane.DP, category="dp", collective=collective)
    g.add("work", rank=1, lane=Lane.COMPUTE, category="compute", work=compute(1.0))
    g.add("ar1", after=("work",), rank=1, lane=Lane.DP, category="dp", collective=collective)
    g.add("after0", after=("ar0",), rank=0, lane=Lane.COMPUTE, category="compute",
          work=compute(1.0))
    records = _run(g, toy_topology(), ideal_params, group)
    assert records["ar0"].end_s == pytest.approx(2.0, rel=EXACT)
    assert _span(records["ar1"]) == _approx(1.0, 2.0)
    assert _span(records["after0"]) == _approx(2.0, 3.0)


def test_a_collective_whose_members_never_all_arrive_is_a_deadlock(
        toy_topology, ideal_params, compute):
    collective = _all_reduce(1 * GB, (0, 1))
    g = GraphBuilder()
    g.add("ar0", rank=0, lane=Lane.DP, category="dp", collective=collective)
    g.add("after", after=("ar0",), rank=0, lane=Lane.COMPUTE, category="compute",
          work=compute(1.0))
    with pytest.raises(RuntimeError, match="deadlock"):
        simulate(g.build((0, 1)), toy_topology(), ideal_params)


def test_the_same_graph_replays_identically(toy_topology, ideal_params, compute, send):
    g = GraphBuilder()
    g.add("work", rank=0, lane=Lane.COMPUTE, category="compute", work=compute(1.0))
    g.add("a", rank=2, lane=Lane.PP, category="pp", collective=send("a", 2, 0, 1.5 * GB))
    g.add("b", rank=3, lane=Lane.PP, category="pp", collective=send("b", 3, 0, 0.5 * GB))
    graph, topology = g.build((0, 2, 3)), toy_topology()
    assert simulate(graph, topology, ideal_params) == simulate(graph, topology, ideal_params)
