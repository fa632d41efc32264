"""The fluid network: links as shared resources, max-min fair bandwidth sharing.

Bytes move as *flow classes*. A class is a set of identical flows (same size, same kind of path)
that, by the symmetry of the cluster, always progress at the same rate; `link_counts` says how
many of its flows cross each link. A link of capacity c shared by classes with counts n_k and
per-flow rates r_k must satisfy sum_k n_k * r_k <= c. Rates are max-min fair (progressive
filling) and are recomputed only when a class starts or ends; in between every flow moves at a
constant rate, so the next interesting instant is known exactly:

    t_next = now + min_k remaining_bytes_k / r_k

Solving depends only on which class *shapes* are active, never on bytes, so solutions are
memoised on that set: a periodic training step re-uses a handful of them thousands of times.
Max-min rates on links that no class shares are independent, so transfers are kept in
components (transfers linked by shared links, directly or through one another), each solved,
advanced and timed on its own: a class starting or ending replans its component only, and the
memo sees each component's few shapes, not every combination of what runs elsewhere.

Static ECMP. An aggregated fabric link (topologies.topology) stands for `n = ecmp_ports`
physical ports. Adaptive routing spreads bytes over them by load, so the aggregate is exact.
Static ECMP hashing instead pins each queue pair (QP) to one port for its whole life: with
k flows of m QPs each on the link, K = k * m QPs land on n ports like balls thrown into bins
(the hash is uniform and independent per QP, as dipsingh.github.io "Flow Distribution Across
ECMP Paths" analyses ECMP; Al-Fares et al., "Hedera", NSDI'10: per-flow static hashing "can
cause substantial bandwidth losses due to long-term collisions"). A synchronous collective
ends when the busiest port has drained, so the link delivers, on average,

    capacity x share,   share = (K / n) / E[max load of K balls in n bins]

(mean load over expected maximum load; 1 for K = 1 on one port, 1/n of the bundle for one QP
alone, which one port's speed bounds anyway). E[max load] is exact: a multinomial is n iid
Poisson(K/n) loads conditioned on their sum, so P(max <= t) = S_t^n * c_t * K! / K^K with
S_t = sum_{j<=t} (K/n)^j / j! and c_t the chance that n loads drawn from the Poisson truncated
at t sum to K (one FFT). More QPs per connection (NCCL_IB_QPS_PER_CONNECTION, docs.nvidia.com
/deeplearning/nccl/user-guide/docs/env.html) add entropy and raise the share towards 1;
adaptive routing (the default, topologies.systems) leaves links unhashed: share 1.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

_RELATIVE_EPS = 1e-9
# Bytes that would move in this time are rounding noise: a class this close to done is done.
_TIME_EPS_S = 1e-12
# E[max load] sums P(max > t) over t; terms below this are dropped.
_TAIL_PROBABILITY = 1e-10


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowShape:
    """Where the flows of one class go: link indices and how many flows of the class cross each.

    ecmp_ports: per link, the physical ports a flow's QPs are statically hashed onto (0: not
    hashed); empty when no link is. ecmp_qps_per_flow: independently hashed QPs per flow.
    link_array and count_array: links and counts as numpy arrays, made once for the solver.
    """

    links: tuple[int, ...]
    counts: tuple[int, ...]
    ecmp_ports: tuple[int, ...] = ()
    ecmp_qps_per_flow: int = 1
    link_array: np.ndarray = field(init=False, repr=False, compare=False)
    count_array: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.links) != len(self.counts) or not self.links:
            raise ValueError(f"flow shape: links={self.links} and counts={self.counts} must be "
                             "non-empty and of equal length")
        if self.ecmp_ports and (len(self.ecmp_ports) != len(self.links)
                                or min(self.ecmp_ports) < 0):
            raise ValueError(f"flow shape: ecmp_ports={self.ecmp_ports} must be empty or one "
                             f"count >= 0 per link of {self.links}")
        if self.ecmp_qps_per_flow < 1:
            raise ValueError(f"flow shape: ecmp_qps_per_flow must be >= 1, "
                             f"got {self.ecmp_qps_per_flow}")
        object.__setattr__(self, "link_array", _read_only(np.array(self.links, dtype=np.int64)))
        object.__setattr__(self, "count_array", _read_only(np.array(self.counts, dtype=float)))


def _read_only(values: np.ndarray) -> np.ndarray:
    values.flags.writeable = False
    return values


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowClass:
    """Identical flows of `bytes_per_flow` each, crossing links as `shape` says."""

    shape: FlowShape
    bytes_per_flow: float


@functools.lru_cache(maxsize=None)
def expected_max_load(balls: int, bins: int) -> float:
    """E[most balls in one bin] when `balls` fall uniformly and independently into `bins`."""
    if balls < 1 or bins < 2:
        return float(max(balls, 0))
    least = -(-balls // bins)  # some bin holds at least the ceiling of the mean
    expected, previous = float(least), 1.0
    for most in range(least, balls):
        above = 1.0 - _max_load_at_most(balls, bins, most)
        if above < _TAIL_PROBABILITY or (previous < 1.0 and above >= previous):
            break  # negligible, or (the tail only falls) the FFT's rounding noise from here on
        expected += above
        previous = above
    return expected


def _max_load_at_most(balls: int, bins: int, most: int) -> float:
    """P(no bin holds more than `most` balls): Poissonised, conditioned on the total."""
    log_terms = np.array([j * math.log(balls / bins) - math.lgamma(j + 1)
                          for j in range(most + 1)])
    top = float(log_terms.max())
    terms = np.exp(log_terms - top)  # (K/n)^j / j!, scaled by e^-top against overflow
    length = 1 << (bins * most).bit_length()  # > bins * most: the sum's support, no aliasing
    spectrum = np.fft.rfft(terms / terms.sum(), length) ** bins
    exactly = float(np.fft.irfft(spectrum, length)[balls])
    if exactly <= 0.0:
        return 0.0
    log_s = top + math.log(terms.sum())
    log_p = (bins * log_s + math.log(exactly) + math.lgamma(balls + 1)
             - balls * math.log(balls))
    return min(math.exp(log_p), 1.0)


def ecmp_capacity_share(balls: int, bins: int) -> float:
    """Share of a bundle of `bins` ports that `balls` statically hashed QPs get on average:
    mean load / expected maximum load (1.0 without balls)."""
    if balls < 1:
        return 1.0
    return balls / bins / expected_max_load(balls, bins)


def _usage(shapes: list[FlowShape], num_links: int) -> tuple[np.ndarray, np.ndarray]:
    """The links the shapes cross (sorted) and the flows of each shape on each of them (rows:
    links, columns: shapes); links are numbered below `num_links`."""
    sizes = [len(shape.links) for shape in shapes]
    crossed = np.concatenate([shape.link_array for shape in shapes])
    counts = np.concatenate([shape.count_array for shape in shapes])
    is_crossed = np.zeros(num_links, dtype=bool)
    is_crossed[crossed] = True
    links = np.flatnonzero(is_crossed)
    row_of = (np.cumsum(is_crossed) - 1)[crossed]
    cells = row_of * len(shapes) + np.repeat(np.arange(len(shapes)), sizes)
    usage = np.bincount(cells, weights=counts, minlength=len(links) * len(shapes))
    return links, usage.reshape(len(links), len(shapes))


def _ecmp_shares(shapes: list[FlowShape], links: np.ndarray,
                 usage: np.ndarray) -> np.ndarray | None:
    """Per row of `links`, the capacity share static hashing leaves (None if no link is hashed).

    A link's port count is the link's own, so every shape crossing it names the same one.
    """
    hashed = [shape for shape in shapes if shape.ecmp_ports]
    if not hashed:
        return None
    ports = np.zeros(len(usage), dtype=np.int64)
    for shape in hashed:
        ports[np.searchsorted(links, shape.link_array)] = shape.ecmp_ports
    qps = np.array([shape.ecmp_qps_per_flow for shape in shapes], dtype=float)
    hashed_rows = np.flatnonzero(ports)
    balls = np.rint(usage[hashed_rows] @ qps).astype(np.int64)
    shares = np.ones(len(usage))
    for i, ball_count, port_count in zip(hashed_rows.tolist(), balls.tolist(),
                                         ports[hashed_rows].tolist()):
        shares[i] = ecmp_capacity_share(ball_count, port_count)
    return shares


def max_min_rates(shapes: list[FlowShape], capacity_bytes_per_s: np.ndarray) -> np.ndarray:
    """Per-flow rate (bytes/s) of each shape under max-min fairness (progressive filling),
    on link capacities cut to what static ECMP hashing delivers where links are hashed."""
    links, usage = _usage(shapes, len(capacity_bytes_per_s))
    full = capacity_bytes_per_s[links].astype(float)
    shares = _ecmp_shares(shapes, links, usage)
    if shares is not None:
        full = full * shares
    capacity = full
    rates = np.zeros(len(shapes))
    active = np.ones(len(shapes), dtype=bool)
    while active.any():
        load = usage @ active  # whole counts: exact in any order of summation
        used = load > 0
        step = np.min(capacity[used] / load[used])
        rates[active] += step
        capacity = capacity - load * step
        saturated = used & (capacity <= _RELATIVE_EPS * full)
        active &= ~usage[saturated].any(axis=0)
    return rates


@dataclass(slots=True)
class _Transfer:
    """The live classes of one started transfer, the bytes each flow of them has left (plain
    floats: a transfer has a handful of classes, too few for numpy to pay off) and every link
    its classes cross."""

    classes: list[FlowClass]
    remaining_bytes: list[float]
    on_done: Callable[[], object]
    link_array: np.ndarray


@dataclass(slots=True)
class _Component:
    """Transfers linked by the links they share (directly or through one another). Max-min
    rates on disjoint sets of links are independent, so each component is solved, advanced and
    woken on its own: a transfer starting or ending replans only its component."""

    transfers: dict[int, _Transfer]
    last_s: float
    rates: dict[int, list[float]] = field(default_factory=dict)
    generation: int = 0


@dataclass(slots=True)
class FluidNetwork:
    """Active transfers over links of fixed capacity; tells its clock when the next one ends.

    `schedule(delay_s, callback)` is the clock (the engine passes SimPy's); the network never
    imports SimPy itself so it can be tested with a hand-driven clock.
    """

    capacity_bytes_per_s: np.ndarray
    now: Callable[[], float]
    schedule: Callable[[float, Callable[[], object]], None]
    _components: dict[int, _Component] = field(default_factory=dict)
    # per link, the component whose transfers cross it (-1: none)
    _owner: np.ndarray = field(init=False)
    _memo: dict[tuple[int, ...], tuple[list[FlowShape], list[float]]] = field(
        default_factory=dict)
    # the links of each tuple of shapes started together (keyed by their ids, kept alive here)
    _links: dict[tuple[int, ...], tuple[tuple[FlowShape, ...], np.ndarray]] = field(
        default_factory=dict)
    _next_transfer: int = 0
    _next_component: int = 0

    def __post_init__(self) -> None:
        self._owner = np.full(len(self.capacity_bytes_per_s), -1, dtype=np.int64)

    def start(self, classes: list[FlowClass], on_done: Callable[[], object]) -> None:
        """Start moving `classes`; call `on_done` when every byte of them has arrived."""
        live = [c for c in classes if c.bytes_per_flow > 0]
        if not live:
            self.schedule(0.0, on_done)
            return
        transfer = _Transfer(live, [float(c.bytes_per_flow) for c in live], on_done,
                             self._links_of(live))
        cid = self._place(self._next_transfer, transfer)
        self._next_transfer += 1
        self._replan(cid, self._components[cid])

    def _links_of(self, classes: list[FlowClass]) -> np.ndarray:
        key = tuple(id(c.shape) for c in classes)
        if key not in self._links:
            links = sorted({link for c in classes for link in c.shape.links})
            self._links[key] = (tuple(c.shape for c in classes), np.array(links, dtype=np.int64))
        return self._links[key][1]

    def _place(self, tid: int, transfer: _Transfer) -> int:
        """Put `transfer` in a new component with every component it shares a link with
        (advanced to now); the new component's id. Its rates are left to `_replan`."""
        transfers = {tid: transfer}
        owners = self._owner[transfer.link_array]
        for cid in np.unique(owners[owners >= 0]).tolist():
            joined = self._components.pop(cid)
            self._advance(joined)
            transfers.update(joined.transfers)
        cid = self._next_component
        self._next_component += 1
        self._components[cid] = _Component(dict(sorted(transfers.items())), self.now())
        for member in transfers.values():
            self._owner[member.link_array] = cid
        return cid

    def _advance(self, component: _Component) -> None:
        elapsed = self.now() - component.last_s
        component.last_s = self.now()
        if elapsed <= 0:
            return
        for tid, transfer in component.transfers.items():
            transfer.remaining_bytes = [max(left - rate * elapsed, 0.0) for left, rate
                                        in zip(transfer.remaining_bytes, component.rates[tid])]

    def _replan(self, cid: int, component: _Component) -> None:
        component.generation += 1
        component.rates = self._solve(component.transfers)
        horizon = min(self._time_to_first_finish(t, component.rates[tid])
                      for tid, t in component.transfers.items())
        generation = component.generation
        self.schedule(max(horizon, 0.0), lambda: self._wake(cid, generation))

    @staticmethod
    def _time_to_first_finish(transfer: _Transfer, rates: list[float]) -> float:
        return min((left / rate for left, rate in zip(transfer.remaining_bytes, rates)
                    if left > 0), default=0.0)

    def _solve(self, transfers: dict[int, _Transfer]) -> dict[int, list[float]]:
        """Rates of the live classes, memoised on the set of live shapes (kept by the memo)."""
        entries = sorted(((id(c.shape), tid, k, c.shape) for tid, t in transfers.items()
                          for k, c in enumerate(t.classes) if t.remaining_bytes[k] > 0),
                         key=lambda entry: entry[0])
        key = tuple(entry[0] for entry in entries)
        if key not in self._memo:
            shapes = [entry[3] for entry in entries]
            self._memo[key] = (shapes, max_min_rates(shapes, self.capacity_bytes_per_s).tolist())
        solved = self._memo[key][1]
        rates = {tid: [0.0] * len(t.classes) for tid, t in transfers.items()}
        for position, (_, tid, k, _) in enumerate(entries):
            rates[tid][k] = solved[position]
        return rates

    def _wake(self, cid: int, generation: int) -> None:
        component = self._components.get(cid)
        if component is None or component.generation != generation:
            return
        self._advance(component)
        for tid, transfer in component.transfers.items():
            transfer.remaining_bytes = [
                0.0 if self._finished(c, left, rate) else left for c, left, rate
                in zip(transfer.classes, transfer.remaining_bytes, component.rates[tid])]
        finished = [tid for tid, t in component.transfers.items() if not any(t.remaining_bytes)]
        if not finished:
            self._replan(cid, component)
            return
        del self._components[cid]
        for transfer in component.transfers.values():
            self._owner[transfer.link_array] = -1
        done = [component.transfers.pop(tid) for tid in finished]
        placed = {self._place(tid, transfer) for tid, transfer in component.transfers.items()}
        parts = sorted((next(iter(self._components[p].transfers)), p) for p in placed
                       if p in self._components)  # each in the order of its first transfer
        for _, part in parts:
            self._replan(part, self._components[part])
        for transfer in done:
            transfer.on_done()

    @staticmethod
    def _finished(flow_class: FlowClass, left: float, rate: float) -> bool:
        return left <= _RELATIVE_EPS * flow_class.bytes_per_flow or left <= rate * _TIME_EPS_S
