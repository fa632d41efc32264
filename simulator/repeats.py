"""Repeated measurements: rows that moesim simulates alike, and how far apart they measured.

Two rows are repeats when they give moesim the same scenario (system, model, plan and recipe,
whatever their releases are called): say one configuration measured in two containers whose
differences the simulator does not see, or measured twice. One prediction serves all of a
group, so the group's spread bounds how close any model of these inputs can come to it:

    spread_pct = 100 * (max measured / min measured - 1)
    floor_pct  = 100 * (max - min) / (max + min)

`floor_pct` is the least largest |error| a single prediction can have on the group's rows (at
the prediction 2 * max * min / (max + min)); beside it, moesim's one prediction for the group and
the smallest and largest of its errors there. Values are on the metric each row's error is on
(tokens/s where measured, else TFLOP/s counted with the row's `flops_formula`); rows on
different metrics or formulas are never repeats.
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from simulator.validation import RowResult, error_metric, metric_values, scenario_key


def _group(members: list[tuple[RowResult, float]], metric: str) -> dict[str, Any]:
    """`members`: each row's result and its measured value on `metric`."""
    measured = [value for _, value in members]
    high, low = max(measured), min(measured)
    errors = [r.error_pct for r, _ in members if r.error_pct is not None]
    return {"rows": [r.name for r, _ in members], "on": metric, "measured": measured,
            "spread_pct": 100 * (high / low - 1), "floor_pct": 100 * (high - low) / (high + low),
            "predicted": metric_values(members[0][0], metric)[1],
            "error_range_pct": [min(errors), max(errors)] if errors else None}


def repeats(rows: Sequence[dict[str, Any]], results: Sequence[RowResult]) -> dict[str, Any]:
    """The groups of rows that ran and that moesim simulates alike, widest spread first, and
    the median and max of their spreads (None when there are no groups)."""
    row_of = {row["name"]: row for row in rows}
    found: dict[tuple[str, str], list[tuple[RowResult, float]]] = {}
    for result in results:
        row = row_of.get(result.name)
        if result.status != "ok" or row is None:
            continue
        metric = error_metric(result, row)
        measured = metric_values(result, metric)[0]
        if measured:
            found.setdefault((metric, scenario_key(row)), []).append((result, measured))
    groups = sorted((_group(members, metric) for (metric, _), members in found.items()
                     if len(members) > 1), key=lambda g: -g["spread_pct"])
    spreads = [g["spread_pct"] for g in groups]
    return {"n_groups": len(groups), "n_rows": sum(len(g["rows"]) for g in groups),
            "median_spread_pct": statistics.median(spreads) if spreads else None,
            "max_spread_pct": max(spreads) if spreads else None, "groups": groups}
