"""Study charts and tables (reports.study_charts): what each Figure draws, and the output
folder."""

import pandas as pd
import pytest

from reports.study_charts import (bar_chart, breakdown_chart, breakdowns_of, compare_figures,
                                  scale_figures, scaling_chart, study_breakdown_rows,
                                  study_summary_rows, write_study)


def _frame() -> pd.DataFrame:
    """Two points with hand-picked numbers; `launch` is zero everywhere."""
    common = {"system": "gb300-nvl72", "recipe": "r", "tp": 1, "pp": 2, "vpp": 1, "ep": 8,
              "cp": 1, "dp": 8, "gbs": 32, "mfu": 0.25}
    return pd.DataFrame([
        {"point": "a", "num_gpus": 16, **common, "step_time_s": 3.0,
         "tokens_per_s_per_gpu": 100.0, "tflops_per_gpu": 1000.0, "scaling_efficiency": 1.0,
         "breakdown_compute_s": 2.0, "breakdown_exposed_ep_s": 1.0, "breakdown_launch_s": 0.0},
        {"point": "b", "num_gpus": 64, **common, "step_time_s": 4.0,
         "tokens_per_s_per_gpu": 90.0, "tflops_per_gpu": 900.0, "scaling_efficiency": 0.9,
         "breakdown_compute_s": 2.5, "breakdown_exposed_ep_s": 1.5, "breakdown_launch_s": 0.0},
    ])


def test_bar_chart_draws_one_bar_per_label_with_its_value():
    figure = bar_chart(["gb200", "gb300"], [1292.0, 1648.0], ylabel="TFLOP/s", title="t")
    axes = figure.axes[0]
    assert [p.get_height() for p in axes.patches] == [1292.0, 1648.0]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["gb200", "gb300"]
    assert [t.get_text() for t in axes.texts] == ["1,292", "1,648"]


def test_breakdown_chart_stacks_categories_and_skips_empty_ones():
    frame = _frame()
    figure = breakdown_chart(["a", "b"], breakdowns_of(frame), title="t")
    axes = figure.axes[0]
    assert len(axes.patches) == 2 * 2                  # compute and exposed_ep, two bars each
    tops = {}
    for patch in axes.patches:
        x = round(patch.get_x(), 3)
        tops[x] = max(tops.get(x, 0.0), patch.get_y() + patch.get_height())
    assert sorted(tops.values()) == pytest.approx([3.0, 4.0])
    labels = [t.get_text() for t in axes.get_legend().get_texts()]
    assert labels == ["compute (model GEMMs, attention)", "exposed EP all-to-all"]


def test_scaling_chart_draws_throughput_and_efficiency_in_percent():
    figure = scaling_chart([256, 1024], [6600.0, 6500.0], [1.0, 0.985], title="t")
    left, right = figure.axes
    assert list(left.lines[0].get_ydata()) == [6600.0, 6500.0]
    assert list(right.lines[0].get_ydata()) == pytest.approx([100.0, 98.5])
    assert list(left.lines[0].get_xdata()) == [256, 1024]


def test_study_figures_name_their_files():
    assert set(compare_figures(_frame(), "t")) == {"tflops_per_gpu", "breakdown"}
    assert set(scale_figures(_frame(), "t")) == {"scaling", "breakdown"}


def test_summary_and_breakdown_rows():
    summary = study_summary_rows(_frame())
    assert summary[0]["plan"] == "TP1 PP2 VPP1 EP8 CP1 DP8"
    assert [row["efficiency %"] for row in summary] == pytest.approx([100.0, 90.0])
    rows = study_breakdown_rows(_frame())
    assert [row["seconds per step"] for row in rows] == [
        "compute (model GEMMs, attention)", "exposed EP all-to-all", "step time"]
    assert rows[-1] == {"seconds per step": "step time", "a": 3.0, "b": 4.0}


def test_write_study_writes_the_csv_and_every_chart(tmp_path):
    folder = tmp_path / "new" / "study"
    paths = write_study(folder, "compare", _frame(), compare_figures(_frame(), "t"))
    assert [p.name for p in paths] == ["compare.csv", "tflops_per_gpu.png", "breakdown.png"]
    assert pd.read_csv(folder / "compare.csv")["point"].tolist() == ["a", "b"]
    assert (folder / "breakdown.png").read_bytes()[:4] == b"\x89PNG"
