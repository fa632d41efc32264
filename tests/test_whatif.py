"""Asymmetric what-ifs: a straggler GPU, a degraded link, failed NVLink trays in one domain.

They make some GPUs behave unlike the rest of their pipeline stage, so the step is partly
unfolded (workloads.step.position_classes): the small MoE on 16 GB300 GPUs (tests/conftest.py)
checks that the partly unfolded run equals the fully unfolded one, that what-ifs left off give
the folded run exactly, that a straggler and a degraded NIC slow the step plausibly, and that
bad values get a one-line error from `moesim run --set` and from scenario files.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pytest

from simulator.cli import main
from simulator.engine import simulate
from simulator.results import scenario_document
from simulator.scenario import run_scenario, scenario_topology
from simulator.scenario_files import load_scenario_file
from workloads.graph import Collective, GraphBuilder, Lane, Op
from workloads.parallelism import ParallelPlan
from workloads.recipes import recipe
from workloads.step import StepSpec, build_step, position_classes

PP2_VPP2_EP4 = {"tp": 1, "pp": 2, "vpp": 2, "ep": 4}
TP2_EP8 = {"tp": 2, "pp": 1, "ep": 8}
PP4_EP4 = {"tp": 1, "pp": 4, "ep": 4}
EP8 = {"tp": 1, "pp": 1, "ep": 8}
STRAGGLER = {"straggler_gpu": 5, "straggler_slowdown": 1.5}
SLOW_NIC = {"degraded_link": "nic:6", "degraded_link_bandwidth_fraction": 0.25}
OFF = {"straggler_gpu": None, "straggler_slowdown": 1.0, "degraded_link": None,
       "degraded_link_bandwidth_fraction": 1.0}
SMALL_RUN = ("run", "--model", "qwen3-30b-a3b", "--gpus", "16", "--pp", "1", "--vpp", "1",
             "--ep", "8", "--gbs", "32", "--seq", "1024", "--set", "domain_size=8", "--json")


# --- partly unfolded == unfolded ------------------------------------------------------------

@pytest.mark.parametrize("plan, options, what_if", [
    (PP2_VPP2_EP4, {}, STRAGGLER),
    (TP2_EP8, {"recipe_": recipe("mbridge-25.11")},
     {"straggler_gpu": 5, "straggler_slowdown": 1.3}),
    (PP2_VPP2_EP4, {"domain_size": 4}, SLOW_NIC),
    (TP2_EP8, {}, {"degraded_link": "nvlink:3", "degraded_link_bandwidth_fraction": 0.5}),
    (PP4_EP4, {"domain_size": 4}, {"straggler_gpu": 9, "straggler_slowdown": 2.0,
                                   "degraded_link": "nic:2",
                                   "degraded_link_bandwidth_fraction": 0.3}),
    (PP2_VPP2_EP4, {"domain_size": 4}, {"failed_trays": 4}),
], ids=["straggler-pp2", "straggler-tp2-eager", "nic-pp2", "nvlink-tp2", "both-pp4",
        "failed-trays"])
def test_a_partly_unfolded_run_equals_the_unfolded_run(make_scenario, plan, options, what_if):
    scenario = replace(make_scenario(**options, **plan), **what_if)
    partly = run_scenario(scenario)
    unfolded = run_scenario(scenario, folded=False)
    assert scenario.plan.pp < len(partly.trace.simulated_ranks) < 16
    assert len(unfolded.trace.simulated_ranks) == 16
    step = unfolded.metrics.step_time_s
    assert partly.metrics.step_time_s == pytest.approx(step, rel=1e-9)
    assert set(partly.metrics.breakdown_s) == set(unfolded.metrics.breakdown_s)
    for key, seconds in unfolded.metrics.breakdown_s.items():
        assert partly.metrics.breakdown_s[key] == pytest.approx(seconds, abs=1e-9 * step), key


def test_a_partly_unfolded_fsdp_run_equals_the_unfolded_run(make_scenario):
    scenario = replace(make_scenario(tp=1, pp=2, ep=8), **STRAGGLER)
    scenario = replace(scenario, plan=replace(scenario.plan, dp_sharding="fsdp"))
    partly, unfolded = run_scenario(scenario), run_scenario(scenario, folded=False)
    assert partly.metrics.step_time_s == pytest.approx(unfolded.metrics.step_time_s, rel=1e-9)


# --- off means folded ------------------------------------------------------------------------

@pytest.mark.parametrize("plan", [PP2_VPP2_EP4, TP2_EP8], ids=["pp2", "tp2"])
def test_what_ifs_left_off_give_the_folded_run_exactly(make_scenario, plan):
    scenario = make_scenario(**plan)
    idle = replace(scenario, straggler_gpu=3, straggler_slowdown=1.0, degraded_link="nic:3",
                   degraded_link_bandwidth_fraction=1.0)
    folded, same = run_scenario(scenario), run_scenario(idle)
    assert same.trace == folded.trace
    assert same.metrics == folded.metrics
    assert len(same.trace.simulated_ranks) == scenario.plan.pp


def test_the_scenario_document_names_the_what_ifs(make_scenario):
    document = scenario_document(replace(make_scenario(**EP8), **STRAGGLER))
    assert {key: document[key] for key in OFF} == {**OFF, **STRAGGLER}


# --- classes of alike ranks ------------------------------------------------------------------

def test_the_classes_of_a_straggler_in_the_reference_plan():
    # DeepSeek-V3's plan: 128 GPUs per stage, EP groups of 32 consecutive ranks, expert-DP
    # groups {j, j+32, j+64, j+96}, one attention-DP group. A straggler at 17 leaves alike:
    # itself; its 31 EP peers; its 3 expert-DP peers; the 93 others.
    plan = ParallelPlan(num_gpus=256, tp=1, pp=2, vpp=8, ep=32, gbs=4096, seq_len=4096)
    classes = position_classes(plan, [{17}])
    assert sorted(Counter(classes).values()) == [1, 3, 31, 93]
    assert len({classes[p] for p in (49, 81, 113)}) == 1
    assert len({classes[p] for p in range(32) if p != 17}) == 1
    assert position_classes(plan, [{17 + 128}]) == classes
    assert position_classes(plan) == (0,) * 128
    assert position_classes(plan, [{17}], folded=False) == tuple(range(128))


def test_a_partly_unfolded_graph_simulates_one_rank_per_class_and_stage(make_scenario):
    scenario = make_scenario(**PP2_VPP2_EP4)
    spec = StepSpec(model=scenario.model, plan=scenario.plan, recipe=scenario.recipe)
    graph = build_step(spec, asymmetric=[{5}])
    # Classes of the 8 positions: {0, 2, 3}, {1} (expert-DP peer of 5), {4, 6, 7}, {5}.
    assert graph.simulated_ranks == (0, 1, 4, 5, 8, 9, 12, 13)
    assert graph.gpus_per_rank == (3, 1, 3, 1, 3, 1, 3, 1)
    assert build_step(spec).gpus_per_rank == ()


# --- effects ---------------------------------------------------------------------------------

@pytest.mark.parametrize("plan", [PP2_VPP2_EP4, TP2_EP8], ids=["pp2", "tp2"])
def test_a_straggler_slows_the_step_by_at_most_its_extra_compute(make_scenario, plan):
    scenario = make_scenario(**plan)
    base = run_scenario(scenario)
    slow = run_scenario(replace(scenario, **STRAGGLER))
    representative = 5 - 5 % scenario.plan.ranks_per_stage
    compute_s = sum(r.end_s - r.start_s for r in base.trace.records
                    if r.rank == representative and r.lane == "compute")
    extra_s = slow.metrics.step_time_s - base.metrics.step_time_s
    # Everyone waits for the straggler's extra compute, but never for more than all of it.
    bound_s = (STRAGGLER["straggler_slowdown"] - 1) * compute_s
    assert 0.25 * bound_s < extra_s <= bound_s
    assert slow.metrics.breakdown_s["pipeline_bubble"] + sum(
        v for k, v in slow.metrics.breakdown_s.items() if k.startswith("exposed")) > sum(
        v for k, v in base.metrics.breakdown_s.items()
        if k == "pipeline_bubble" or k.startswith("exposed"))


def test_a_degraded_nic_slows_expert_traffic_that_crosses_it(make_scenario):
    # Domains of 4 put every EP-8 all-to-all through the NICs.
    scenario = make_scenario(domain_size=4, **EP8)
    times = [run_scenario(replace(scenario, degraded_link="nic:6",
                                  degraded_link_bandwidth_fraction=fraction)).metrics.step_time_s
             for fraction in (1.0, 0.5, 0.25)]
    assert times[0] <= times[1] <= times[2]
    assert times[0] < times[2]


def test_a_degraded_link_scales_its_gpus_port_both_ways(make_scenario):
    scenario = make_scenario(domain_size=4, **EP8)
    healthy = scenario_topology(scenario)
    slow = scenario_topology(replace(scenario, **SLOW_NIC))
    changed = [index for index, (a, b) in enumerate(zip(healthy.links, slow.links))
               if a.capacity_bytes_per_s != b.capacity_bytes_per_s]
    # GPU 6 <-> its NIC and the NIC <-> its leaf, both directions.
    assert changed == [index for index, link in enumerate(healthy.links)
                       if "nic6" in (link.src, link.dst)]
    assert len(changed) == 4
    for index in changed:
        assert slow.links[index].capacity_bytes_per_s == pytest.approx(
            0.25 * healthy.links[index].capacity_bytes_per_s)


def test_failed_trays_degrade_the_first_nvlink_domain_only(make_scenario):
    topology = scenario_topology(replace(make_scenario(domain_size=4, **EP8), failed_trays=3))
    capacity = {link.src: link.capacity_bytes_per_s for link in topology.links
                if link.tier == "nvlink" and link.src.startswith("gpu")}
    assert capacity["gpu0"] == capacity["gpu3"] < capacity["gpu4"] == capacity["gpu15"]


# --- the engine: ranks whose timelines differ never wait on each other ------------------------

def test_a_waiting_collective_yields_its_lane_to_an_earlier_one(toy_topology, ideal_params,
                                                                compute):
    # Rank 0 computes for 1 s before it can join X; rank 1 joins X at once. Rank 0's lane is
    # free at t=0, so it takes Y (id 2) and waits there; when X (id 1) is ready on rank 0 at
    # t=1, Y steps back. X moves 1 GB each way at 1 GB/s over [1, 2], then Y over [2, 3].
    def a2a(key: str) -> Collective:
        return Collective(op=Op.ALL_TO_ALL, key=key, bytes_per_rank=2e9, groups=((0, 1),),
                          members=(0, 1), algorithm="nccl")

    g = GraphBuilder()
    g.add("a", rank=0, lane=Lane.COMPUTE, category="compute", work=compute(1.0))
    g.add("x0", after=("a",), rank=0, lane=Lane.EP, category="ep", collective=a2a("x"))
    g.add("y0", rank=0, lane=Lane.EP, category="ep", collective=a2a("y"))
    g.add("x1", rank=1, lane=Lane.EP, category="ep", collective=a2a("x"))
    g.add("y1", rank=1, lane=Lane.EP, category="ep", collective=a2a("y"))
    trace = simulate(g.build((0, 1)), toy_topology(), ideal_params)
    spans = {r.name: (r.start_s, r.end_s) for r in trace.records}
    assert spans["x0"] == pytest.approx((1.0, 2.0))
    assert spans["x1"] == pytest.approx((0.0, 2.0))
    assert spans["y0"] == pytest.approx((2.0, 3.0))
    assert spans["y1"] == pytest.approx((2.0, 3.0))


# --- the command line and scenario files ------------------------------------------------------

def _json(capsys, *args: str) -> dict:
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def test_moesim_run_reaches_the_what_ifs(capsys):
    base = _json(capsys, *SMALL_RUN)
    slow = _json(capsys, *SMALL_RUN, "--set", "straggler_gpu=3", "--set", "straggler_slowdown=1.5",
                 "--set", "degraded_link=nic:12", "--set", "degraded_link_bandwidth_fraction=0.5")
    assert {key: slow["scenario"][key] for key in OFF} == {
        "straggler_gpu": 3, "straggler_slowdown": 1.5, "degraded_link": "nic:12",
        "degraded_link_bandwidth_fraction": 0.5}
    assert slow["step_time_s"] > base["step_time_s"]
    assert sum(slow["breakdown_s"].values()) == pytest.approx(slow["step_time_s"], rel=1e-6)


@pytest.mark.parametrize("settings, words", [
    (("straggler_gpu=256",), ("straggler_gpu=256", "[0, 256)")),
    (("straggler_gpu=-1",), ("straggler_gpu=-1", "[0, 256)")),
    (("straggler_gpu=two",), ("straggler_gpu='two'", "integer")),
    (("straggler_gpu=3", "straggler_slowdown=0.9"), ("straggler_slowdown=0.9", ">= 1")),
    (("straggler_gpu=3", "straggler_slowdown=nan"), ("straggler_slowdown=nan", ">= 1")),
    (("straggler_slowdown=1.2",), ("straggler_slowdown=1.2", "straggler_gpu")),
    (("degraded_link=nic",), ("degraded_link='nic'", "TIER:GPU", "nvlink")),
    (("degraded_link=pcie:3",), ("degraded_link='pcie:3'", "nic, nvlink")),
    (("degraded_link=nic:256",), ("degraded_link='nic:256'", "[0, 256)")),
    (("degraded_link=nic:3", "degraded_link_bandwidth_fraction=0"),
     ("degraded_link_bandwidth_fraction=0.0", "(0, 1]")),
    (("degraded_link=nic:3", "degraded_link_bandwidth_fraction=1.5"),
     ("degraded_link_bandwidth_fraction=1.5", "(0, 1]")),
    (("degraded_link_bandwidth_fraction=0.5",),
     ("degraded_link_bandwidth_fraction=0.5", "degraded_link")),
])
def test_bad_what_ifs_get_a_one_line_error(capsys, settings, words):
    assert main(["run", *[arg for s in settings for arg in ("--set", s)]]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("moesim: error: ") and captured.err.count("\n") == 1
    for word in words:
        assert word in captured.err


def test_a_nic_what_if_needs_a_scale_out_fabric(capsys):
    assert main(["run", "--gpus", "64", "--set", "degraded_link=nic:3",
                 "--set", "degraded_link_bandwidth_fraction=0.5"]) == 2
    error = capsys.readouterr().err
    assert "degraded_link='nic:3'" in error and error.count("\n") == 1


def test_scenario_files_carry_the_what_ifs(tmp_path):
    base = tmp_path / "slow.yaml"
    base.write_text("extends: default\nstraggler_gpu: 17\nstraggler_slowdown: 1.2\n"
                    "degraded_link: nvlink:40\ndegraded_link_bandwidth_fraction: 0.5\n")
    scenario = load_scenario_file(base)
    assert (scenario.straggler_gpu, scenario.straggler_slowdown, scenario.degraded_link,
            scenario.degraded_link_bandwidth_fraction) == (17, 1.2, "nvlink:40", 0.5)
    child = tmp_path / "child.yaml"
    child.write_text("extends: slow.yaml\nplan:\n  gpus: 128\n  gbs: 2048\n")
    assert load_scenario_file(child).straggler_gpu == 17
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: slow.yaml\nstraggler_gpu: 300\n")
    with pytest.raises(ValueError, match=r"bad.yaml: straggler_gpu=300: .*\[0, 256\)"):
        load_scenario_file(bad)
