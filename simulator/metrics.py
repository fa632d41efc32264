"""From a Trace to what an engineer reads: throughput, TFLOPs/GPU, MFU and a time breakdown.

    tokens/s/GPU = gbs * seq / (step_time * num_gpus)
    TFLOPs/GPU   = model_flops_per_step / (step_time * num_gpus)   (Megatron's definition)
    MFU          = TFLOPs/GPU / dense peak of the training precision

The breakdown splits each simulated rank's step time along its compute lane: busy time by task
category (compute, recompute, moe_overhead, optimizer), and idle time by what the rank was
waiting for: the host launching kernels ("launch"), communication in flight on that rank
("exposed_<kind>", the first kind in EXPOSED_ORDER wins where streams overlap), else the
pipeline ("pipeline_bubble"). The breakdown reported is the mean over GPUs: each simulated
rank's breakdown weighted by the GPUs it stands for (equal weights when every rank stands for
as many, as in a folded or unfolded step; unequal in a partly unfolded one); its parts add up
to the step time. When compute ran at the slowest GPU's pace (simulator.variability), the
share of busy time a typical GPU spends waiting for it is reported as "gpu_variation".
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

from simulator.engine import TaskRecord, Trace

EXPOSED_ORDER = ("ep", "tp", "cp", "pp", "dp")
LAUNCH, BUBBLE, VARIATION = "launch", "pipeline_bubble", "gpu_variation"
IDLE_CATEGORIES = (LAUNCH, *(f"exposed_{kind}" for kind in EXPOSED_ORDER), BUBBLE, VARIATION)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepMetrics:
    step_time_s: float
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    mfu: float
    breakdown_s: Mapping[str, float]


def _subtract(interval: tuple[float, float], cuts: list[tuple[float, float]],
              ends: list[float]) -> list[tuple[float, float]]:
    """Parts of `interval` not covered by `cuts` (merged: sorted and disjoint; `ends` are their
    ends, to skip by bisection the cuts that end before the interval)."""
    pieces, cursor = [], interval[0]
    for index in range(bisect_right(ends, cursor), len(cuts)):
        start, end = cuts[index]
        if start >= interval[1]:
            break
        if start > cursor:
            pieces.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < interval[1]:
        pieces.append((cursor, interval[1]))
    return pieces


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def _idle_gaps(compute: list[TaskRecord], step_time_s: float) -> list[tuple[float, float, float]]:
    """(start, end, issued_s of the task that ends the gap) for every idle stretch."""
    gaps, cursor = [], 0.0
    for record in compute:
        if record.start_s > cursor:
            gaps.append((cursor, record.start_s, record.issued_s))
        cursor = max(cursor, record.end_s)
    if cursor < step_time_s:
        gaps.append((cursor, step_time_s, cursor))
    return gaps


def rank_breakdown(records: list[TaskRecord], step_time_s: float) -> dict[str, float]:
    """Seconds of one rank's step by category; the values add up to `step_time_s`."""
    compute = sorted((r for r in records if r.lane == "compute"), key=lambda r: r.start_s)
    parts: dict[str, float] = defaultdict(float)
    for record in compute:
        parts[record.category] += record.end_s - record.start_s
    comm: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for record in records:
        if record.lane != "compute":
            comm[record.category].append((record.start_s, record.end_s))
    comm_merged = {kind: _merge(spans) for kind, spans in comm.items()}
    comm_ends = {kind: [end for _, end in spans] for kind, spans in comm_merged.items()}
    for start, end, issued_s in _idle_gaps(compute, step_time_s):
        host_end = min(max(issued_s, start), end)
        parts[LAUNCH] += host_end - start
        remaining = [(host_end, end)] if host_end < end else []
        for kind in EXPOSED_ORDER:
            if not remaining:
                break
            if kind not in comm_merged:
                continue
            spans, ends = comm_merged[kind], comm_ends[kind]
            left = [piece for gap in remaining for piece in _subtract(gap, spans, ends)]
            parts[f"exposed_{kind}"] += _length(remaining) - _length(left)
            remaining = left
        parts[BUBBLE] += _length(remaining)
    return dict(parts)


def step_breakdown(trace: Trace,
                   gpus_per_rank: Sequence[int] | None = None) -> dict[str, float]:
    """Mean over GPUs of `rank_breakdown`: each simulated rank weighted by the GPUs it stands
    for (`gpus_per_rank`, in `trace.simulated_ranks` order; equal weights when None or empty)."""
    by_rank: dict[int, list[TaskRecord]] = defaultdict(list)
    for record in trace.records:
        by_rank[record.rank].append(record)
    weight = (dict(zip(trace.simulated_ranks, gpus_per_rank)) if gpus_per_rank
              else dict.fromkeys(by_rank, 1))
    gpus = sum(weight.values())
    total: dict[str, float] = defaultdict(float)
    for rank, records in by_rank.items():
        for key, value in rank_breakdown(records, trace.step_time_s).items():
            total[key] += value * weight[rank] / gpus
    return {key: total[key] for key in sorted(total) if total[key] > 0}


def with_variation_wait(breakdown: Mapping[str, float], slowdown: float) -> dict[str, float]:
    """`breakdown` of a step run at the slowest GPU's pace, as a typical GPU spends it: each
    busy category shrinks by 1 / `slowdown`, the difference is waiting (VARIATION)."""
    if slowdown == 1:
        return dict(breakdown)
    keep = 1.0 / slowdown
    busy = [key for key in breakdown if key not in IDLE_CATEGORIES]
    result = {k: v * keep if k in busy else v for k, v in breakdown.items()}
    result[VARIATION] = result.get(VARIATION, 0.0) + sum(breakdown[k] for k in busy) * (1 - keep)
    return result


def step_metrics(trace: Trace, *, num_gpus: int, tokens_per_step: float,
                 model_flops_per_step: float, peak_flops_per_s: float,
                 gpus_per_rank: Sequence[int] | None = None,
                 variation_slowdown: float = 1.0) -> StepMetrics:
    """Throughput, TFLOPs/GPU, MFU and the breakdown (`step_breakdown`) of one step whose
    compute ran at the slowest GPU's pace, `variation_slowdown` (simulator.variability)."""
    step_s = trace.step_time_s
    flops_per_gpu_s = model_flops_per_step / (step_s * num_gpus)
    return StepMetrics(step_time_s=step_s,
                       tokens_per_s_per_gpu=tokens_per_step / (step_s * num_gpus),
                       tflops_per_gpu=flops_per_gpu_s / 1e12,
                       mfu=flops_per_gpu_s / peak_flops_per_s,
                       breakdown_s=with_variation_wait(step_breakdown(trace, gpus_per_rank),
                                                       variation_slowdown))
