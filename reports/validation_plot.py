"""Predicted vs measured throughput: log axes, the ±10 % band, one colour per GPU, and the
name of every row missed by more than LABEL_BEYOND beside its point.

Points are plotted on the quantity each row's error is taken on (tokens/s/GPU where measured,
else TFLOP/s/GPU), normalised so that both kinds share one diagonal: x = measured, y =
predicted, each divided by the row's measured value's own unit.

Where the rows hold GPU pairs (simulator.gpu_pairs), a second panel draws each pair's
predicted lead against its measured lead (linear axes, the ±5 % band, one colour per
faster/slower pair of GPUs), and names the faster row of every pair whose lead is missed by
more than PAIR_LABEL_BEYOND.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from reports.files import save_figure

BAND = 0.10
LABEL_BEYOND = 0.15
PAIR_BAND = 0.05
PAIR_LABEL_BEYOND = 0.10


def _pairs(row: Mapping[str, Any]) -> tuple[float, float, str] | None:
    if row["status"] != "ok":
        return None
    if row["measured_tokens_per_s_per_gpu"] is not None:
        return (row["measured_tokens_per_s_per_gpu"], row["predicted_tokens_per_s_per_gpu"],
                "tokens/s/GPU")
    return row["measured_tflops_per_gpu"], row["predicted_tflops_per_gpu"], "TFLOP/s/GPU"


def _diagonal(axes: Axes, low: float, high: float, band: float) -> None:
    """The line predicted = measured from `low` to `high`, and the ±`band` around it in grey."""
    axes.plot([low, high], [low, high], color="black", linewidth=1, label="predicted = measured")
    axes.fill_between([low, high], [low * (1 - band), high * (1 - band)],
                      [low * (1 + band), high * (1 + band)], color="0.85",
                      label=f"±{100 * band:.0f} %")


def _draw_pairs(axes: Axes, pairs: Sequence[Mapping[str, Any]]) -> None:
    """Predicted against measured lead of each GPU pair (gpu_pairs' "pairs")."""
    leads = [v for p in pairs for v in (p["measured_lead"], p["predicted_lead"])]
    low, high = min(leads + [1.0]) / 1.05, max(leads) * 1.05
    _diagonal(axes, low, high, PAIR_BAND)
    colours = colormaps["tab20"]
    for index, gpus in enumerate(sorted({(p["faster"], p["slower"]) for p in pairs})):
        mine = [p for p in pairs if (p["faster"], p["slower"]) == gpus]
        axes.scatter([p["measured_lead"] for p in mine], [p["predicted_lead"] for p in mine],
                     s=28, color=colours(index % colours.N), label=f"{gpus[0]} over {gpus[1]}",
                     zorder=3)
    for pair in pairs:
        if abs(pair["lead_error_pct"]) > 100 * PAIR_LABEL_BEYOND:
            axes.annotate(pair["rows"][0], (pair["measured_lead"], pair["predicted_lead"]),
                          xytext=(4, -3), textcoords="offset points", fontsize=6, color="0.25")
    axes.set(xlim=(low, high), ylim=(low, high),
             xlabel="measured lead (faster / slower GPU)", ylabel="predicted lead",
             title=f"GPU pairs: one workload on two GPUs ({len(pairs)})")
    axes.legend(fontsize=7, loc="upper left")
    axes.grid(True, linewidth=0.3)


def validation_figure(rows: Sequence[Mapping[str, Any]], title: str,
                      pairs: Sequence[Mapping[str, Any]] = ()) -> Figure:
    """The scatter; rows are validation records (status, measured_*, predicted_*, gpu); with
    `pairs` (gpu_pairs' "pairs"), the GPU pairs beside it."""
    figure = Figure(figsize=(15.0, 6.5) if pairs else (7.5, 6.5))
    axes = figure.add_subplot(1, 2 if pairs else 1, 1)
    points = [(row["gpu"], pair) for row in rows if (pair := _pairs(row)) is not None]
    values = [v for _, (m, p, _) in points for v in (m, p)] or [1.0, 10.0]
    low, high = min(values) / 1.5, max(values) * 1.5
    _diagonal(axes, low, high, BAND)
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
    if pairs:
        _draw_pairs(figure.add_subplot(1, 2, 2), pairs)
    figure.tight_layout()
    return figure


def write_validation_plot(rows: Sequence[Mapping[str, Any]], path: str | Path,
                          title: str, pairs: Sequence[Mapping[str, Any]] = ()) -> Figure:
    figure = validation_figure(rows, title, pairs)
    save_figure(figure, path)
    return figure
