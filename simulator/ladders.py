"""Optimisation ladders: rows that measure one configuration as features are turned on one
after another, named `ladder-<ladder>-<NN>-<slug>` (step NN, data/README.md "Names").

A ladder is judged on what each step changes, not only on each row's error: for every step
the measured and the predicted change from the step before, and whether their signs agree;
for the whole ladder the climb, the last step's value over the first's, predicted against
measured:

    climb_error_pct = 100 * (predicted_last / predicted_first
                             / (measured_last / measured_first) - 1)

Values are on the metric each row's error is on (tokens/s where measured, else TFLOP/s), so
a ladder whose rows mix the two is compared on TFLOP/s.
"""

from __future__ import annotations

from typing import Any, Sequence

from simulator.validation import LADDER_ROW, RowResult


def _pairs(rows: Sequence[RowResult]) -> list[tuple[float | None, float | None]]:
    """(measured, predicted) of each row, on tokens/s if every row measured it."""
    if all(r.measured_tokens_per_s_per_gpu is not None for r in rows):
        return [(r.measured_tokens_per_s_per_gpu, r.predicted_tokens_per_s_per_gpu)
                for r in rows]
    return [(r.measured_tflops_per_gpu, r.predicted_tflops_per_gpu) for r in rows]


def _sign(change: float) -> int:
    return (change > 0) - (change < 0)


def _ladder(rows: list[tuple[int, RowResult]]) -> dict[str, Any]:
    rows = sorted(rows, key=lambda item: item[0])
    pairs = _pairs([r for _, r in rows])
    missing = [r.name for (_, r), (m, p) in zip(rows, pairs)
               if r.status != "ok" or not m or not p]
    if missing:
        return {"n": len(rows), "status": "incomplete",
                "reason": f"no comparable value for {', '.join(missing)}"}
    steps: list[dict[str, Any]] = [
        {"step": step, "name": r.name, "measured": m, "predicted": p,
         "measured_change_pct": None, "predicted_change_pct": None, "same_sign": None}
        for (step, r), (m, p) in zip(rows, pairs)]
    for before, after in zip(steps, steps[1:]):
        measured = 100 * (after["measured"] / before["measured"] - 1)
        predicted = 100 * (after["predicted"] / before["predicted"] - 1)
        after.update(measured_change_pct=measured, predicted_change_pct=predicted,
                     same_sign=_sign(measured) == _sign(predicted))
    measured_climb = steps[-1]["measured"] / steps[0]["measured"]
    predicted_climb = steps[-1]["predicted"] / steps[0]["predicted"]
    return {"n": len(steps), "status": "ok", "steps": steps,
            "steps_with_measured_sign": sum(s["same_sign"] for s in steps[1:]),
            "steps_judged": len(steps) - 1,
            "measured_climb": measured_climb, "predicted_climb": predicted_climb,
            "climb_error_pct": 100 * (predicted_climb / measured_climb - 1)}


def ladders(results: Sequence[RowResult]) -> dict[str, dict[str, Any]]:
    """Every ladder among the rows (by ladder name): its steps and its climb; a ladder with a
    failed or unmeasured row is reported as incomplete, with the rows at fault."""
    found: dict[str, list[tuple[int, RowResult]]] = {}
    for result in results:
        match = LADDER_ROW.match(result.name)
        if match:
            found.setdefault(match[1], []).append((int(match[2]), result))
    return {name: _ladder(rows) for name, rows in sorted(found.items()) if len(rows) > 1}
