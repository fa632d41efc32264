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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

_RELATIVE_EPS = 1e-9
# Bytes that would move in this time are rounding noise: a class this close to done is done.
_TIME_EPS_S = 1e-12


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowShape:
    """Where the flows of one class go: link indices and how many flows of the class cross each."""

    links: tuple[int, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.links) != len(self.counts) or not self.links:
            raise ValueError(f"flow shape: links={self.links} and counts={self.counts} must be "
                             "non-empty and of equal length")


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowClass:
    """Identical flows of `bytes_per_flow` each, crossing links as `shape` says."""

    shape: FlowShape
    bytes_per_flow: float


def max_min_rates(shapes: list[FlowShape], capacity_bytes_per_s: np.ndarray) -> np.ndarray:
    """Per-flow rate (bytes/s) of each shape under max-min fairness (progressive filling)."""
    links = sorted({link for shape in shapes for link in shape.links})
    row = {link: i for i, link in enumerate(links)}
    usage = np.zeros((len(links), len(shapes)))
    for k, shape in enumerate(shapes):
        for link, count in zip(shape.links, shape.counts):
            usage[row[link], k] += count
    capacity = capacity_bytes_per_s[links].astype(float)
    rates = np.zeros(len(shapes))
    active = np.ones(len(shapes), dtype=bool)
    while active.any():
        load = usage[:, active].sum(axis=1)
        used = load > 0
        step = np.min(capacity[used] / load[used])
        rates[active] += step
        capacity = capacity - load * step
        saturated = used & (capacity <= _RELATIVE_EPS * capacity_bytes_per_s[links])
        active &= ~usage[saturated].any(axis=0)
    return rates


@dataclass(slots=True)
class _Transfer:
    classes: list[FlowClass]
    remaining_bytes: np.ndarray
    on_done: Callable[[], object]


@dataclass(slots=True)
class FluidNetwork:
    """Active transfers over links of fixed capacity; tells its clock when the next one ends.

    `schedule(delay_s, callback)` is the clock (the engine passes SimPy's); the network never
    imports SimPy itself so it can be tested with a hand-driven clock.
    """

    capacity_bytes_per_s: np.ndarray
    now: Callable[[], float]
    schedule: Callable[[float, Callable[[], object]], None]
    _transfers: dict[int, _Transfer] = field(default_factory=dict)
    _rates: dict[int, np.ndarray] = field(default_factory=dict)
    _memo: dict[tuple[int, ...], tuple[list[FlowShape], np.ndarray]] = field(default_factory=dict)
    _next_id: int = 0
    _generation: int = 0
    _last_s: float = 0.0

    def start(self, classes: list[FlowClass], on_done: Callable[[], object]) -> None:
        """Start moving `classes`; call `on_done` when every byte of them has arrived."""
        self._advance()
        live = [c for c in classes if c.bytes_per_flow > 0]
        if not live:
            self.schedule(0.0, on_done)
            return
        remaining = np.array([c.bytes_per_flow for c in live])
        self._transfers[self._next_id] = _Transfer(live, remaining, on_done)
        self._next_id += 1
        self._replan()

    def _advance(self) -> None:
        elapsed = self.now() - self._last_s
        self._last_s = self.now()
        if elapsed <= 0:
            return
        for tid, transfer in self._transfers.items():
            transfer.remaining_bytes = np.maximum(
                transfer.remaining_bytes - self._rates[tid] * elapsed, 0.0)

    def _replan(self) -> None:
        self._generation += 1
        if not self._transfers:
            return
        self._rates = self._solve()
        horizon = min(self._time_to_first_finish(t, self._rates[tid])
                      for tid, t in self._transfers.items())
        generation = self._generation
        self.schedule(max(horizon, 0.0), lambda: self._wake(generation))

    @staticmethod
    def _time_to_first_finish(transfer: _Transfer, rates: np.ndarray) -> float:
        moving = transfer.remaining_bytes > 0
        if not moving.any():
            return 0.0
        return float(np.min(transfer.remaining_bytes[moving] / rates[moving]))

    def _solve(self) -> dict[int, np.ndarray]:
        """Rates of the live classes, memoised on the set of live shapes (kept by the memo)."""
        entries = sorted(((id(c.shape), tid, k, c.shape) for tid, t in self._transfers.items()
                          for k, c in enumerate(t.classes) if t.remaining_bytes[k] > 0),
                         key=lambda entry: entry[0])
        key = tuple(entry[0] for entry in entries)
        if key not in self._memo:
            shapes = [entry[3] for entry in entries]
            self._memo[key] = (shapes, max_min_rates(shapes, self.capacity_bytes_per_s))
        solved = self._memo[key][1]
        rates = {tid: np.zeros(len(t.classes)) for tid, t in self._transfers.items()}
        for position, (_, tid, k, _) in enumerate(entries):
            rates[tid][k] = solved[position]
        return rates

    def _wake(self, generation: int) -> None:
        if generation != self._generation:
            return
        self._advance()
        for tid, transfer in self._transfers.items():
            transfer.remaining_bytes[self._finished_classes(transfer, self._rates[tid])] = 0.0
        finished = [tid for tid, t in self._transfers.items() if not t.remaining_bytes.any()]
        for tid in finished:
            self._transfers.pop(tid).on_done()
        self._replan()

    @staticmethod
    def _finished_classes(transfer: _Transfer, rates: np.ndarray) -> np.ndarray:
        sizes = np.array([c.bytes_per_flow for c in transfer.classes])
        return ((transfer.remaining_bytes <= _RELATIVE_EPS * sizes)
                | (transfer.remaining_bytes <= rates * _TIME_EPS_S))
