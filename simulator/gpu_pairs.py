"""GPU pairs: one workload measured on two GPUs, and how well moesim predicts the faster one's
lead, which is what a comparison of systems (`moesim compare`) rests on.

Two rows are a pair when they come from one source and container (the first token of their
names: `mb2606`, `mb260401`, `moerep`, ...) and run one model at one precision, GPU count,
sequence length, routing and MTP depth on two different GPUs, each with the plan and batch its
source chose for that GPU. The faster GPU is the one measured faster; its lead is

    lead = faster / slower,    lead_error_pct = 100 * (predicted lead / measured lead - 1)

(negative: moesim puts the two GPUs closer than they measured; a predicted lead below 1 names
the other GPU faster). Values are on tokens/s where both rows measured it, else on TFLOP/s
when both count FLOPs with the same formula; any other pair is left out.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Sequence

from simulator.validation import RowResult, error_metric, error_stats, metric_values

WORKLOAD_COLUMNS = ("model", "precision", "num_gpus", "seq_len", "routing", "mtp_layers")


def workload_key(row: dict[str, Any]) -> tuple[str, ...]:
    """What two rows must share to be a pair: source and container, and WORKLOAD_COLUMNS."""
    return (row["name"].split("-")[0], *(str(row[column]) for column in WORKLOAD_COLUMNS))


@dataclass(frozen=True, slots=True)
class _Point:
    """A row that ran, on the metric its error is on."""

    result: RowResult
    metric: str
    measured: float
    predicted: float


def _pair(first: _Point, second: _Point) -> dict[str, Any]:
    """Two points on one metric; the faster is the one measured faster."""
    faster, slower = sorted((first, second), key=lambda point: point.measured, reverse=True)
    measured_lead = faster.measured / slower.measured
    predicted_lead = faster.predicted / slower.predicted
    return {"faster": faster.result.gpu, "slower": slower.result.gpu,
            "rows": [faster.result.name, slower.result.name], "on": faster.metric,
            "measured_lead": measured_lead, "predicted_lead": predicted_lead,
            "lead_error_pct": 100 * (predicted_lead / measured_lead - 1),
            "same_faster": predicted_lead >= 1}


def _digest(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [p["lead_error_pct"] for p in pairs]
    return {"n": len(pairs), "median_error_pct": statistics.median(errors),
            "min_error_pct": min(errors), "max_error_pct": max(errors)}


def gpu_pairs(rows: Sequence[dict[str, Any]], results: Sequence[RowResult]) -> dict[str, Any]:
    """Every pair among the rows that ran, by GPUs (faster first) and then lead error; the
    error statistics of the lead errors (`error_stats`: median, mean and max |error|, mean
    signed), in how many pairs the predicted faster GPU
    is the measured one, and per pair of GPUs ("gb300/gb200") the median, least and largest
    lead error. Statistics are None when there is no pair."""
    row_of = {row["name"]: row for row in rows}
    found: dict[tuple[str, ...], list[_Point]] = {}
    for result in results:
        row = row_of.get(result.name)
        if result.status != "ok" or row is None:
            continue
        metric = error_metric(result, row)
        measured, predicted = metric_values(result, metric)
        if measured and predicted:
            found.setdefault(workload_key(row), []).append(
                _Point(result, metric, measured, predicted))
    pairs = sorted((_pair(a, b) for members in found.values()
                    for a, b in combinations(members, 2)
                    if a.result.gpu != b.result.gpu and a.metric == b.metric),
                   key=lambda p: (p["faster"], p["slower"], p["lead_error_pct"]))
    errors = [p["lead_error_pct"] for p in pairs]
    by_gpus: dict[str, list[dict[str, Any]]] = {}
    for pair in pairs:
        by_gpus.setdefault(f"{pair['faster']}/{pair['slower']}", []).append(pair)
    return {"n_pairs": len(pairs), **error_stats(errors),
            "same_faster": sum(p["same_faster"] for p in pairs),
            "by_gpus": {gpus: _digest(members) for gpus, members in by_gpus.items()},
            "pairs": pairs}
