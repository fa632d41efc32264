"""The steady-state Gantt chart (reports.gantt), the HTML/Markdown report (reports.html_report)
and the commands that write them: `moesim run --gantt`, `moesim report [--study DIR]`."""

import re

import pytest

from reports.gantt import gantt_figure, steady_state_window
from reports.html_report import (Section, html_page, markdown_page, run_sections,
                                 study_sections, write_report)
from simulator.cli import main
from simulator.results import pipeline_rows, result_document

SMALL = ["--model", "qwen3-30b-a3b", "--gpus", "32", "--pp", "2", "--vpp", "1", "--ep", "8",
         "--gbs", "32", "--seq", "512"]
PNG = b"\x89PNG\r\n\x1a\n" + b"0" * 16


def _row(stage, lane, category, start_s, end_s, name="x", microbatch=-1, chunk=0):
    return {"name": name, "rank": stage * 8, "lane": lane, "category": category,
            "start_s": start_s, "end_s": end_s, "microbatch": microbatch, "chunk": chunk,
            "stage": stage}


def _pipeline() -> list[dict]:
    """Two stages, 10 micro batches each, forward then backward of 5 s each; step 100 s."""
    rows = []
    for stage in (0, 1):
        for mb in range(10):
            start = stage * 5.0 + mb * 9.5
            rows.append(_row(stage, "compute", "compute", start, start + 4.0,
                             f"{stage * 8}/F{mb}/v{stage}/1t.mlp", mb))
            rows.append(_row(stage, "compute", "moe_overhead", start + 4.0, start + 5.0,
                             f"{stage * 8}/B{mb}/v{stage}/1t.router", mb))
        rows.append(_row(stage, "ep", "ep", 40.0, 60.0, f"{stage * 8}/F3/v0/1t.dispatch", 3))
    rows.append(_row(0, "dp", "dp", 99.0, 100.0, "0/rs/c0/dp"))
    return rows


def _y_extents(axes) -> set[tuple[float, float]]:
    extents = set()
    for collection in axes.collections:
        for path in collection.get_paths():
            ys = path.vertices[:, 1]
            extents.add((round(float(ys.min()), 3), round(float(ys.max()), 3)))
    return extents


def test_window_is_cycles_units_around_the_middle():
    # step 100 s; 2 stages x 10 micro batches x 1 chunk: one unit = 100 * 2 / 20 = 10 s
    assert steady_state_window(_pipeline()) == pytest.approx((30.0, 70.0))
    assert steady_state_window(_pipeline(), cycles=2) == pytest.approx((40.0, 60.0))
    with pytest.raises(ValueError, match="no tasks"):
        steady_state_window([])


def test_gantt_has_one_row_per_stage_and_lane():
    axes = gantt_figure(_pipeline(), title="t").axes[0]
    ticks = {t.get_text(): y for t, y in zip(axes.get_yticklabels(), axes.get_yticks())}
    assert list(ticks) == ["stage 0 compute", "stage 0 ep", "stage 0 dp",
                           "stage 1 compute", "stage 1 ep"]
    assert ticks["stage 0 compute"] > ticks["stage 1 compute"]     # stage 0 on top
    assert axes.get_xlim() == pytest.approx((30e3, 70e3))


def test_gantt_splits_forward_and_backward_and_names_units():
    axes = gantt_figure(_pipeline(), (30.0, 70.0)).axes[0]
    y = {t.get_text(): v for t, v in zip(axes.get_yticklabels(), axes.get_yticks())}
    y0 = y["stage 0 compute"]
    extents = _y_extents(axes)
    assert (y0, y0 + 0.4) in extents and (y0 - 0.4, y0) in extents   # forward up, back down
    assert {"F4", "B4"} <= {t.get_text() for t in axes.texts}
    legend = [t.get_text() for t in axes.get_legend().get_texts()]
    assert "EP all-to-all" in legend and "PP send/recv" not in legend


def test_gantt_clips_to_the_window():
    axes = gantt_figure(_pipeline(), (45.0, 50.0)).axes[0]
    for collection in axes.collections:
        for path in collection.get_paths():
            xs = path.vertices[:, 0]
            assert xs.min() >= 45e3 - 1e-6 and xs.max() <= 50e3 + 1e-6


def test_html_page_is_self_contained_and_escaped():
    sections = [Section(title="a <b>", text="x < y", rows=({"k": "v|w", "n": 1234.5},)),
                Section(title="chart", image_name="c.png", image_png=PNG)]
    page = html_page("t", sections)
    assert "data:image/png;base64," in page and "a &lt;b&gt;" in page and "x &lt; y" in page
    assert not re.search(r'(src|href)="(?!data:)', page)
    markdown = markdown_page("t", sections)
    assert "| v\\|w | 1,234 |" in markdown and "![chart](c.png)" in markdown


def test_write_report_writes_html_markdown_and_images(tmp_path):
    sections = [Section(title="chart", image_name="c.png", image_png=PNG)]
    paths = write_report(tmp_path / "r", "t", sections)
    assert [p.name for p in paths] == ["c.png", "report.html", "report.md"]
    assert (tmp_path / "r" / "c.png").read_bytes() == PNG


def test_run_sections_cover_scenario_summary_breakdown_and_timeline(run_small):
    result = run_small(pp=2, ep=8)
    sections = run_sections(result_document(result), pipeline_rows(result))
    assert [s.title for s in sections] == ["Scenario", "Summary", "Where the step time goes",
                                           "Timeline: one pipeline in steady state"]
    assert all(s.image_png.startswith(b"\x89PNG") for s in sections[2:])
    assert {row["stage"] for row in pipeline_rows(result)} == {0, 1}


def test_report_of_a_study_takes_no_scenario_flags(tmp_path, capsys):
    assert main(["report", "--study", str(tmp_path), "--gbs", "64",
                 "--out", str(tmp_path / "r")]) == 2
    assert "gbs" in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_study_sections_need_a_study_folder(tmp_path):
    with pytest.raises(ValueError, match="not a folder"):
        study_sections(tmp_path / "missing")
    with pytest.raises(ValueError, match="no CSV"):
        study_sections(tmp_path)


def test_run_gantt_and_report_commands(tmp_path, capsys):
    gantt = tmp_path / "gantt.png"
    assert main(["run", *SMALL, "--gantt", str(gantt)]) == 0
    assert gantt.read_bytes().startswith(b"\x89PNG")
    out = tmp_path / "report"
    assert main(["report", *SMALL, "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "qwen3-30b-a3b" in page
    assert not re.search(r'(src|href)="(?!data:)', page) and "<script" not in page
    markdown = (out / "report.md").read_text()
    assert "![Timeline: one pipeline in steady state](gantt.png)" in markdown
    assert (out / "gantt.png").exists() and (out / "breakdown.png").exists()


def test_report_of_a_study(tmp_path, capsys):
    study = tmp_path / "study"
    assert main(["compare", "--systems", "gb200-nvl72,gb300-nvl72", *SMALL,
                 "--out", str(study)]) == 0
    out = tmp_path / "report"
    assert main(["report", "--study", str(study), "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2
    assert "gb200-nvl72" in page and "tflops_per_gpu" in page
    markdown = (out / "report.md").read_text()
    assert "![Chart breakdown](breakdown.png)" in markdown
