"""Pipeline schedules: the order in which one pipeline rank runs its forward and backward units.

A unit is the forward ("F") or backward ("B") pass of one micro batch through one model chunk
(virtual stage). Plain 1F1B (vpp = 1) runs pp - r - 1 warm-up forwards on rank r; Megatron's
interleaved 1F1B (vpp > 1) runs (pp - r - 1) * 2 + (vpp - 1) * pp, then alternates one forward
and one backward, then drains. In the interleaved order the k-th forward touches chunk
(k mod pp*vpp) // pp and micro batch (k // (pp*vpp)) * pp + k mod pp; backwards walk the chunks
in reverse. The bubble is about (pp - 1) / (vpp * m) of the step for m micro batches.

With EP all-to-all overlap (1F1B A2A overlap) every rank runs one more warm-up forward
(Megatron-LM megatron/core/pipeline_parallel/schedules.py: `num_warmup_microbatches += 1`
under `overlap_moe_expert_parallel_comm`), so that each steady-state step pairs the forward
of one micro batch with the backward of another: without it the last stage (and every rank
when pp = 1) pairs a forward with its own backward, which cannot start before it ends. With
pp = 1 this is Megatron's combined 1F1B: forward 0 alone, then forward k+1 with backward k.
The extra forward does not raise the activation peak by a micro batch: the paired forward
and backward run layer by layer against each other, the one storing a layer's activations as
the other frees one (simulator.memory counts the plain schedule's in-flight micro batches).
`interleave` adds the tasks of such a pair in Megatron's per-layer order
(COMBINED_1F1B_ORDER).
"""

from __future__ import annotations

from collections.abc import Generator
from itertools import cycle
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Unit:
    """One forward or backward pass of `microbatch` through virtual chunk `chunk`."""

    phase: str
    microbatch: int
    chunk: int


@dataclass(frozen=True, slots=True)
class RankSchedule:
    """The units of one pipeline rank in order; steady-state pairs are (F, B) neighbours."""

    units: tuple[Unit, ...]
    warmup: int

    def pair_starts(self) -> range:
        """Indices of the forwards that open the steady-state (F, B) pairs."""
        return range(self.warmup, len(self.units) - self.warmup, 2)


def _forward_unit(k: int, pp: int, vpp: int) -> Unit:
    group = pp * vpp
    return Unit("F", (k // group) * pp + k % pp, (k % group) // pp)


def _backward_unit(k: int, pp: int, vpp: int) -> Unit:
    group = pp * vpp
    return Unit("B", (k // group) * pp + k % pp, vpp - 1 - (k % group) // pp)


def warmup_forwards(pp_rank: int, pp: int, vpp: int, num_microbatches: int,
                    a2a_overlap: bool = False) -> int:
    """How many forwards rank `pp_rank` runs before its first backward."""
    total = num_microbatches * vpp
    plain = pp - pp_rank - 1 if vpp == 1 else (pp - pp_rank - 1) * 2 + (vpp - 1) * pp
    return min(plain + int(a2a_overlap), total)


def one_f_one_b(pp_rank: int, pp: int, vpp: int, num_microbatches: int,
                a2a_overlap: bool = False) -> RankSchedule:
    """The (interleaved, when vpp > 1) 1F1B order of rank `pp_rank`; `a2a_overlap` adds the
    warm-up forward that lets each steady-state forward and backward pair overlap."""
    if not 0 <= pp_rank < pp:
        raise ValueError(f"pp_rank={pp_rank}: must be in [0, {pp})")
    if vpp > 1 and num_microbatches % pp:
        raise ValueError(f"num_microbatches={num_microbatches}: interleaved 1F1B needs a "
                         f"multiple of pp={pp}")
    total = num_microbatches * vpp
    warmup = warmup_forwards(pp_rank, pp, vpp, num_microbatches, a2a_overlap)
    units = [_forward_unit(k, pp, vpp) for k in range(warmup)]
    for k in range(total - warmup):
        units.append(_forward_unit(warmup + k, pp, vpp))
        units.append(_backward_unit(k, pp, vpp))
    units.extend(_backward_unit(k, pp, vpp) for k in range(total - warmup, total))
    return RankSchedule(tuple(units), warmup)


# The tasks of a unit, added one layer phase per step (workloads.step); the generator returns
# the name of the unit's last compute task. Every layout symbol takes LAYER_PHASES steps.
Segments = Generator[None, None, str]
LAYER_PHASES = 3
# Which unit of a steady-state (forward, backward) pair adds its next phase, per layer pair.
COMBINED_1F1B_ORDER = "BFFBFB"


def drain(unit: Segments) -> str:
    """Add all of a unit's tasks; return its last."""
    while True:
        try:
            next(unit)
        except StopIteration as finished:
            return finished.value


def interleave(forward: Segments, backward: Segments) -> tuple[str, str]:
    """Add a pair's tasks phase by phase in COMBINED_1F1B_ORDER (a unit with more layers
    finishes alone); return the last task of each."""
    units, ends = {"F": forward, "B": backward}, {}
    phases = cycle(COMBINED_1F1B_ORDER)
    while units:
        phase = next(phases)
        if phase in units:
            try:
                next(units[phase])
            except StopIteration as finished:
                ends[phase] = finished.value
                del units[phase]
    return ends["F"], ends["B"]
