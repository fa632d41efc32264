"""The report of a run or a study: one self-contained HTML page (every chart a base64 PNG data
URI, the style inline, no external asset) and the same content as Markdown (charts as PNG
files next to it).

A report is a title and a list of Sections, each with preformatted text, a table and/or one
image. `run_sections` builds them from a run's result document and one pipeline's trace rows;
`study_sections` from a study folder written by `moesim compare | scale | sweep` (each CSV as a
table, field by point, and each PNG).
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
from matplotlib.figure import Figure

from reports.files import write_bytes, write_text
from reports.gantt import gantt_figure
from reports.study_charts import breakdown_chart, study_breakdown_rows, study_summary_rows
from reports.summary import BREAKDOWN_LABELS, BREAKDOWN_ORDER, format_summary

HTML_NAME, MARKDOWN_NAME = "report.html", "report.md"
STUDY_COLUMNS = {"point", "system", "recipe", "num_gpus", "tp", "pp", "vpp", "ep", "cp", "dp",
                 "gbs", "step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu"}
STYLE = ("body{font-family:sans-serif;max-width:1400px;margin:2em auto;color:#222}"
         "table{border-collapse:collapse;font-size:13px;margin:0.5em 0}"
         "td,th{border:1px solid #ccc;padding:2px 8px}td.n{text-align:right}"
         "pre{background:#f6f6f6;padding:0.8em;overflow-x:auto}img{max-width:100%}"
         ".scroll{overflow-x:auto}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Section:
    """One heading and what follows it: text (monospace), a table of rows, an image."""

    title: str
    text: str = ""
    rows: tuple[Mapping[str, Any], ...] = ()
    image_name: str = ""
    image_png: bytes = b""


def figure_png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()


def image_section(title: str, name: str, figure: Figure) -> Section:
    return Section(title=title, image_name=f"{name}.png", image_png=figure_png(figure))


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(item) for item in value) or "-"
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(key for row in rows for key in row))


def _html_table(rows: Sequence[Mapping[str, Any]]) -> str:
    columns = _columns(rows)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(
            f"<td{' class=n' if _is_number(row.get(c)) else ''}>"
            f"{html.escape(_cell(row.get(c)))}</td>" for c in columns) + "</tr>"
        for row in rows)
    return f'<div class="scroll"><table><tr>{head}</tr>{body}</table></div>'


def _html_section(section: Section) -> str:
    parts = [f"<h2>{html.escape(section.title)}</h2>"]
    if section.text:
        parts.append(f"<pre>{html.escape(section.text)}</pre>")
    if section.rows:
        parts.append(_html_table(section.rows))
    if section.image_png:
        data = base64.b64encode(section.image_png).decode("ascii")
        parts.append(f'<img alt="{html.escape(section.title)}" '
                     f'src="data:image/png;base64,{data}">')
    return "\n".join(parts)


def html_page(title: str, sections: Sequence[Section]) -> str:
    """The whole page; it references nothing outside itself."""
    body = "\n".join(_html_section(s) for s in sections)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n"
            f"<body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n")


def _markdown_cell(value: Any) -> str:
    return _cell(value).replace("|", "\\|")


def _markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    columns = _columns(rows)
    lines = ["| " + " | ".join(_markdown_cell(c) for c in columns) + " |",
             "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(_markdown_cell(row.get(c)) for c in columns) + " |"
              for row in rows]
    return "\n".join(lines)


def markdown_page(title: str, sections: Sequence[Section]) -> str:
    """The same content; images link to PNG files named by each section's `image_name`."""
    parts = [f"# {title}"]
    for section in sections:
        parts.append(f"## {section.title}")
        if section.text:
            parts.append(f"```text\n{section.text}\n```")
        if section.rows:
            parts.append(_markdown_table(section.rows))
        if section.image_png:
            parts.append(f"![{section.title}]({section.image_name})")
    return "\n\n".join(parts) + "\n"


def write_report(folder: str | Path, title: str, sections: Sequence[Section]) -> list[Path]:
    """Write report.html, report.md and each section's PNG into `folder` (created if
    missing), every file whole or not at all. Returns the paths written."""
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    paths = []
    for section in sections:
        if section.image_png:
            paths.append(target / section.image_name)
            write_bytes(paths[-1], section.image_png)
    for name, text in ((HTML_NAME, html_page(title, sections)),
                       (MARKDOWN_NAME, markdown_page(title, sections))):
        paths.append(target / name)
        write_text(paths[-1], text)
    return paths


def _scenario_rows(scenario: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    plain = [{"field": k, "value": v} for k, v in scenario.items() if k != "recipe"]
    recipe = [{"field": f"recipe.{k}", "value": v} for k, v in scenario["recipe"].items()]
    return tuple(plain + recipe)


def _breakdown_rows(document: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    """Category, seconds and share of the step, in the summary's order."""
    step_s, breakdown = document["step_time_s"], document["breakdown_s"]
    keys = [k for k in BREAKDOWN_ORDER if k in breakdown] + sorted(
        set(breakdown) - set(BREAKDOWN_ORDER))
    return tuple({"category": BREAKDOWN_LABELS.get(k, k), "seconds": round(breakdown[k], 3),
                  "% of step": round(100 * breakdown[k] / step_s, 1)} for k in keys)


def run_sections(document: Mapping[str, Any],
                 pipeline_rows: Sequence[Mapping[str, Any]]) -> list[Section]:
    """Scenario, summary, breakdown (table and chart) and the steady-state Gantt of a run."""
    s = document["scenario"]
    label = f"{s['model']} on {s['num_gpus']} x {s['gpu']}"
    chart = breakdown_chart([label], [document["breakdown_s"]], title="where the step time goes")
    gantt = gantt_figure(pipeline_rows, title=f"steady state of one pipeline: {label}")
    return [Section(title="Scenario", rows=_scenario_rows(s)),
            Section(title="Summary", text=format_summary(document)),
            Section(title="Where the step time goes", rows=_breakdown_rows(document),
                    image_name="breakdown.png", image_png=figure_png(chart)),
            image_section("Timeline: one pipeline in steady state", "gantt", gantt)]


def _field_by_point(frame: pd.DataFrame) -> tuple[dict[str, Any], ...]:
    """The CSV transposed: one row per column, one column per point."""
    labels = [str(p) for p in frame["point"]] if "point" in frame else [
        str(i) for i in range(len(frame))]
    records = frame.to_dict(orient="records")
    return tuple({"field": column, **{label: record[column]
                                      for label, record in zip(labels, records)}}
                 for column in frame.columns if column != "point")


def _table_sections(path: Path) -> list[Section]:
    """A study CSV: its summary and breakdown (when it has a study's columns), every field."""
    frame = pd.read_csv(path)
    sections = []
    if STUDY_COLUMNS <= set(frame.columns):
        sections += [Section(title=f"Summary ({path.name})",
                             rows=tuple(study_summary_rows(frame))),
                     Section(title=f"Where the step time goes ({path.name})",
                             rows=tuple(study_breakdown_rows(frame)))]
    return sections + [Section(title=f"Every column of {path.name}",
                               rows=_field_by_point(frame))]


def study_sections(folder: str | Path) -> list[Section]:
    """Each CSV of a study folder as a table (field by point) and each PNG as an image."""
    source = Path(folder)
    if not source.is_dir():
        raise ValueError(f"--study {str(source)!r}: not a folder")
    tables = sorted(source.glob("*.csv"))
    if not tables:
        raise ValueError(f"--study {str(source)!r}: no CSV file in it (run moesim compare, "
                         f"scale or sweep with --out {source} first)")
    sections = [section for path in tables for section in _table_sections(path)]
    sections += [Section(title=f"Chart {path.stem}", image_name=path.name,
                         image_png=path.read_bytes()) for path in sorted(source.glob("*.png"))]
    return sections
