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

DualPipeV (the V-shaped cut-in-half DualPipe of the DeepSeek-V3 report §3.2.1, shipped in
deepseek-ai/DualPipe) gives rank r two chunks, virtual stages r and 2 pp - 1 - r, so a micro
batch runs down the ranks and back up; the F&B pairs it overlaps are a forward of one chunk
against a backward of the other, of different micro batches. Its eight steps are those of
`DualPipe.step` (dualpipe.py), whose counts over one half of DualPipe's ranks become counts
over the V's pp ranks; on rank r, m micro batches (m >= 2 pp): 2 (pp - r - 1) F0; r + 1 times
F0 F1; pp - r - 1 times B1 F1; m - 2 pp + r + 1 times (F0 & B1) (F1 & B0), the middle rank's
first F0 and B1 not overlapped; pp - r - 1 times B1 (F1 & B0); r + 1 times B1 B0; pp - r - 1
times B0. moesim does not split a backward into its input and weight gradients, so the
zero-bubble weight passes of steps 3, 7 and 8 stay inside their backwards: the bubble comes out
a little longer than DualPipe's (pp/2 - 1)(F&B + B - 3W).
"""

from __future__ import annotations

from collections.abc import Generator
from itertools import cycle
from dataclasses import dataclass

SCHEDULES = ("1f1b", "dualpipev")


@dataclass(frozen=True, slots=True)
class Unit:
    """One forward or backward pass of `microbatch` through virtual chunk `chunk`."""

    phase: str
    microbatch: int
    chunk: int


@dataclass(frozen=True, slots=True)
class RankSchedule:
    """The units of one pipeline rank in order, the forwards before its first backward, and
    the indices of the forwards that open the (F, B) neighbours an overlap may pair."""

    units: tuple[Unit, ...]
    warmup: int
    pair_starts: tuple[int, ...]


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
    return RankSchedule(tuple(units), warmup, tuple(range(warmup, len(units) - warmup, 2)))


def dualpipe_v(pp_rank: int, pp: int, num_microbatches: int) -> RankSchedule:
    """The DualPipeV order of rank `pp_rank` (see the module docstring); chunk 0 is virtual
    stage pp_rank, chunk 1 virtual stage 2 pp - 1 - pp_rank."""
    if not 0 <= pp_rank < pp:
        raise ValueError(f"pp_rank={pp_rank}: must be in [0, {pp})")
    if num_microbatches < 2 * pp:
        raise ValueError(f"num_microbatches={num_microbatches}: DualPipeV needs at least "
                         f"2*pp={2 * pp}")
    rest = pp - pp_rank - 1
    issued = {key: 0 for key in (("F", 0), ("F", 1), ("B", 0), ("B", 1))}
    units: list[Unit] = []
    pairs: list[int] = []

    def run(*labels: str, paired: bool = False) -> None:
        if paired:
            pairs.append(len(units))
        for label in labels:
            key = (label[0], int(label[1]))
            units.append(Unit(key[0], issued[key], key[1]))
            issued[key] += 1

    run(*["F0"] * 2 * rest)
    for _ in range(pp_rank + 1):
        run("F0", "F1")
    for _ in range(rest):
        run("B1", "F1")
    for step in range(num_microbatches - 2 * pp + pp_rank + 1):
        run("F0", "B1", paired=not (step == 0 and rest == 0))
        run("F1", "B0", paired=True)
    for _ in range(rest):
        run("B1")
        run("F1", "B0", paired=True)
    for _ in range(pp_rank + 1):
        run("B1", "B0")
    run(*["B0"] * rest)
    return RankSchedule(tuple(units), 2 * pp, tuple(pairs))


def rank_schedule(schedule: str, pp_rank: int, pp: int, vpp: int, num_microbatches: int,
                  a2a_overlap: bool = False, runs: int = 1) -> RankSchedule:
    """The order of rank `pp_rank` under `schedule` (one of SCHEDULES), run `runs` times one
    after the other on `num_microbatches` micro batches each (the later runs' numbered on)."""
    if schedule == "dualpipev":
        once = dualpipe_v(pp_rank, pp, num_microbatches)
    else:
        once = one_f_one_b(pp_rank, pp, vpp, num_microbatches, a2a_overlap)
    size = len(once.units)
    return RankSchedule(
        tuple(Unit(u.phase, u.microbatch + run * num_microbatches, u.chunk)
              for run in range(runs) for u in once.units),
        once.warmup, tuple(start + run * size for run in range(runs) for start in once.pair_starts))


def chunk_stages(schedule: str, pp_rank: int, pp: int, vpp: int) -> tuple[int, ...]:
    """The virtual stage of each chunk of rank `pp_rank`: interleaved 1F1B loops (chunk c is
    c * pp + pp_rank), DualPipeV folds a V (pp_rank, then 2 pp - 1 - pp_rank)."""
    if schedule == "dualpipev":
        return (pp_rank, 2 * pp - 1 - pp_rank)
    return tuple(chunk * pp + pp_rank for chunk in range(vpp))


def rank_of_stage(schedule: str, virtual: int, pp: int) -> int:
    """The pipeline rank that runs virtual stage `virtual`."""
    if schedule == "dualpipev" and virtual >= pp:
        return 2 * pp - 1 - virtual
    return virtual % pp


def activations_in_flight(schedule: str, pp_rank: int, pp: int, vpp: int,
                          num_microbatches: int, overlap: bool) -> int:
    """Units whose activations rank `pp_rank` holds at its peak. 1F1B: its warm-up forwards
    and the first steady-state forward (the plain schedule's count, see the module
    docstring). DualPipeV: walked along its order, a forward adding a unit and a backward
    freeing one, except that an overlapped pair frees a layer as it stores one (2 pp chunks
    after steps 1 and 2; one more where a forward runs before a backward unpaired)."""
    if schedule != "dualpipev":
        return warmup_forwards(pp_rank, pp, vpp, num_microbatches) + 1
    order = dualpipe_v(pp_rank, pp, num_microbatches)
    paired = set(order.pair_starts) if overlap else set()
    held = peak = 0
    for index, unit in enumerate(order.units):
        if index in paired or index - 1 in paired:
            continue
        held += 1 if unit.phase == "F" else -1
        peak = max(peak, held)
    return peak


def check_schedule(schedule: str, pp: int, vpp: int, num_microbatches: int) -> None:
    """The schedule's rules on the pipeline shape; a one-line error naming the field."""
    if schedule == "dualpipev":
        if pp < 2 or vpp != 2:
            raise ValueError(f"pp={pp}, vpp={vpp}: pipeline_schedule='dualpipev' runs two "
                             f"chunks on each of pp >= 2 ranks; set vpp=2")
        if num_microbatches < 2 * pp:
            raise ValueError(f"num_microbatches={num_microbatches}: pipeline_schedule="
                             f"'dualpipev' needs at least 2*pp={2 * pp}")
        return
    if vpp > 1 and num_microbatches % pp:
        raise ValueError(f"num_microbatches={num_microbatches}: interleaved 1F1B (vpp > 1) "
                         f"needs a multiple of pp={pp}")


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
