"""Static ECMP hashing on the scale-out fabric, by hand: balls into bins, the capacity share it
leaves a hashed link, the links the builders mark as hashed, and its effect on a small step.

Hand computations: 2 QPs on 2 ports share one with probability 1/2, so E[max load] = 1.5 and
the bundle delivers (2/2) / 1.5 = 2/3 of its capacity; 4 QPs on 2 ports: loads (j, 4-j) with
j ~ Binomial(4, 1/2) give max 2, 3, 4 with probabilities 6/16, 8/16, 2/16: E = 2.75, share 8/11.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter

import numpy as np
import pytest

from simulator.calibration import CostParams
from simulator.collectives import CollectivePlanner
from simulator.network import FlowShape, ecmp_capacity_share, expected_max_load, max_min_rates
from simulator.scenario import scenario_topology
from topologies.builders import build_topology
from topologies.hardware import GBIT, switch_spec
from topologies.systems import SystemSpec, load_system, system_with
from workloads.graph import Collective, Op

PORT_BYTES_PER_S = 400 * GBIT  # a Quantum-2 port and a ConnectX-7 NIC: 50 GB/s
TWO_PORT_LEAVES = dataclasses.replace(switch_spec("quantum-2"), name="radix-4", radix=4)


def _brute_force_max_load(balls: int, bins: int) -> float:
    """E[max load] by enumerating all bins**balls equally likely placements."""
    placements = itertools.product(range(bins), repeat=balls)
    return float(np.mean([max(Counter(choice).values()) for choice in placements]))


# --- balls into bins ------------------------------------------------------------------------

@pytest.mark.parametrize("balls, bins, expected", [
    (1, 72, 1.0), (2, 2, 1.5), (4, 2, 2.75), (3, 3, 17 / 9), (5, 1, 5.0), (0, 4, 0.0)])
def test_expected_max_load_by_hand(balls, bins, expected):
    assert expected_max_load(balls, bins) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("balls, bins", [(5, 3), (6, 4), (7, 2), (4, 5)])
def test_expected_max_load_matches_enumeration(balls, bins):
    assert expected_max_load(balls, bins) == pytest.approx(
        _brute_force_max_load(balls, bins), rel=1e-9)


def test_capacity_share_by_hand():
    assert ecmp_capacity_share(2, 2) == pytest.approx(2 / 3)
    assert ecmp_capacity_share(4, 2) == pytest.approx(8 / 11)
    assert ecmp_capacity_share(1, 8) == pytest.approx(1 / 8)  # one QP: one port of eight
    assert ecmp_capacity_share(0, 8) == 1.0


def test_more_qps_per_connection_spread_better():
    # 64 connections over 64 ports: each doubling of the QPs raises the share towards 1.
    shares = [ecmp_capacity_share(64 * qps, 64) for qps in (1, 2, 4, 8, 16)]
    assert shares == sorted(shares) and shares[0] < 0.3 and shares[-1] < 1.0


# --- the fluid network on a hashed link -------------------------------------------------------

def test_max_min_rates_on_a_hashed_bundle():
    # Link 0: two ports of 2 B/s (4 B/s) hashed; a class of 2 flows, 1 QP each: 2/3 of 4 B/s.
    two = FlowShape(links=(0,), counts=(2,), ecmp_ports=(2,))
    assert max_min_rates([two], np.array([4.0])) == pytest.approx([4 * 2 / 3 / 2])
    # 2 QPs per flow: 4 QPs on 2 ports, share 8/11.
    split = FlowShape(links=(0,), counts=(2,), ecmp_ports=(2,), ecmp_qps_per_flow=2)
    assert max_min_rates([split], np.array([4.0])) == pytest.approx([4 * 8 / 11 / 2])


def test_flows_of_different_classes_collide_on_a_hashed_link():
    # One flow of each of two classes on link 0 (2 ports, 4 B/s): K = 2, as for one class of 2.
    # The second class also crosses link 1 (hashed, 2 ports, alone there: one port, 2 B/s).
    first = FlowShape(links=(0,), counts=(1,), ecmp_ports=(2,))
    second = FlowShape(links=(0, 1), counts=(1, 1), ecmp_ports=(2, 2))
    rates = max_min_rates([first, second], np.array([4.0, 4.0]))
    assert rates == pytest.approx([4 / 3, 4 / 3])


def test_a_flow_shape_rejects_ports_that_do_not_match_its_links():
    with pytest.raises(ValueError, match="ecmp_ports"):
        FlowShape(links=(0, 1), counts=(1, 1), ecmp_ports=(2,))
    with pytest.raises(ValueError, match="ecmp_qps_per_flow"):
        FlowShape(links=(0,), counts=(1,), ecmp_ports=(2,), ecmp_qps_per_flow=0)


# --- two leaves, flows across them ----------------------------------------------------------

def _two_leaves(routing: str, qps: int = 1) -> SystemSpec:
    """4 H100s, one per NVLink domain, 1 rail, leaves of 2 ports down and 2 up: gpu0, gpu1 on
    leaf0; gpu2, gpu3 on leaf1; both leaves up to spine0 (2 x 50 GB/s each way)."""
    return system_with(load_system("dgx-h100"), gpus_per_domain=1, rails=1,
                       scale_out_switch=TWO_PORT_LEAVES, routing=routing,
                       ecmp_qps_per_connection=qps)


def _uplinks(topology):
    return [link for link in topology.links if link.tier == "leaf"]


def test_builder_marks_links_above_the_leaves_as_hashed_only_under_ecmp():
    adaptive = build_topology(_two_leaves("adaptive"), 4)
    hashed = build_topology(_two_leaves("ecmp", qps=4), 4)
    assert len(_uplinks(hashed)) == 4  # leaf0 <-> spine0, leaf1 <-> spine0
    assert all((link.ecmp_ports, link.ecmp_qps_per_flow) == (2, 4) for link in _uplinks(hashed))
    assert all(link.ecmp_ports == 0 for link in adaptive.links)
    assert all(link.ecmp_ports == 0 for link in hashed.links if link.tier != "leaf")
    assert [link.capacity_bytes_per_s for link in adaptive.links] == [
        link.capacity_bytes_per_s for link in hashed.links]


@pytest.mark.parametrize("routing, qps, share", [
    ("adaptive", 1, 1.0), ("ecmp", 1, 2 / 3), ("ecmp", 2, 8 / 11)])
def test_two_sends_across_two_leaves(routing, qps, share):
    # gpu0 -> gpu2 and gpu1 -> gpu3 both leave leaf0 on its 2 uplink ports (100 GB/s). A NIC
    # alone gives 50 GB/s; the hashed uplinks give 2 x 50 GB/s x share / 2 flows.
    topology = build_topology(_two_leaves(routing, qps), 4)
    sends = Collective(op=Op.SEND_RECV, key="pp", bytes_per_rank=1e9, groups=((0, 2), (1, 3)),
                       members=(0,), algorithm="p2p")
    (phase,) = CollectivePlanner(topology, CostParams()).phases(sends, nvls=False)
    capacity = np.array([link.capacity_bytes_per_s for link in topology.links])
    rates = max_min_rates([c.shape for c in phase.classes], capacity)
    assert rates == pytest.approx([PORT_BYTES_PER_S * min(1.0, share)])


def test_ecmp_needs_no_adaptive_switch_but_adaptive_does():
    plain = dataclasses.replace(TWO_PORT_LEAVES, name="no-ar", adaptive_routing=False)
    system = system_with(_two_leaves("ecmp"), scale_out_switch=plain)
    with pytest.raises(ValueError, match="routing='adaptive' needs"):
        system_with(system, routing="adaptive")


@pytest.mark.parametrize("field, value", [
    ("routing", "spray"), ("routing", True), ("ecmp_qps_per_connection", 0),
    ("ecmp_qps_per_connection", 129), ("ecmp_qps_per_connection", 2.0)])
def test_bad_routing_fields_are_one_line_errors(field, value):
    with pytest.raises(ValueError, match=field) as error:
        system_with(load_system("gb300-nvl72"), **{field: value})
    assert "\n" not in str(error.value)


def test_catalog_switches_route_adaptively_and_systems_default_to_it():
    for name in ("quantum-2", "quantum-x800", "spectrum-x"):
        assert switch_spec(name).adaptive_routing
    system = load_system("gb300-nvl72")
    assert (system.routing, system.ecmp_qps_per_connection) == ("adaptive", 1)


def test_default_study_keeps_pipeline_and_data_parallel_traffic_inside_leaves():
    # 256 GB300 in 4 domains of 64, 4 rails: one leaf per rail holds every GPU of that rail,
    # so a GPU's pipeline peer (+128) and ring neighbour (+64) are never behind a hashed link.
    gb300 = system_with(load_system("gb300-nvl72"), routing="ecmp")
    topology = build_topology(gb300, 256, domain_size=64)
    hashed = {index for index, link in enumerate(topology.links) if link.ecmp_ports}
    assert hashed
    for gpu in range(0, 256, 5):
        for peer in ((gpu + 128) % 256, (gpu + 64) % 256):
            assert not hashed & set(topology.route(gpu, peer))


# --- a small training step ----------------------------------------------------------------

PP2_VPP2_EP4 = {"tp": 1, "pp": 2, "vpp": 2, "ep": 4}


def _small_fabric(routing: str, qps: int = 1) -> SystemSpec:
    """GB300 NVL72 with 4-port leaves: 16 GPUs in domains of 8 give every rail two leaves of
    2 GPUs (one per domain), so the pipeline send of PP2 crosses the spine."""
    x800 = dataclasses.replace(switch_spec("quantum-x800"), name="x800-radix-4", radix=4)
    return system_with(load_system("gb300-nvl72"), scale_out_switch=x800, routing=routing,
                       ecmp_qps_per_connection=qps)


def test_static_hashing_slows_the_pipeline_sends_of_a_step(run_small):
    adaptive = run_small(system=_small_fabric("adaptive"), **PP2_VPP2_EP4).metrics
    hashed = run_small(system=_small_fabric("ecmp"), **PP2_VPP2_EP4).metrics
    spread = run_small(system=_small_fabric("ecmp", qps=8), **PP2_VPP2_EP4).metrics
    assert adaptive.step_time_s < spread.step_time_s < hashed.step_time_s
    assert hashed.breakdown_s["exposed_pp"] > adaptive.breakdown_s["exposed_pp"]


def test_a_folded_run_equals_the_unfolded_run_under_ecmp(run_small):
    folded = run_small(system=_small_fabric("ecmp"), folded=True, **PP2_VPP2_EP4)
    unfolded = run_small(system=_small_fabric("ecmp"), folded=False, **PP2_VPP2_EP4)
    assert len(folded.trace.simulated_ranks) < len(unfolded.trace.simulated_ranks) == 16
    assert folded.metrics.step_time_s == pytest.approx(unfolded.metrics.step_time_s, rel=1e-3)


def test_the_scenario_topology_carries_the_hashing(make_scenario):
    topology = scenario_topology(make_scenario(system=_small_fabric("ecmp", qps=2),
                                               **PP2_VPP2_EP4))
    assert {(link.ecmp_ports, link.ecmp_qps_per_flow) for link in topology.links
            if link.tier == "leaf"} == {(2, 2)}
