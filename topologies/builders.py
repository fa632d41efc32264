"""Builders: NVLink domains, the rail-optimized fat tree, and whole systems as a Topology.

Placement: GPU i lives in NVLink domain i // domain_size. Inside a domain every GPU links both
ways to the domain's aggregated NVLink switch at
    min(gpu NVLink bandwidth, links x switch port bandwidth) x (trays - failed_trays) / trays.
Across domains each GPU has one NIC (gpu<->nic at NIC speed, nic<->leaf at the slower of NIC
and switch port); the GPU with local index i in its domain sits on rail
i % rails. Each rail has its own leaves, radix/2 GPUs per leaf (consecutive domains), and a
leaf's uplink capacity is (its GPUs x switch port bandwidth) / oversubscription. Two tiers: all
leaves go up to one aggregated "spine0". Three tiers: groups of radix/2 leaves share a
"spine{j}" and the spine groups go up to "core0", non-blocking above the leaves.
Edge latency is the latency of the device the edge enters (see topologies.topology).
With routing "ecmp" every edge above the leaves records the physical ports it stands for,
ceil(capacity / port bandwidth), as `ecmp_ports`, and the QPs per connection as
`ecmp_qps_per_flow`; with "adaptive" routing they stay 0 and 1 (the aggregate is exact).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import networkx as nx

from topologies.hardware import (
    GPUSpec,
    NICSpec,
    NVLinkSwitchSpec,
    SwitchSpec,
)
from topologies.systems import (SystemSpec, system_gpu, system_nic, system_nvlink_switch,
                                system_scale_out_switch)
from topologies.topology import Topology


def nvlink_domain(
    graph: nx.DiGraph,
    domain: int,
    gpus: list[int],
    gpu: GPUSpec,
    switch: NVLinkSwitchSpec,
    failed_trays: int = 0,
) -> None:
    """Add the GPUs of one NVLink domain and its aggregated switch node "nvsw{domain}"."""
    owner = f"nvlink domain {domain}"
    if isinstance(failed_trays, bool) or not isinstance(failed_trays, int) or not (
        0 <= failed_trays < switch.trays_per_rack
    ):
        raise ValueError(f"{owner}: failed_trays must be an int in 0..{switch.trays_per_rack - 1} "
                         f"({switch.name} has {switch.trays_per_rack} trays), got {failed_trays!r}")
    if not gpus or len(gpus) * gpu.nvlink_links > switch.ports * switch.chips:
        raise ValueError(f"{owner}: {len(gpus)} GPUs x {gpu.nvlink_links} links must be >= 1 and "
                         f"fit {switch.chips} {switch.name} chips x {switch.ports} ports")
    port_bytes_per_s = min(
        gpu.nvlink_bandwidth_bytes_per_s, gpu.nvlink_links * switch.port_bandwidth_bytes_per_s
    )
    working = (switch.trays_per_rack - failed_trays) / switch.trays_per_rack
    hub = f"nvsw{domain}"
    graph.add_node(hub, kind="nvswitch", chips=switch.chips, trays=switch.trays_per_rack,
                   failed_trays=failed_trays, in_switch_reduction=switch.in_switch_reduction)
    for index in gpus:
        node = f"gpu{index}"
        graph.add_node(node, kind="gpu", index=index, domain=domain)
        graph.add_edge(node, hub, capacity_bytes_per_s=port_bytes_per_s * working,
                       latency_s=switch.hop_latency_s, tier="nvlink")
        graph.add_edge(hub, node, capacity_bytes_per_s=port_bytes_per_s * working,
                       latency_s=0.0, tier="nvlink")


def rail_fat_tree(
    graph: nx.DiGraph,
    gpu_indices_by_domain: Sequence[Sequence[int]],
    nic: NICSpec,
    switch: SwitchSpec,
    tiers: int,
    oversubscription: float,
    rails: int,
    ecmp_qps_per_flow: int = 0,
) -> None:
    """Add one NIC per GPU and a rail-optimized 2- or 3-tier fat tree (aggregated spines).

    ecmp_qps_per_flow: 0 for adaptive routing, else the QPs of a connection that static ECMP
    hashes, each onto one port of every edge above the leaves.
    """
    _check_fabric(tiers, oversubscription, rails)
    if isinstance(ecmp_qps_per_flow, bool) or not isinstance(ecmp_qps_per_flow, int) or (
        ecmp_qps_per_flow < 0
    ):
        raise ValueError(f"fat tree: ecmp_qps_per_flow must be an int >= 0 (0: adaptive "
                         f"routing), got {ecmp_qps_per_flow!r}")
    leaves = _rail_leaves(gpu_indices_by_domain, rails, switch.radix // 2)
    for number, (rail, gpus) in enumerate(leaves):
        _add_leaf(graph, f"leaf{number}", rail, gpus, nic, switch)
    uplink_bytes_per_s = [
        len(gpus) * switch.port_bandwidth_bytes_per_s / oversubscription for _, gpus in leaves
    ]
    names = [f"leaf{number}" for number in range(len(leaves))]
    if tiers == 2:
        _add_up_tier(graph, names, uplink_bytes_per_s, "spine0", "spine", switch, switch.radix,
                     ecmp_qps_per_flow)
        return
    group_size = switch.radix // 2
    group_bytes_per_s = []
    for start in range(0, len(names), group_size):
        spine = f"spine{start // group_size}"
        window = slice(start, start + group_size)
        _add_up_tier(graph, names[window], uplink_bytes_per_s[window], spine, "spine", switch,
                     group_size, ecmp_qps_per_flow)
        group_bytes_per_s.append(sum(uplink_bytes_per_s[window]))
    spines = [f"spine{j}" for j in range(len(group_bytes_per_s))]
    _add_up_tier(graph, spines, group_bytes_per_s, "core0", "core", switch, switch.radix,
                 ecmp_qps_per_flow)


def _check_fabric(tiers: int, oversubscription: float, rails: int) -> None:
    if tiers not in (2, 3) or isinstance(tiers, bool):
        raise ValueError(f"fat tree: tiers must be 2 or 3, got {tiers!r}")
    if isinstance(oversubscription, bool) or not isinstance(oversubscription, (int, float)) or not (
        math.isfinite(oversubscription) and oversubscription >= 1
    ):
        raise ValueError(f"fat tree: oversubscription must be a number >= 1, "
                         f"got {oversubscription!r}")
    if isinstance(rails, bool) or not isinstance(rails, int) or rails < 1:
        raise ValueError(f"fat tree: rails must be a positive int, got {rails!r}")


def _rail_leaves(
    gpu_indices_by_domain: Sequence[Sequence[int]], rails: int, down_ports: int
) -> list[tuple[int, list[int]]]:
    """(rail, GPUs) per leaf: a rail's GPUs from consecutive domains, down_ports per leaf."""
    leaves = []
    for rail in range(rails):
        members = [
            index for domain in gpu_indices_by_domain
            for local, index in enumerate(domain) if local % rails == rail
        ]
        for start in range(0, len(members), down_ports):
            leaves.append((rail, members[start:start + down_ports]))
    return leaves


def _add_leaf(
    graph: nx.DiGraph, leaf: str, rail: int, gpus: list[int], nic: NICSpec, switch: SwitchSpec
) -> None:
    """A leaf switch with one NIC per GPU: gpu <-> nic at NIC speed, nic <-> leaf at port speed."""
    graph.add_node(leaf, kind="leaf", rail=rail, switches=1, protocol=switch.protocol,
                   in_network_reduction=switch.in_network_reduction)
    wire_bytes_per_s = min(nic.bandwidth_bytes_per_s, switch.port_bandwidth_bytes_per_s)
    for index in gpus:
        gpu, card = f"gpu{index}", f"nic{index}"
        graph.add_node(card, kind="nic", index=index)
        graph.add_edge(gpu, card, capacity_bytes_per_s=nic.bandwidth_bytes_per_s,
                       latency_s=nic.latency_s, tier="nic")
        graph.add_edge(card, gpu, capacity_bytes_per_s=nic.bandwidth_bytes_per_s,
                       latency_s=0.0, tier="nic")
        graph.add_edge(card, leaf, capacity_bytes_per_s=wire_bytes_per_s,
                       latency_s=switch.hop_latency_s, tier="nic")
        graph.add_edge(leaf, card, capacity_bytes_per_s=wire_bytes_per_s,
                       latency_s=nic.latency_s, tier="nic")


def _add_up_tier(
    graph: nx.DiGraph,
    lower: list[str],
    up_bytes_per_s: list[float],
    upper: str,
    kind: str,
    switch: SwitchSpec,
    down_ports_per_switch: int,
    ecmp_qps_per_flow: int,
) -> None:
    """One aggregated upper node; each lower node links both ways with its uplink capacity.

    The node stands for ceil(uplink ports / down ports per switch) physical switches. Under
    static ECMP (ecmp_qps_per_flow > 0) each edge records its ports and the QPs per flow.
    """
    tier = "leaf" if kind == "spine" else "spine"
    ports = [math.ceil(up / switch.port_bandwidth_bytes_per_s) for up in up_bytes_per_s]
    graph.add_node(upper, kind=kind, switches=math.ceil(sum(ports) / down_ports_per_switch),
                   protocol=switch.protocol, in_network_reduction=switch.in_network_reduction)
    for node, up, count in zip(lower, up_bytes_per_s, ports):
        hashing = ({"ecmp_ports": count, "ecmp_qps_per_flow": ecmp_qps_per_flow}
                   if ecmp_qps_per_flow else {})
        for src, dst in ((node, upper), (upper, node)):
            graph.add_edge(src, dst, capacity_bytes_per_s=up, latency_s=switch.hop_latency_s,
                           tier=tier, **hashing)


def build_topology(
    system: SystemSpec, num_gpus: int, domain_size: int | None = None, failed_trays: int = 0
) -> Topology:
    """The Topology of num_gpus GPUs of a system, domain_size GPUs per NVLink domain.

    domain_size defaults to the system's gpus_per_domain (a recipe using 64 of 72 GPUs per rack
    passes 64). failed_trays NVLink switch trays are out of service in domain 0 only (one
    degraded rack; the other racks stay healthy).
    """
    size = system.gpus_per_domain if domain_size is None else domain_size
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus < 1:
        raise ValueError(f"num_gpus must be a positive int, got {num_gpus!r}")
    if isinstance(size, bool) or not isinstance(size, int) or not (
        0 < size <= system.gpus_per_domain
    ):
        raise ValueError(f"domain_size must be an int in 1..{system.gpus_per_domain} "
                         f"(gpus_per_domain of {system.name}), got {size!r}")
    gpu = system_gpu(system)
    nvswitch = system_nvlink_switch(system)
    domains = [list(range(i, min(i + size, num_gpus))) for i in range(0, num_gpus, size)]
    graph = nx.DiGraph()
    for domain, members in enumerate(domains):
        nvlink_domain(graph, domain, members, gpu, nvswitch, failed_trays if domain == 0 else 0)
    if len(domains) > 1:
        qps = system.ecmp_qps_per_connection if system.routing == "ecmp" else 0
        rail_fat_tree(graph, domains, system_nic(system), system_scale_out_switch(system),
                      system.tiers, system.oversubscription, system.rails, qps)
    return Topology(graph, gpu=gpu, domain_size=size)
