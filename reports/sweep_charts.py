"""Charts of a sweep table (simulator.sweep): one figure function per shape of sweep.

Input is the sweep DataFrame (columns `status`, the swept keys, `tokens_per_s_per_gpu`,
`tflops_per_gpu`, `breakdown_s.CATEGORY`); only rows with status "ok" are drawn.

- one swept key: `throughput_figure` (tokens/s/GPU and TFLOP/s/GPU against the key) and
  `breakdown_figure` (the step time's breakdown, stacked, per value of the key);
- two keys: `heatmap_figure` per metric (first key across, second key down);
- more: `lines_figure` per metric, the first key across and one line per combination of the
  others;
- a list of points that do not all set every key: `points_figure` (one bar per point) and
  `breakdown_figure` per point, each labelled with the keys it sets.

A numeric key is drawn on a numeric axis, sorted; any other key as categories in the order of
the table. Every function returns a matplotlib Figure; `write_sweep_charts` saves them as PNGs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from reports.files import save_figure
from reports.summary import BREAKDOWN_LABELS, BREAKDOWN_ORDER

METRICS = {"tokens_per_s_per_gpu": "tokens/s/GPU", "tflops_per_gpu": "model TFLOP/s/GPU"}
BREAKDOWN_PREFIX = "breakdown_s."
POINT_COLUMN = "point"
LIGHT_CELL = 0.6  # viridis is light above this share of its range: write dark numbers there


def ok_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The points that ran."""
    return frame[frame["status"] == "ok"]


def _shown(value: object) -> str:
    """A key's value in a label; a point without the key runs with the base's value."""
    return "base" if pd.isna(value) else str(value)  # type: ignore[call-overload]


def _is_numeric(values: pd.Series) -> bool:
    return (pd.api.types.is_numeric_dtype(values)
            and not pd.api.types.is_bool_dtype(values))


def _categories(values: pd.Series) -> list[object]:
    """The distinct values: sorted when numeric, else in the order they appear."""
    distinct = list(dict.fromkeys(values.dropna()))
    return sorted(distinct) if _is_numeric(values) else distinct


def _x_positions(values: pd.Series) -> tuple[list[float], list[object]]:
    """(x of each category, categories): the values themselves when numeric, else 0, 1, ..."""
    categories = _categories(values)
    if _is_numeric(values):
        return [float(value) for value in categories], categories  # type: ignore[arg-type]
    return [float(number) for number in range(len(categories))], categories


def _label_axis(axes: Axes, key: str, values: pd.Series) -> None:
    axes.set_xlabel(key)
    if not _is_numeric(values):
        positions, categories = _x_positions(values)
        axes.set_xticks(positions, [str(value) for value in categories])


def _line(axes: Axes, frame: pd.DataFrame, x_key: str, metric: str, label: str,
          axis_values: pd.Series) -> None:
    positions, categories = _x_positions(axis_values)
    where = dict(zip(categories, positions))
    means = frame.groupby(x_key, sort=False)[metric].mean()
    points = sorted((where[value], y) for value, y in means.items() if value in where)
    axes.plot([x for x, _ in points], [y for _, y in points], marker="o", label=label)


def throughput_figure(frame: pd.DataFrame, key: str, title: str = "") -> Figure:
    """Tokens/s/GPU (top) and model TFLOP/s/GPU (bottom) against one swept key."""
    rows = ok_rows(frame)
    figure = Figure(figsize=(7.5, 6.5))
    for number, (metric, label) in enumerate(METRICS.items(), start=1):
        axes = figure.add_subplot(2, 1, number)
        _line(axes, rows, key, metric, label, rows[key])
        axes.set_ylabel(label)
        axes.grid(True, linewidth=0.3)
        _label_axis(axes, key, rows[key])
    figure.suptitle(title or f"throughput vs {key}")
    figure.tight_layout()
    return figure


def breakdown_columns(frame: pd.DataFrame) -> list[str]:
    """The breakdown columns in the summary's order, unknown categories last."""
    present = [c[len(BREAKDOWN_PREFIX):] for c in frame.columns if c.startswith(BREAKDOWN_PREFIX)]
    ordered = [c for c in BREAKDOWN_ORDER if c in present] + sorted(
        c for c in present if c not in BREAKDOWN_ORDER)
    return [BREAKDOWN_PREFIX + c for c in ordered]


def breakdown_figure(frame: pd.DataFrame, key: str, title: str = "") -> Figure:
    """Where the step time goes, one stacked bar per value of the swept key."""
    rows = ok_rows(frame)
    categories = _categories(rows[key])
    means = rows.groupby(key, sort=False)[breakdown_columns(rows)].mean().fillna(0.0)
    figure = Figure(figsize=(8.5, 5.5))
    axes = figure.add_subplot()
    positions = np.arange(len(categories), dtype=float)
    bottom = np.zeros(len(categories))
    for column in breakdown_columns(rows):
        heights = np.array([means.loc[value, column] for value in categories], dtype=float)
        name = column[len(BREAKDOWN_PREFIX):]
        axes.bar(positions, heights, bottom=bottom, label=BREAKDOWN_LABELS.get(name, name))
        bottom += heights
    names = [str(value) for value in categories]
    axes.set_xticks(positions, names, rotation=25 if max(map(len, names)) > 8 else 0,
                    ha="right" if max(map(len, names)) > 8 else "center")
    axes.set(xlabel=key, ylabel="seconds per step", title=title or f"step time vs {key}")
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    return figure


def heatmap_figure(frame: pd.DataFrame, x_key: str, y_key: str, metric: str,
                   title: str = "") -> Figure:
    """`metric` for every (x, y) pair; a blank cell where the point failed."""
    rows = ok_rows(frame)
    columns, index = _categories(frame[x_key]), _categories(frame[y_key])
    grid = rows.pivot_table(index=y_key, columns=x_key, values=metric, aggfunc="mean")
    grid = grid.reindex(index=index, columns=columns)
    values = grid.to_numpy(dtype=float)
    figure = Figure(figsize=(1.2 * len(columns) + 3.0, 0.6 * len(index) + 2.5))
    axes = figure.add_subplot()
    image = axes.imshow(np.ma.masked_invalid(values), aspect="auto", cmap="viridis",
                        origin="lower")
    low, high = float(np.nanmin(values)), float(np.nanmax(values))
    for (row, column), value in np.ndenumerate(values):
        if math.isfinite(value):
            light = value - low > LIGHT_CELL * (high - low)
            axes.text(column, row, f"{value:,.0f}", ha="center", va="center", fontsize=8,
                      color="black" if light else "white")
    axes.set_xticks(range(len(columns)), [str(value) for value in columns])
    axes.set_yticks(range(len(index)), [str(value) for value in index])
    axes.set(xlabel=x_key, ylabel=y_key, title=title or METRICS.get(metric, metric))
    figure.colorbar(image, ax=axes, label=METRICS.get(metric, metric))
    figure.tight_layout()
    return figure


def lines_figure(frame: pd.DataFrame, x_key: str, series_keys: Sequence[str], metric: str,
                 title: str = "") -> Figure:
    """`metric` against `x_key`, one line per combination of the `series_keys` values."""
    rows = ok_rows(frame)
    figure = Figure(figsize=(8.5, 5.5))
    axes = figure.add_subplot()
    groups = rows.groupby(list(series_keys), sort=False, dropna=False)
    for values, group in groups:
        label = ", ".join(f"{key}={_shown(value)}" for key, value in zip(series_keys, values))
        _line(axes, group, x_key, metric, label, rows[x_key])
    _label_axis(axes, x_key, rows[x_key])
    axes.set(ylabel=METRICS.get(metric, metric), title=title or METRICS.get(metric, metric))
    axes.grid(True, linewidth=0.3)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    return figure


def point_labels(frame: pd.DataFrame, keys: Sequence[str]) -> pd.Series:
    """Each row's settings as `key=value, ...` (the keys it sets; "base" when none)."""
    return pd.Series([", ".join(f"{key}={row[key]}" for key in keys if not pd.isna(row[key]))
                      or "base" for _, row in frame.iterrows()], index=frame.index, dtype=str)


def points_figure(frame: pd.DataFrame, keys: Sequence[str], title: str = "") -> Figure:
    """Tokens/s/GPU (left) and model TFLOP/s/GPU (right), one bar per point that ran, labelled
    with the keys it sets: for a list of points that do not share their keys."""
    rows = ok_rows(frame)
    labels = list(point_labels(rows, keys))
    figure = Figure(figsize=(11.0, 0.35 * len(labels) + 2.0))
    for number, (metric, label) in enumerate(METRICS.items(), start=1):
        axes = figure.add_subplot(1, 2, number)
        axes.barh(range(len(labels)), rows[metric].to_numpy(dtype=float), label=label)
        axes.set_yticks(range(len(labels)), labels if number == 1 else [""] * len(labels))
        axes.invert_yaxis()
        axes.set(xlabel=label)
        axes.grid(True, axis="x", linewidth=0.3)
    figure.suptitle(title or "throughput per point")
    figure.tight_layout()
    return figure


def _sparse(frame: pd.DataFrame, keys: Sequence[str]) -> bool:
    """Whether some point that ran leaves a swept key to the base (a list of unlike points)."""
    rows = ok_rows(frame)
    return any(bool(rows[key].isna().any()) for key in keys)


def sweep_figures(frame: pd.DataFrame, keys: Sequence[str], title: str = "") -> dict[str, Figure]:
    """The charts for a sweep over `keys`, by file name stem; none when no point ran."""
    if ok_rows(frame).empty or not keys:
        return {}
    if _sparse(frame, keys):
        labelled = frame.assign(**{POINT_COLUMN: point_labels(frame, keys)})
        return {"throughput": points_figure(frame, keys, title),
                "breakdown": breakdown_figure(labelled, POINT_COLUMN, title)}
    if len(keys) == 1:
        return {"throughput": throughput_figure(frame, keys[0], title),
                "breakdown": breakdown_figure(frame, keys[0], title)}
    if len(keys) == 2:
        return {metric: heatmap_figure(frame, keys[0], keys[1], metric,
                                       f"{title}: {label}" if title else label)
                for metric, label in METRICS.items()}
    return {metric: lines_figure(frame, keys[0], keys[1:], metric,
                                 f"{title}: {label}" if title else label)
            for metric, label in METRICS.items()}


def write_sweep_charts(frame: pd.DataFrame, keys: Sequence[str], folder: str | Path,
                       title: str = "") -> list[Path]:
    """Save `sweep_figures` as FOLDER/NAME.png; the paths written."""
    paths = []
    for name, figure in sweep_figures(frame, keys, title).items():
        path = Path(folder) / f"{name}.png"
        save_figure(figure, path)
        paths.append(path)
    return paths
