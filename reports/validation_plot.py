"""Predicted vs measured throughput: log axes, the ±10 % band, one colour per GPU, and the
name of every row missed by more than LABEL_BEYOND beside its point.

Points are plotted on the quantity each row's error is taken on (tokens/s/GPU where measured,
else TFLOP/s/GPU), normalised so that both kinds share one diagonal: x = measured, y =
predicted, each divided by the row's measured value's own unit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure

from reports.files import save_png

BAND = 0.10
LABEL_BEYOND = 0.15


def _pairs(row: Mapping[str, Any]) -> tuple[float, float, str] | None:
    if row["status"] != "ok":
        return None
    if row["measured_tokens_per_s_per_gpu"] is not None:
        return (row["measured_tokens_per_s_per_gpu"], row["predicted_tokens_per_s_per_gpu"],
                "tokens/s/GPU")
    return row["measured_tflops_per_gpu"], row["predicted_tflops_per_gpu"], "TFLOP/s/GPU"


def validation_figure(rows: Sequence[Mapping[str, Any]], title: str) -> Figure:
    """The scatter; rows are validation records (status, measured_*, predicted_*, gpu)."""
    figure = Figure(figsize=(7.5, 6.5))
    axes = figure.add_subplot()
    points = [(row["gpu"], pair) for row in rows if (pair := _pairs(row)) is not None]
    values = [v for _, (m, p, _) in points for v in (m, p)] or [1.0, 10.0]
    low, high = min(values) / 1.5, max(values) * 1.5
    axes.plot([low, high], [low, high], color="black", linewidth=1, label="predicted = measured")
    axes.fill_between([low, high], [low * (1 - BAND), high * (1 - BAND)],
                      [low * (1 + BAND), high * (1 + BAND)], color="0.85", label="±10 %")
    for gpu in sorted({g for g, _ in points}):
        for unit, marker in (("tokens/s/GPU", "o"), ("TFLOP/s/GPU", "^")):
            mine = [(m, p) for g, (m, p, u) in points if g == gpu and u == unit]
            if mine:
                axes.scatter([m for m, _ in mine], [p for _, p in mine], marker=marker, s=28,
                             label=f"{gpu} ({unit})", zorder=3)
    for row in rows:
        pair = _pairs(row)
        if pair is not None and abs(pair[1] / pair[0] - 1) > LABEL_BEYOND:
            axes.annotate(row["name"], pair[:2], xytext=(4, -3), textcoords="offset points",
                          fontsize=6, color="0.25")
    axes.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high),
             xlabel="measured", ylabel="predicted by moesim", title=title)
    axes.legend(fontsize=8, loc="upper left")
    axes.grid(True, which="both", linewidth=0.3)
    figure.tight_layout()
    return figure


def write_validation_plot(rows: Sequence[Mapping[str, Any]], path: str | Path,
                          title: str) -> Figure:
    figure = validation_figure(rows, title)
    save_png(figure, path)
    return figure
