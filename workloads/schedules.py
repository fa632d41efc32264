"""Pipeline schedules: the order in which one pipeline rank runs its forward and backward units.

A unit is the forward ("F") or backward ("B") pass of one micro batch through one model chunk
(virtual stage). Plain 1F1B (vpp = 1) runs pp - r - 1 warm-up forwards on rank r; Megatron's
interleaved 1F1B (vpp > 1) runs (pp - r - 1) * 2 + (vpp - 1) * pp, then alternates one forward
and one backward, then drains. In the interleaved order the k-th forward touches chunk
(k mod pp*vpp) // pp and micro batch (k // (pp*vpp)) * pp + k mod pp; backwards walk the chunks
in reverse. The bubble is about (pp - 1) / (vpp * m) of the step for m micro batches.
"""

from __future__ import annotations

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


def _forward_unit(k: int, pp: int, vpp: int) -> Unit:
    group = pp * vpp
    return Unit("F", (k // group) * pp + k % pp, (k % group) // pp)


def _backward_unit(k: int, pp: int, vpp: int) -> Unit:
    group = pp * vpp
    return Unit("B", (k // group) * pp + k % pp, vpp - 1 - (k % group) // pp)


def warmup_forwards(pp_rank: int, pp: int, vpp: int, num_microbatches: int) -> int:
    """How many forwards rank `pp_rank` runs before its first backward."""
    total = num_microbatches * vpp
    if vpp == 1:
        return min(pp - pp_rank - 1, total)
    return min((pp - pp_rank - 1) * 2 + (vpp - 1) * pp, total)


def one_f_one_b(pp_rank: int, pp: int, vpp: int, num_microbatches: int) -> RankSchedule:
    """The (interleaved, when vpp > 1) 1F1B order of rank `pp_rank`."""
    if not 0 <= pp_rank < pp:
        raise ValueError(f"pp_rank={pp_rank}: must be in [0, {pp})")
    if vpp > 1 and num_microbatches % pp:
        raise ValueError(f"num_microbatches={num_microbatches}: interleaved 1F1B needs a "
                         f"multiple of pp={pp}")
    total = num_microbatches * vpp
    warmup = warmup_forwards(pp_rank, pp, vpp, num_microbatches)
    units = [_forward_unit(k, pp, vpp) for k in range(warmup)]
    for k in range(total - warmup):
        units.append(_forward_unit(warmup + k, pp, vpp))
        units.append(_backward_unit(k, pp, vpp))
    units.extend(_backward_unit(k, pp, vpp) for k in range(total - warmup, total))
    return RankSchedule(tuple(units), warmup)
