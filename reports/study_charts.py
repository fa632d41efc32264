"""What a study (compare, scale) shows: its bar, stacked-breakdown and scaling charts, its
summary and breakdown tables, and its output folder (a tidy CSV and the PNG charts).

Chart functions return matplotlib Figures (Agg canvas, nothing drawn on screen);
`write_study` saves them. The study frame has one row per point: column `point` labels it,
`breakdown_<category>_s` columns hold the step-time breakdown (simulator.studies).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
from matplotlib.figure import Figure

from reports.files import save_figure, write_text
from reports.summary import BREAKDOWN_LABELS, BREAKDOWN_ORDER

CATEGORY_COLOURS = {
    "compute": "#1f77b4", "recompute": "#aec7e8", "moe_overhead": "#ff7f0e",
    "elementwise": "#ffbb78", "optimizer": "#8c564b", "launch": "#7f7f7f",
    "exposed_ep": "#d62728", "exposed_tp": "#e377c2", "exposed_cp": "#bcbd22",
    "exposed_pp": "#2ca02c",
    "exposed_dp": "#9467bd", "pipeline_bubble": "#c7c7c7",
}
OTHER_COLOUR = "#17becf"
BREAKDOWN_PREFIX, BREAKDOWN_SUFFIX = "breakdown_", "_s"


def category_colour(category: str) -> str:
    return CATEGORY_COLOURS.get(category, OTHER_COLOUR)


def breakdowns_of(frame: pd.DataFrame) -> list[dict[str, float]]:
    """Each row's breakdown as {category: seconds}, from its `breakdown_<category>_s` columns."""
    columns = [c for c in frame.columns
               if c.startswith(BREAKDOWN_PREFIX) and c.endswith(BREAKDOWN_SUFFIX)]
    return [{c[len(BREAKDOWN_PREFIX):-len(BREAKDOWN_SUFFIX)]: float(row[c]) for c in columns}
            for _, row in frame.iterrows()]


def bar_chart(labels: Sequence[str], values: Sequence[float], *, ylabel: str,
              title: str) -> Figure:
    """One bar per label, its value printed on top."""
    figure = Figure(figsize=(max(5.0, 1.3 * len(labels) + 2.5), 4.5))
    axes = figure.add_subplot()
    bars = axes.bar(list(labels), list(values), color=CATEGORY_COLOURS["compute"])
    axes.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=2)
    axes.set(ylabel=ylabel, title=title)
    axes.set_ylim(0, max(values, default=1.0) * 1.15 or 1.0)
    axes.grid(True, axis="y", linewidth=0.3)
    figure.tight_layout()
    return figure


def _ordered_categories(breakdowns: Sequence[Mapping[str, float]]) -> list[str]:
    present = {k for b in breakdowns for k, v in b.items() if v > 0}
    return [k for k in BREAKDOWN_ORDER if k in present] + sorted(present - set(BREAKDOWN_ORDER))


def breakdown_chart(labels: Sequence[str], breakdowns: Sequence[Mapping[str, float]], *,
                    title: str) -> Figure:
    """One stacked bar per label: seconds of the step by category (categories that are
    zero everywhere are left out), bottom to top in the summary's order."""
    figure = Figure(figsize=(max(6.0, 1.3 * len(labels) + 4.5), 5.0))
    axes = figure.add_subplot()
    bottoms = [0.0] * len(labels)
    for category in _ordered_categories(breakdowns):
        heights = [b.get(category, 0.0) for b in breakdowns]
        axes.bar(list(labels), heights, bottom=bottoms, color=category_colour(category),
                 label=BREAKDOWN_LABELS.get(category, category))
        bottoms = [low + high for low, high in zip(bottoms, heights)]
    axes.set(ylabel="seconds per step", title=title)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.grid(True, axis="y", linewidth=0.3)
    figure.tight_layout()
    return figure


def scaling_chart(gpus: Sequence[int], tokens_per_s_per_gpu: Sequence[float],
                  efficiency: Sequence[float], *, title: str) -> Figure:
    """Per-GPU throughput (left axis) and scaling efficiency in % (right axis) vs GPUs."""
    figure = Figure(figsize=(7.5, 4.5))
    axes = figure.add_subplot()
    axes.plot(list(gpus), list(tokens_per_s_per_gpu), marker="o", color="#1f77b4",
              label="tokens/s/GPU")
    axes.set(xscale="log", xlabel="GPUs", ylabel="tokens/s/GPU", title=title)
    axes.minorticks_off()
    axes.set_xticks(list(gpus), [f"{n:,}" for n in gpus])
    axes.set_ylim(0, max(tokens_per_s_per_gpu, default=1.0) * 1.15)
    right = axes.twinx()
    percent = [100 * e for e in efficiency]
    right.plot(list(gpus), percent, marker="s", color="#d62728", label="scaling efficiency")
    right.axhline(100.0, color="#d62728", linewidth=0.6, linestyle=":")
    right.set(ylabel="scaling efficiency vs first point (%)",
              ylim=(min(percent + [100.0]) - 10, max(percent + [100.0]) + 5))
    for a, e in zip(gpus, percent):
        right.annotate(f"{e:.1f} %", (a, e), textcoords="offset points", xytext=(0, 6),
                       ha="center", fontsize=8, color="#d62728")
    axes.grid(True, linewidth=0.3)
    figure.legend(loc="lower left", bbox_to_anchor=(0.1, 0.15), fontsize=8)
    figure.tight_layout()
    return figure


def compare_figures(frame: pd.DataFrame, title: str) -> dict[str, Figure]:
    """The charts of a comparison: TFLOP/s/GPU bars and the stacked breakdown, by file stem."""
    labels = [str(p) for p in frame["point"]]
    return {"tflops_per_gpu": bar_chart(labels, list(frame["tflops_per_gpu"]),
                                        ylabel="model TFLOP/s/GPU", title=title),
            "breakdown": breakdown_chart(labels, breakdowns_of(frame),
                                         title=f"where the step time goes\n{title}")}


def scale_figures(frame: pd.DataFrame, title: str) -> dict[str, Figure]:
    """The charts of a scaling study: throughput and efficiency lines, stacked breakdown."""
    gpus = [int(n) for n in frame["num_gpus"]]
    return {"scaling": scaling_chart(gpus, list(frame["tokens_per_s_per_gpu"]),
                                     list(frame["scaling_efficiency"]), title=title),
            "breakdown": breakdown_chart([f"{n:,}" for n in gpus], breakdowns_of(frame),
                                         title=f"where the step time goes\n{title}")}


def _plan(row: Mapping[str, Any]) -> str:
    return (f"TP{row['tp']} PP{row['pp']} VPP{row['vpp']} EP{row['ep']} CP{row['cp']} "
            f"DP{row['dp']}")


def study_summary_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per point: the plan and the headline figures (what the command prints)."""
    rows = []
    for row in frame.to_dict(orient="records"):
        line = {"point": row["point"], "system": row["system"], "recipe": row["recipe"],
                "GPUs": row["num_gpus"], "plan": _plan(row), "GBS": row["gbs"],
                "step s": row["step_time_s"], "tokens/s/GPU": row["tokens_per_s_per_gpu"],
                "TFLOP/s/GPU": row["tflops_per_gpu"], "MFU %": 100 * row["mfu"]}
        if "scaling_efficiency" in row:
            line["efficiency %"] = 100 * row["scaling_efficiency"]
        rows.append(line)
    return rows


def study_breakdown_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per breakdown category, one column of seconds per point, then the step time."""
    labels = [str(p) for p in frame["point"]]
    breakdowns = breakdowns_of(frame)
    rows: list[dict[str, Any]] = [
        {"seconds per step": BREAKDOWN_LABELS.get(category, category),
         **{label: b.get(category, 0.0) for label, b in zip(labels, breakdowns)}}
        for category in _ordered_categories(breakdowns)]
    rows.append({"seconds per step": "step time",
                 **{label: float(s) for label, s in zip(labels, frame["step_time_s"])}})
    return rows


def write_study(folder: str | Path, name: str, frame: pd.DataFrame,
                figures: Mapping[str, Figure]) -> list[Path]:
    """Write `name`.csv and one PNG per figure into `folder` (created if missing); each file
    whole or not at all. Returns the paths written."""
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    paths = [target / f"{name}.csv"]
    write_text(paths[0], frame.to_csv(index=False))
    for stem, figure in figures.items():
        paths.append(target / f"{stem}.png")
        save_figure(figure, paths[-1])
    return paths
