"""Expert-parallel all-to-all across NVLink domains, by hand.

8 ranks in 2 domains of 4, 16 experts (2 per rank, 8 per domain), top-2, uniform routing:
  distinct ranks a token reaches   c_rank   = 8 * (1 - C(14, 2) / C(16, 2)) = 8 * 29/120
  distinct domains it reaches      c_domain = 2 * (1 - C(8, 2) / C(16, 2))  = 2 * 23/30
A deduplicating dispatcher (DeepEP internode, HybridEP) sends B = tokens * c_rank * hidden
bytes per rank; to the other domain it sends each token once, so the rail pair carries
B * (c_domain / c_rank) / 2, and each NVLink pair forwards B / 4. NCCL's all-to-all sends
B / 8 to every other rank, across domains too.
"""

from __future__ import annotations

from dataclasses import replace
from math import comb

import pytest

from simulator.calibration import CostParams, params_value
from simulator.collectives import CollectivePlanner
from topologies.builders import build_topology
from topologies.systems import load_system
from workloads.parallelism import ParallelPlan
from workloads.recipes import recipe, recipe_with
from workloads.routing import FP8_DISPATCH_BYTES_PER_ELEMENT, expected_destinations
from workloads.graph import Collective, Lane, Op
from workloads.step import StepSpec, build_step

B = 1e9
PERFECT = CostParams(comm_efficiency={"hybridep-nvlink": 1.0, "hybridep-network": 1.0,
                                      "alltoall-nvlink": 1.0, "alltoall-network": 1.0})


def _bytes_by_fabric(algorithm: str,
                     routing: tuple[int, int, int, int] | None) -> dict[str, set[float]]:
    topology = build_topology(load_system("gb300-nvl72"), 8, domain_size=4)
    collective = Collective(op=Op.ALL_TO_ALL, key="ep", bytes_per_rank=B,
                            groups=(tuple(range(8)),), members=(0,), algorithm=algorithm,
                            expert_routing=routing)
    (phase,) = CollectivePlanner(topology, PERFECT).phases(collective, nvls=False)
    result: dict[str, set[float]] = {"nvlink": set(), "network": set()}
    for flow_class in phase.classes:
        tiers = {topology.links[link].tier for link in flow_class.shape.links}
        result["nvlink" if tiers == {"nvlink"} else "network"].add(
            round(flow_class.bytes_per_flow))
    return result


def test_expected_destinations_by_hand():
    assert expected_destinations(16, 2, 8) == pytest.approx(8 * (1 - comb(14, 2) / comb(16, 2)))
    assert expected_destinations(16, 2, 2) == pytest.approx(2 * 23 / 30)
    assert expected_destinations(256, 8, 1) == pytest.approx(1.0)


def test_deduplicating_dispatch_sends_once_per_domain_and_forwards_over_nvlink():
    c_rank, c_domain = 8 * 29 / 120, 2 * 23 / 30
    sent = _bytes_by_fabric("hybridep", (16, 2, 1, 1))
    assert sent["network"] == {round(B * c_domain / c_rank / 2)}
    assert sent["nvlink"] == {round(B / 4)}


def test_group_limited_routing_by_hand():
    # 16 experts in 4 groups of 4, a token's 2 experts from 2 chosen groups (pool of 8).
    # 4 holders = the groups: a holder is hit iff its group is chosen (1/2) and a pick lands
    # in it: 1 - C(4, 2)/C(8, 2) = 22/28.
    assert expected_destinations(16, 2, 4, 4, 2) == pytest.approx(4 * 0.5 * 22 / 28)
    # 2 holders of 2 groups each: j of a holder's groups are chosen with
    # P(0) = 1/6, P(1) = 4/6, P(2) = 1/6; it is missed with C(8 - 4j, 2)/C(8, 2).
    miss = 1 / 6 + 4 / 6 * comb(4, 2) / comb(8, 2) + 1 / 6 * 0
    assert expected_destinations(16, 2, 2, 4, 2) == pytest.approx(2 * (1 - miss))
    # One group holding everything is no limit at all.
    assert expected_destinations(16, 2, 8, 1, 1) == pytest.approx(expected_destinations(16, 2, 8))


def test_grouped_routing_sends_fewer_tokens_across_domains():
    limited = _bytes_by_fabric("hybridep", (16, 2, 2, 1))["network"]
    free = _bytes_by_fabric("hybridep", (16, 2, 1, 1))["network"]
    assert max(limited) < max(free)


def test_nccl_all_to_all_sends_every_pair_its_share():
    sent = _bytes_by_fabric("alltoall", None)
    assert sent == {"nvlink": {round(B / 8)}, "network": {round(B / 8)}}


def _deepep_nvlink_bytes(system: str, params: CostParams,
                         measured: float | None = None) -> set[float]:
    """Bytes per NVLink flow (payload / efficiency) of a DeepEP all-to-all over 8 GPUs that
    share one NVLink domain of `system`."""
    topology = build_topology(load_system(system), 8)
    collective = Collective(op=Op.ALL_TO_ALL, key="ep", bytes_per_rank=B,
                            groups=(tuple(range(8)),), members=(0,), algorithm="deepep",
                            expert_routing=(16, 2, 1, 1), nvlink_efficiency=measured)
    (phase,) = CollectivePlanner(topology, params).phases(collective, nvls=False)
    return {round(flow_class.bytes_per_flow) for flow_class in phase.classes}


BOARD = CostParams(comm_efficiency={"deepep-nvlink": 0.25, "deepep-nvlink8": 0.5})


def test_deepep_on_an_8_gpu_baseboard_reads_its_own_nvlink_efficiency():
    """DGX H100's NVLink domain is 8 GPUs (DeepEP's intranode kernels): deepep-nvlink8; the
    same 8 GPUs inside a GB300 NVL72 rack: deepep-nvlink."""
    assert _deepep_nvlink_bytes("dgx-h100", BOARD) == {round(B / 8 / 0.5)}
    assert _deepep_nvlink_bytes("gb300-nvl72", BOARD) == {round(B / 8 / 0.25)}


def test_a_measured_deepep_efficiency_overrides_both():
    assert _deepep_nvlink_bytes("dgx-h100", BOARD, measured=0.4) == {round(B / 8 / 0.4)}


def test_without_an_nvlink8_entry_the_nvlink_one_is_read():
    rack_only = CostParams(comm_efficiency={"deepep-nvlink": 0.25})
    assert _deepep_nvlink_bytes("dgx-h100", rack_only) == {round(B / 8 / 0.25)}
    assert rack_only.comm("deepep", "nvlink8") == 0.25
    assert params_value(rack_only, "comm_efficiency.deepep-nvlink8") == 0.25
    assert params_value(BOARD, "comm_efficiency.deepep-nvlink8") == 0.5


def _ep_bytes(model, dispatcher: str, **changes) -> dict[tuple[str, str], set[float]]:
    """The bytes of the step's EP all-to-alls by (phase, dispatch or combine)."""
    sms = {"hybridep": 32, "deepep": 24, "alltoall": 0}[dispatcher]
    recipe_ = recipe_with(recipe("mbridge-26.06"), dispatcher=dispatcher, dispatcher_sms=sms,
                          **changes)
    plan = ParallelPlan(num_gpus=16, mbs=1, gbs=32, seq_len=256, ep=8)
    graph = build_step(StepSpec(model=model, plan=plan, recipe=recipe_))
    found: dict[tuple[str, str], set[float]] = {}
    for task in graph.tasks:
        if task.lane is Lane.EP:
            phase = task.name.split("/")[1][0]
            found.setdefault((phase, task.name.rsplit(".", 1)[1]), set()).add(
                task.collective.bytes_per_rank)
    return found


@pytest.mark.parametrize(("dispatcher", "rate"), [("hybridep", 539 / 642), ("deepep", 1.0)])
def test_fp8_dispatch_sends_fp8_to_the_experts_and_bf16_back(small_moe, dispatcher, rate):
    """DeepSeek-V3's FP8 dispatch: the forward dispatch and the backward's gradient for the
    experts (the backward of the combine) travel as FP8 with a scale per 32 elements, at the
    kernel's FP8 rate; the forward combine and the backward of the dispatch stay BF16."""
    bf16 = _ep_bytes(small_moe, dispatcher)
    fp8 = _ep_bytes(small_moe, dispatcher, fp8_dispatch=True)
    assert set(fp8) == {("F", "dispatch"), ("F", "combine"), ("B", "dispatch"), ("B", "combine")}
    for key, (value,) in bf16.items():
        to_experts = key in (("F", "dispatch"), ("B", "combine"))
        share = FP8_DISPATCH_BYTES_PER_ELEMENT / 2 / rate if to_experts else 1.0
        (sent,) = fp8[key]
        assert sent == pytest.approx(value * share)


def test_fp8_dispatch_needs_a_dispatcher_that_takes_fp8_tokens():
    with pytest.raises(ValueError, match="fp8_dispatch=True: needs dispatcher 'deepep' or "
                                         "'hybridep'.*dispatcher='alltoall'"):
        replace(recipe("deepseek-2024"), dispatcher="alltoall", dispatcher_sms=0)
    assert recipe("deepseek-2024").fp8_dispatch
    nccl = recipe_with(recipe("deepseek-2024"), dispatcher="alltoall", dispatcher_sms=0)
    assert not nccl.fp8_dispatch
    assert not recipe_with(recipe("deepseek-2024"), precision="bf16").fp8_dispatch
