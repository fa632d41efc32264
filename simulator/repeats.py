"""Repeated measurements: rows that moesim simulates alike, and how far apart they measured.

Two rows are repeats when they give moesim the same scenario (system, model, plan and recipe,
whatever their releases are called): say one configuration measured in two containers whose
differences the simulator does not see, or measured twice. One prediction serves all of a
group, so the group's spread bounds how close any model of these inputs can come to it:

    spread_pct = 100 * (max measured / min measured - 1)
    floor_pct  = 100 * (max - min) / (max + min)

`floor_pct` is the least largest |error| a single prediction can have on the group's rows (at
the prediction 2 * max * min / (max + min)). Values are on the metric each row's error is on
(tokens/s where measured, else TFLOP/s counted with the row's `flops_formula`); rows on
different metrics or formulas are never repeats.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any, Sequence

from simulator.validation import RowResult, row_scenario


def _scenario_key(row: dict[str, Any]) -> str:
    """What moesim simulates for `row`, without the name of the row's recipe."""
    scenario = row_scenario(row)
    return repr(replace(scenario, recipe=replace(scenario.recipe, name="")))


def _measured(result: RowResult, row: dict[str, Any]) -> tuple[str, float | None]:
    """The metric `result`'s error is on, and its measured value."""
    if result.measured_tokens_per_s_per_gpu is not None:
        return "tokens/s", result.measured_tokens_per_s_per_gpu
    return f"TFLOP/s ({row['flops_formula']})", result.measured_tflops_per_gpu


def _group(members: list[tuple[str, float]], metric: str) -> dict[str, Any]:
    values = [value for _, value in members]
    high, low = max(values), min(values)
    return {"rows": [name for name, _ in members], "on": metric, "measured": values,
            "spread_pct": 100 * (high / low - 1), "floor_pct": 100 * (high - low) / (high + low)}


def repeats(rows: Sequence[dict[str, Any]], results: Sequence[RowResult]) -> dict[str, Any]:
    """The groups of rows that ran and that moesim simulates alike, widest spread first, and
    the median and max of their spreads (None when there are no groups)."""
    row_of = {row["name"]: row for row in rows}
    found: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for result in results:
        row = row_of.get(result.name)
        if result.status != "ok" or row is None:
            continue
        metric, value = _measured(result, row)
        if value:
            found.setdefault((metric, _scenario_key(row)), []).append((result.name, value))
    groups = sorted((_group(members, metric) for (metric, _), members in found.items()
                     if len(members) > 1), key=lambda g: -g["spread_pct"])
    spreads = [g["spread_pct"] for g in groups]
    return {"n_groups": len(groups), "n_rows": sum(len(g["rows"]) for g in groups),
            "median_spread_pct": statistics.median(spreads) if spreads else None,
            "max_spread_pct": max(spreads) if spreads else None, "groups": groups}
