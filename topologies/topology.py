"""Topology: the wiring of a cluster as a directed graph of GPUs, switches and NICs.

Nodes are strings: "gpu{i}" (kind "gpu", index i, domain d), "nvsw{d}" (kind "nvswitch", one per
NVLink domain), "nic{i}" (kind "nic", the scale-out NIC of gpu i), "leaf{k}" (kind "leaf"),
"spine{j}" (kind "spine") and "core0" (kind "core", 3-tier fabrics only). Every directed edge is a
link with a capacity in bytes/s per direction, a latency in seconds, a tier ("nvlink": GPU<->NVLink
switch; "nic": GPU<->NIC<->leaf; "leaf": leaf<->spine; "spine": spine<->core) and an integer
`index` into `Topology.links`. An edge's latency is the latency of the device it enters, so a
path's latency is the sum of the switches and NICs it crosses.

Design decision: aggregated switches. The 18 NVLink switch chips of an NVL72 rack form 9 equal
trays (planes) and NCCL / HybridEP stripe traffic over all of them, so the fluid network model
sees ONE switch node per NVLink domain whose GPU port capacity is
    nvlink_bandwidth x (trays - failed_trays) / trays;
the node records chips (18), trays (9) and failed_trays. Likewise each spine tier is one node
per group and a leaf's uplink edge carries the leaf's whole uplink bandwidth. Under perfect
striping (adaptive routing) this is exact, and it keeps the graph small and routes unique.
Under static ECMP hashing an aggregated edge records `ecmp_ports`, the physical ports it
stands for, onto each of which a flow's `ecmp_qps_per_flow` queue pairs are hashed; the fluid
network (simulator.network) turns that into the share of the edge's capacity that hashing
delivers. ecmp_ports is 0 on every edge that is one port or is routed adaptively.

Routing: GPUs of one domain talk gpu -> nvsw -> gpu; GPUs of different domains take the shortest
path through the scale-out fabric, gpu -> nic -> leaf [-> spine [-> core -> spine] -> leaf] ->
nic -> gpu, never through NVLink.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import networkx as nx

from topologies.hardware import GPUSpec

TIERS = ("nvlink", "nic", "leaf", "spine")
NODE_KINDS = ("gpu", "nvswitch", "nic", "leaf", "spine", "core")


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """One direction of a physical (or aggregated) link."""

    src: str
    dst: str
    capacity_bytes_per_s: float
    latency_s: float
    tier: str
    ecmp_ports: int = 0
    ecmp_qps_per_flow: int = 1

    def __post_init__(self) -> None:
        owner = f"link {self.src}->{self.dst}"
        if not isinstance(self.src, str) or not isinstance(self.dst, str) or self.src == self.dst:
            raise ValueError(f"{owner}: src and dst must be two different node names")
        if not _is_number(self.capacity_bytes_per_s) or self.capacity_bytes_per_s <= 0:
            raise ValueError(
                f"{owner}: capacity_bytes_per_s must be a positive number, "
                f"got {self.capacity_bytes_per_s!r}"
            )
        if not _is_number(self.latency_s) or self.latency_s < 0:
            raise ValueError(f"{owner}: latency_s must be a number >= 0, got {self.latency_s!r}")
        if self.tier not in TIERS:
            raise ValueError(f"{owner}: unknown tier {self.tier!r}: known are {', '.join(TIERS)}")
        for name, low in (("ecmp_ports", 0), ("ecmp_qps_per_flow", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{owner}: {name} must be an int >= {low}, got {value!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class Topology:
    """An immutable cluster wiring: GPU spec, link table, frozen graph, cached routes."""

    __slots__ = ("_gpu", "_graph", "_fabric", "_domain_size", "_num_gpus", "_links", "_routes")

    def __init__(self, graph: nx.DiGraph, *, gpu: GPUSpec, domain_size: int) -> None:
        if isinstance(domain_size, bool) or not isinstance(domain_size, int) or domain_size < 1:
            raise ValueError(f"topology: domain_size must be a positive int, got {domain_size!r}")
        self._gpu = gpu
        self._domain_size = domain_size
        self._graph = graph.copy()
        self._links = _index_links(self._graph)
        self._num_gpus = sum(1 for _, kind in self._graph.nodes(data="kind") if kind == "gpu")
        self._fabric = self._graph.subgraph(
            node for node, kind in self._graph.nodes(data="kind") if kind != "nvswitch"
        )
        self._routes: dict[tuple[int, int], tuple[int, ...]] = {}
        self.validate()
        nx.freeze(self._graph)

    @property
    def gpu(self) -> GPUSpec:
        return self._gpu

    @property
    def num_gpus(self) -> int:
        return self._num_gpus

    @property
    def domain_size(self) -> int:
        """GPUs per NVLink domain as placed (the last domain may hold fewer)."""
        return self._domain_size

    @property
    def num_domains(self) -> int:
        return -(-self._num_gpus // self._domain_size)

    @property
    def links(self) -> tuple[Link, ...]:
        return self._links

    @property
    def graph(self) -> nx.DiGraph:
        """The frozen graph (mutating it raises); copy it to build a variant."""
        return self._graph

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle through the constructor (the NVLink-free fabric view does not pickle)."""
        rebuild = functools.partial(Topology, gpu=self._gpu, domain_size=self._domain_size)
        return (rebuild, (self._graph.copy(),))

    def domain_of(self, gpu_index: int) -> int:
        """The NVLink domain of a GPU: gpu_index // domain_size."""
        return int(self._graph.nodes[self._gpu_node(gpu_index)]["domain"])

    def in_switch_reduction(self, domain: int) -> bool:
        """Whether the NVLink switches of this domain reduce in the switch (NVLS)."""
        if not 0 <= domain < self.num_domains:
            raise ValueError(f"domain {domain!r} out of range: 0..{self.num_domains - 1}")
        return bool(self._graph.nodes[f"nvsw{domain}"]["in_switch_reduction"])

    def route(self, src_gpu: int, dst_gpu: int) -> tuple[int, ...]:
        """Link indices from src_gpu to dst_gpu (cached): NVLink inside a domain, else fabric."""
        key = (src_gpu, dst_gpu)
        if key not in self._routes:
            self._routes[key] = self._find_route(src_gpu, dst_gpu)
        return self._routes[key]

    def path_latency_s(self, route: Iterable[int]) -> float:
        """Sum of the latencies of the links of a route."""
        return sum(self._links[index].latency_s for index in route)

    def port_links(self, gpu_index: int, tier: str) -> tuple[int, ...]:
        """Link indices of one GPU's port, both directions: tier "nvlink" its links to the
        NVLink switch; tier "nic" its links to its NIC and the NIC's to the leaf."""
        gpu = self._gpu_node(gpu_index)
        if tier == "nvlink":
            nodes = [(gpu, f"nvsw{self.domain_of(gpu_index)}")]
        elif tier == "nic":
            card = f"nic{gpu_index}"
            if card not in self._graph:
                raise ValueError(f"gpu {gpu_index} has no NIC: a topology of one NVLink domain "
                                 "has no scale-out fabric")
            nodes = [(card, other) for other in self._graph.successors(card)]
        else:
            raise ValueError(f"port tier {tier!r}: known are nvlink, nic")
        return tuple(sorted(self._graph.edges[u, v]["index"] for pair in nodes
                            for u, v in (pair, pair[::-1])))

    def with_capacity_scaled(self, link_indices: Iterable[int], factor: float) -> Topology:
        """A new topology with these links' capacity multiplied by factor (> 0); same indices."""
        if not _is_number(factor) or factor <= 0:
            raise ValueError(f"capacity factor must be a positive number, got {factor!r}")
        graph = self._graph.copy()
        for index in link_indices:
            link = self._link(index)
            graph.edges[link.src, link.dst]["capacity_bytes_per_s"] *= factor
        return Topology(graph, gpu=self._gpu, domain_size=self._domain_size)

    def summary(self) -> dict[str, Any]:
        """Counts and headline bandwidths for `moesim show` and reports."""
        nvlink = [self._links[i].capacity_bytes_per_s for i in self._tier_links("gpu", "nvswitch")]
        return {
            "gpu": self._gpu.name,
            "num_gpus": self._num_gpus,
            "domains": self.num_domains,
            "domain_size": self._domain_size,
            "switches_per_tier": self._switch_counts(),
            "bisection_bandwidth_bytes_per_s": self._bisection_bytes_per_s(),
            "nvlink_bandwidth_per_gpu_bytes_per_s": min(nvlink),
        }

    def validate(self) -> None:
        """Raise ValueError unless nodes are well formed and every GPU reaches every other."""
        self._check_nodes()
        self._check_nvlink_domains()
        if self.num_domains > 1:
            self._check_fabric_connected()

    def _gpu_node(self, gpu_index: int) -> str:
        if isinstance(gpu_index, bool) or not isinstance(gpu_index, int) or not (
            0 <= gpu_index < self._num_gpus
        ):
            raise ValueError(f"gpu index {gpu_index!r} out of range: 0..{self._num_gpus - 1}")
        return f"gpu{gpu_index}"

    def _link(self, index: int) -> Link:
        if isinstance(index, bool) or not isinstance(index, int) or not (
            0 <= index < len(self._links)
        ):
            raise ValueError(f"link index {index!r} out of range: 0..{len(self._links) - 1}")
        return self._links[index]

    def _find_route(self, src_gpu: int, dst_gpu: int) -> tuple[int, ...]:
        src, dst = self._gpu_node(src_gpu), self._gpu_node(dst_gpu)
        if src == dst:
            raise ValueError(f"route needs two different GPUs, got {src_gpu} twice")
        domain = self.domain_of(src_gpu)
        if domain == self.domain_of(dst_gpu):
            nodes = [src, f"nvsw{domain}", dst]
        else:
            nodes = nx.shortest_path(self._fabric, src, dst)
        return tuple(self._graph.edges[u, v]["index"] for u, v in zip(nodes, nodes[1:]))

    def _tier_links(self, src_kind: str, dst_kind: str) -> list[int]:
        """Indices of the links from nodes of one kind to nodes of another."""
        kinds = self._graph.nodes
        return [
            index for index, link in enumerate(self._links)
            if kinds[link.src]["kind"] == src_kind and kinds[link.dst]["kind"] == dst_kind
        ]

    def _switch_counts(self) -> dict[str, int]:
        """Physical switch chips per tier (aggregated nodes record how many they stand for)."""
        counts = {"nvlink": 0, "leaf": 0, "spine": 0, "core": 0}
        for _, data in self._graph.nodes(data=True):
            if data["kind"] == "nvswitch":
                counts["nvlink"] += int(data["chips"])
            elif data["kind"] in counts:
                counts[data["kind"]] += int(data.get("switches", 1))
        return counts

    def _bisection_bytes_per_s(self) -> float:
        """Fat-tree bisection: half the smallest upward capacity the halves must cross.

        Levels: NIC injection (nic->leaf); leaf uplinks, if there is more than one leaf; spine
        uplinks, if there is more than one spine node. 0.0 without a scale-out fabric.
        """
        levels = [("nic", "leaf"), ("leaf", "spine"), ("spine", "core")]
        upward = []
        for lower, upper in levels:
            lower_nodes = [n for n, kind in self._graph.nodes(data="kind") if kind == lower]
            if lower == "nic" or len(lower_nodes) > 1:
                links = self._tier_links(lower, upper)
                upward.append(sum(self._links[i].capacity_bytes_per_s for i in links))
        return min(upward) / 2

    def _check_nodes(self) -> None:
        for node, kind in self._graph.nodes(data="kind"):
            if kind not in NODE_KINDS:
                raise ValueError(f"node {node!r}: unknown kind {kind!r}: known are "
                                 + ", ".join(NODE_KINDS))
        if self._num_gpus == 0:
            raise ValueError("topology: no nodes of kind 'gpu'")
        for index in range(self._num_gpus):
            data = self._graph.nodes.get(f"gpu{index}")
            if data is None or data["kind"] != "gpu" or data.get("index") != index:
                raise ValueError(f"topology: GPUs must be gpu0..gpu{self._num_gpus - 1} with "
                                 f"kind 'gpu' and their index; gpu{index} is missing or wrong")
            if data.get("domain") != index // self._domain_size:
                raise ValueError(f"gpu{index}: domain must be {index // self._domain_size} "
                                 f"(index // domain_size), got {data.get('domain')!r}")

    def _check_nvlink_domains(self) -> None:
        for index in range(self._num_gpus):
            gpu, switch = f"gpu{index}", f"nvsw{index // self._domain_size}"
            if self._graph.nodes.get(switch, {}).get("kind") != "nvswitch":
                raise ValueError(f"topology: NVLink switch node {switch!r} is missing")
            if not (self._graph.has_edge(gpu, switch) and self._graph.has_edge(switch, gpu)):
                raise ValueError(f"topology: {gpu} is not linked both ways to {switch}")

    def _check_fabric_connected(self) -> None:
        reach = nx.descendants(self._fabric, "gpu0") & nx.ancestors(self._fabric, "gpu0")
        for index in range(1, self._num_gpus):
            if f"gpu{index}" not in reach:
                raise ValueError(f"topology: gpu0 and gpu{index} are not connected both ways "
                                 "through the scale-out fabric (NVLink excluded)")


def _index_links(graph: nx.DiGraph) -> tuple[Link, ...]:
    """Validate every edge as a Link and store its position in the edge attribute `index`."""
    links: list[Link] = []
    for src, dst, data in graph.edges(data=True):
        data["index"] = len(links)
        links.append(Link(
            src=src,
            dst=dst,
            capacity_bytes_per_s=data.get("capacity_bytes_per_s"),
            latency_s=data.get("latency_s"),
            tier=data.get("tier"),
            ecmp_ports=data.get("ecmp_ports", 0),
            ecmp_qps_per_flow=data.get("ecmp_qps_per_flow", 1),
        ))
    return tuple(links)
