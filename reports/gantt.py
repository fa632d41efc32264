"""The Gantt chart of one pipeline's steady state: every stage of one pipeline, one row per
stage x lane, every task a bar coloured by its category, in a window around the middle of
the step.

Rows in are trace records (name, rank, lane, category, start_s, end_s, microbatch, chunk) with
the pipeline `stage` of their rank. The default window spans CYCLES forward+backward units of
one stage, centred on the middle of the step, where interleaved 1F1B is in steady state:

    unit_s = step_s / (micro batches x model chunks per stage),  window = CYCLES x unit_s

On compute rows, forward work fills the upper half and backward work the lower half (with
1F1B all-to-all overlap they interleave), and each schedule unit is outlined and named (F3 =
forward of micro batch 3, B3.1 = backward of micro batch 3 on the stage's model chunk 1).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from reports.chrome_trace import LANE_ORDER
from reports.files import save_figure
from reports.study_charts import category_colour

CYCLES = 4
MS = 1e3
COMM_LABELS = {"ep": "EP all-to-all", "tp": "TP collectives", "cp": "CP ring exchange",
               "pp": "PP send/recv", "dp": "DP reduce/gather"}
CATEGORY_ORDER = ("compute", "recompute", "moe_overhead", "elementwise", "optimizer", "ep", "tp",
                  "cp", "pp", "dp")
MIN_LABEL_FRACTION = 0.025  # units narrower than this share of the window go unlabelled

Row = Mapping[str, Any]


def _colour(category: str) -> str:
    return category_colour(f"exposed_{category}" if category in COMM_LABELS else category)


def _lane_key(lane: str) -> int:
    return LANE_ORDER.index(lane) if lane in LANE_ORDER else len(LANE_ORDER)


def steady_state_window(rows: Sequence[Row], cycles: int = CYCLES) -> tuple[float, float]:
    """(start_s, end_s): `cycles` forward+backward units of one stage around the middle."""
    if not rows:
        raise ValueError("gantt: the trace has no tasks")
    step_s = max(r["end_s"] for r in rows)
    units = {(r["stage"], r["microbatch"], r["chunk"]) for r in rows if r["microbatch"] >= 0}
    stages = {r["stage"] for r in rows}
    unit_s = step_s * len(stages) / max(len(units), 1)
    half = min(cycles * unit_s, step_s) / 2
    middle = step_s / 2
    return middle - half, middle + half


def _phase(row: Row) -> str:
    """F or B for a micro batch's forward or backward task (from its name), else ""."""
    parts = row["name"].split("/")
    phase = parts[1][:1] if len(parts) > 1 and row["microbatch"] >= 0 else ""
    return phase if phase in ("F", "B") else ""


def _band(row: Row, y: int) -> tuple[float, float]:
    """(bottom, height) of a bar: compute rows split forward (upper) and backward (lower)."""
    phase = _phase(row) if row["lane"] == "compute" else ""
    return {"F": (y, 0.4), "B": (y - 0.4, 0.4)}.get(phase, (y - 0.4, 0.8))


def _unit(row: Row, chunked: bool) -> str:
    """F3 / B3 (forward / backward of micro batch 3), with .chunk when the stage has several."""
    return f"{_phase(row)}{row['microbatch']}" + (f".{row['chunk']}" if chunked else "")


def _tracks(rows: Sequence[Row]) -> list[tuple[int, str]]:
    return sorted({(r["stage"], r["lane"]) for r in rows},
                  key=lambda track: (track[0], _lane_key(track[1])))


def _clipped(rows: Sequence[Row], window: tuple[float, float]) -> list[Row]:
    start, end = window
    return [r for r in rows if r["end_s"] > start and r["start_s"] < end
            and r["end_s"] > r["start_s"]]


def _draw_bars(axes: Any, rows: Sequence[Row], y_of: Mapping[tuple[int, str], int],
               window: tuple[float, float]) -> list[str]:
    """One broken_barh per track and category; returns the categories drawn, in order."""
    spans: dict[tuple[tuple[float, float], str], list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        begin, finish = max(r["start_s"], window[0]), min(r["end_s"], window[1])
        band = _band(r, y_of[r["stage"], r["lane"]])
        spans[band, r["category"]].append((begin * MS, (finish - begin) * MS))
    for (band, category), bars in spans.items():
        axes.broken_barh(bars, band, facecolors=_colour(category))
    drawn = {category for _, category in spans}
    return [c for c in CATEGORY_ORDER if c in drawn] + sorted(drawn - set(CATEGORY_ORDER))


def _draw_units(axes: Any, rows: Sequence[Row], y_of: Mapping[tuple[int, str], int],
                window: tuple[float, float]) -> None:
    """Outline and name each schedule unit on the compute rows."""
    extent: dict[tuple[int, str], list[float]] = {}
    bands: dict[tuple[int, str], tuple[float, float]] = {}
    units = [r for r in rows if r["lane"] == "compute" and _phase(r)]
    chunked = len({r["chunk"] for r in units}) > 1
    for r in units:
        key = (r["stage"], _unit(r, chunked))
        low, high = extent.get(key, [r["start_s"], r["end_s"]])
        extent[key] = [min(low, r["start_s"]), max(high, r["end_s"])]
        bands[key] = _band(r, y_of[r["stage"], "compute"])
    width_s = window[1] - window[0]
    for key, (low, high) in extent.items():
        low, high = max(low, window[0]), min(high, window[1])
        bottom, height = bands[key]
        axes.broken_barh([(low * MS, (high - low) * MS)], (bottom, height), facecolors="none",
                         edgecolors="black", linewidth=0.6)
        if high - low >= MIN_LABEL_FRACTION * width_s:
            axes.text((low + high) / 2 * MS, bottom + height / 2, key[1], ha="center",
                      va="center", fontsize=6,
                      bbox={"facecolor": "white", "alpha": 0.7, "linewidth": 0, "pad": 0.5})


def gantt_figure(rows: Sequence[Row], window: tuple[float, float] | None = None, *,
                 title: str = "") -> Figure:
    """The chart; `window` (start_s, end_s) defaults to `steady_state_window(rows)`."""
    window = window or steady_state_window(rows)
    if window[1] <= window[0]:
        raise ValueError(f"gantt window {window}: end must be after start")
    shown = _clipped(rows, window)
    tracks = _tracks(rows)
    y_of = {track: len(tracks) - 1 - index for index, track in enumerate(tracks)}
    figure = Figure(figsize=(14.0, max(3.0, 0.32 * len(tracks) + 1.6)))
    axes = figure.add_subplot()
    categories = _draw_bars(axes, shown, y_of, window)
    _draw_units(axes, shown, y_of, window)
    axes.set_yticks(list(y_of.values()), [f"stage {s} {lane}" for s, lane in y_of])
    axes.set(xlim=(window[0] * MS, window[1] * MS), ylim=(-0.6, len(tracks) - 0.4),
             xlabel="time in the step (ms)", title=title)
    axes.legend(handles=[Patch(color=_colour(c), label=COMM_LABELS.get(c, c))
                         for c in categories],
                fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))
    axes.grid(True, axis="x", linewidth=0.3)
    figure.tight_layout()
    return figure


def write_gantt(path: str | Path, rows: Sequence[Row], title: str = "") -> Figure:
    figure = gantt_figure(rows, title=title)
    save_figure(figure, path)
    return figure
