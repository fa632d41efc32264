"""Collectives as flows over topology paths, in phases that run one after another.

- all-to-all: every member sends bytes/n to every other member (pairwise flows). An EP
  dispatcher that deduplicates (DeepEP internode, HybridEP: `expert_routing`) over a group
  spread evenly over k NVLink domains of d members sends a token once to each destination
  domain, to the member with its own local position there, which forwards it over NVLink to
  the destination ranks; both legs run at once (the kernels pipeline them):
      each rail pair: bytes * (c_domain / c_rank) / k,   each pair inside a domain: bytes / d,
  where c_rank and c_domain are the expected distinct ranks and domains a token's top-k
  experts live on (force-balanced routing, workloads.routing.expected_destinations);
- send/recv: one flow;
- reduce-scatter / all-gather: a ring, each member sends (n-1)/n of the buffer to its successor.
  A group that spans NVLink domains with the same number of members in each runs
  hierarchically: a ring inside each domain over NVLink, then rings across domains between
  members with the same local position (rails) carrying (k-1)/k of a 1/d shard;
- all-reduce: reduce-scatter then all-gather, or, inside one domain whose switch reduces
  (NVLS), every member sends its buffer up once and receives the result once.

Flows of all the groups a folded task stands for are pooled; flows whose paths cross the same
kinds of links form one class (they progress at the same rate by symmetry). A class's shape
carries the static ECMP hashing of the fabric links it crosses (simulator.network), so flows
that collide on hashed leaf/spine ports count wherever they come from. A class's bytes are
divided by the efficiency of its algorithm on its fabric (NVLink inside a domain of at most
8 GPUs has entries of its own, `comm_key`): a flow at efficiency e needs 1/e of the line-rate
time.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from topologies.topology import Topology
from workloads.routing import expected_destinations
from workloads.graph import Collective, Op

from simulator.calibration import CostParams, nvlink_fabric
from simulator.network import FlowClass, FlowShape


Pairs = tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class _Pattern:
    """One phase of an algorithm: sets of pairs (src, dst) that move at the same time, each
    pair of a set moving that set's `fraction` of the payload, in `steps` latency steps."""

    parts: tuple[tuple[Pairs, float], ...]
    steps: int


def _single(pairs: Pairs, fraction: float, steps: int) -> _Pattern:
    return _Pattern(((pairs, fraction),), steps)


@dataclass(frozen=True, slots=True)
class Phase:
    """Flow classes that move together, after a fixed start-up latency."""

    latency_s: float
    classes: tuple[FlowClass, ...]


def _ring_pairs(members: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    return tuple((a, members[(i + 1) % len(members)]) for i, a in enumerate(members))


def _by_domain(group: tuple[int, ...], topology: Topology) -> list[tuple[int, ...]]:
    domains: dict[int, list[int]] = defaultdict(list)
    for rank in group:
        domains[topology.domain_of(rank)].append(rank)
    return [tuple(members) for _, members in sorted(domains.items())]


def _ring_patterns(group: tuple[int, ...], topology: Topology) -> list[_Pattern]:
    """Reduce-scatter (or all-gather) of a whole buffer as ring phases."""
    n = len(group)
    parts = _even_domains(group, topology)
    if parts is None:
        return [_single(_ring_pairs(group), (n - 1) / n, n - 1)]
    d, k = len(parts[0]), len(parts)
    intra = tuple(pair for part in parts for pair in _ring_pairs(part))
    inter = tuple(pair for rail in _rails(parts) for pair in _ring_pairs(rail))
    return [_single(intra, (d - 1) / d, d - 1), _single(inter, (k - 1) / (k * d), k - 1)]


def _even_domains(group: tuple[int, ...], topology: Topology) -> list[tuple[int, ...]] | None:
    """The group's members by NVLink domain when it spans several with the same number
    (> 1) of members in each; else None."""
    parts = _by_domain(group, topology)
    sizes = {len(part) for part in parts}
    return None if len(parts) == 1 or len(sizes) != 1 or sizes == {1} else parts


def _rails(parts: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Members with the same local position in each domain."""
    return [tuple(part[i] for part in parts) for i in range(len(parts[0]))]


def _all_to_all(group: tuple[int, ...], topology: Topology,
                expert_routing: tuple[int, int, int, int] | None) -> _Pattern:
    parts = None if expert_routing is None else _even_domains(group, topology)
    if expert_routing is None or parts is None:
        return _single(tuple((a, b) for a in group for b in group if a != b), 1 / len(group), 1)
    experts, topk, groups, chosen = expert_routing
    d, k = len(parts[0]), len(parts)
    per_domain = (expected_destinations(experts, topk, k, groups, chosen)
                  / expected_destinations(experts, topk, k * d, groups, chosen))
    inter = tuple((a, b) for rail in _rails(parts) for a in rail for b in rail if a != b)
    intra = tuple((a, b) for part in parts for a in part for b in part if a != b)
    return _Pattern(((inter, per_domain / k), (intra, 1 / d)), 1)


def _patterns(op: Op, group: tuple[int, ...], topology: Topology, nvls: bool,
              hierarchical: bool = True,
              expert_routing: tuple[int, int, int, int] | None = None) -> list[_Pattern]:
    n = len(group)
    if op is Op.ALL_TO_ALL:
        return [_all_to_all(group, topology, expert_routing if hierarchical else None)]
    if op is Op.SEND_RECV:
        return [_single(((group[0], group[1]),), 1.0, 1)]
    one_domain = len({topology.domain_of(rank) for rank in group}) == 1
    if op is Op.ALL_REDUCE and nvls and one_domain and topology.in_switch_reduction(
            topology.domain_of(group[0])):
        return [_single(_ring_pairs(group), 1.0, 1)]
    ring = (_ring_patterns(group, topology) if hierarchical
            else [_single(_ring_pairs(group), (n - 1) / n, n - 1)])
    if op is Op.ALL_REDUCE:
        return ring + ring[::-1]
    return ring if op is Op.REDUCE_SCATTER else ring[::-1]


@dataclass(frozen=True, slots=True)
class _ShapeClass:
    shape: FlowShape
    fabric: str
    fraction: float
    latency_s: float


def _shape(links: tuple[int, ...], counts: tuple[int, ...], topology: Topology) -> FlowShape:
    """A flow shape that carries the static ECMP hashing of its links, if any."""
    hashed = [topology.links[link] for link in links]
    ports = tuple(link.ecmp_ports for link in hashed)
    if not any(ports):
        return FlowShape(links=links, counts=counts)
    return FlowShape(links=links, counts=counts, ecmp_ports=ports,
                     ecmp_qps_per_flow=max(link.ecmp_qps_per_flow for link in hashed))


def _classes(pairs: tuple[tuple[int, int], ...], fraction: float,
             topology: Topology) -> tuple[_ShapeClass, ...]:
    """Pool flows by the tiers they cross; count how many of each class cross each link."""
    counts: dict[tuple[str, ...], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    latency: dict[tuple[str, ...], float] = defaultdict(float)
    for src, dst in pairs:
        route = topology.route(src, dst)
        signature = tuple(topology.links[link].tier for link in route)
        for link in route:
            counts[signature][link] += 1
        latency[signature] = max(latency[signature], topology.path_latency_s(route))
    result = []
    for signature, per_link in sorted(counts.items()):
        links = tuple(sorted(per_link))
        shape = _shape(links, tuple(per_link[link] for link in links), topology)
        fabric = "nvlink" if set(signature) == {"nvlink"} else "network"
        result.append(_ShapeClass(shape, fabric, fraction, latency[signature]))
    return tuple(result)


class CollectivePlanner:
    """Turns collectives into phases of flow classes; caches shapes per (op, groups)."""

    def __init__(self, topology: Topology, params: CostParams) -> None:
        self._topology = topology
        self._params = params
        self._cache: dict[tuple[Op, tuple[tuple[int, ...], ...], bool,
                                tuple[int, int, int, int] | None],
                          list[tuple[int, tuple[_ShapeClass, ...]]]] = {}

    def phases(self, collective: Collective, nvls: bool) -> tuple[Phase, ...]:
        key = (collective.op, collective.groups, nvls, collective.expert_routing)
        if key not in self._cache:
            self._cache[key] = self._shape_phases(*key)
        algorithm = collective.algorithm
        overhead_s = self._params.overhead_s(algorithm)
        phases = []
        for position, (steps, shape_classes) in enumerate(self._cache[key]):
            classes = tuple(
                FlowClass(shape=c.shape, bytes_per_flow=collective.bytes_per_rank * c.fraction
                          / self._efficiency(collective, c.fabric))
                for c in shape_classes)
            start_s = overhead_s if position == 0 else 0.0
            latency_s = start_s + steps * max(c.latency_s for c in shape_classes)
            phases.append(Phase(latency_s, classes))
        return tuple(phases)

    def _efficiency(self, collective: Collective, fabric: str) -> float:
        """The share of line rate `collective` reaches on `fabric`: its own measured NVLink
        efficiency where it carries one, else its algorithm's calibrated one (NVLink inside a
        domain of at most 8 GPUs read as "nvlink8")."""
        if fabric == "nvlink" and collective.nvlink_efficiency is not None:
            return collective.nvlink_efficiency
        if fabric == "nvlink":
            fabric = nvlink_fabric(self._topology.domain_size)
        algorithm = "nccl" if collective.algorithm == "p2p" else collective.algorithm
        return self._params.comm(algorithm, fabric)

    def _shape_phases(self, op: Op, groups: tuple[tuple[int, ...], ...], nvls: bool,
                      expert_routing: tuple[int, int, int, int] | None,
                      ) -> list[tuple[int, tuple[_ShapeClass, ...]]]:
        per_group = [_patterns(op, group, self._topology, nvls, expert_routing=expert_routing)
                     for group in groups]
        if len({_layout(patterns) for patterns in per_group}) > 1:
            # Groups placed differently (some span domains, some not): flat for all.
            per_group = [_patterns(op, group, self._topology, nvls, hierarchical=False)
                         for group in groups]
        phases = []
        for position, pattern in enumerate(per_group[0]):
            classes: tuple[_ShapeClass, ...] = ()
            for part, (_, fraction) in enumerate(pattern.parts):
                pairs = tuple(pair for patterns in per_group
                              for pair in patterns[position].parts[part][0])
                classes += _classes(pairs, fraction, self._topology)
            phases.append((pattern.steps, classes))
        return phases


def _layout(patterns: list[_Pattern]) -> tuple[tuple[tuple[float, ...], int], ...]:
    """What makes two groups' patterns poolable: the fractions and steps of each phase."""
    return tuple((tuple(fraction for _, fraction in p.parts), p.steps) for p in patterns)
