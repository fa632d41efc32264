"""Running a sweep: every point of a SweepSpec, in parallel, into one tidy table.

    run_sweep(spec, out_dir=..., jobs=..., scheduler=...) -> pandas.DataFrame

Points run on local processes (`jobs`, default os.cpu_count()) or, given `scheduler`, on a Dask
distributed cluster. A point that fails keeps its row (status "failed", the one-line error)
and the sweep goes on. With `out_dir`, `sweep.csv` there is rewritten whole (atomically) after
every finished point, so an interruption leaves the points done so far, and a rerun skips the
ones whose rows say "ok" (failed points run again); at the end the charts are written next to
it (reports.sweep_charts).

Table: one row per point; columns point_id, status, error, the swept keys as the sweep file
gives them, then `moesim run --json`'s keys with nested keys joined by dots (step_time_s,
tokens_per_s_per_gpu, ..., breakdown_s.CATEGORY, memory_bytes_per_gpu.PART, scenario.FIELD,
scenario.recipe.FIELD). A breakdown category a point does not have is 0 s. The CSV is built
from text cells only, so a resumed sweep writes the same file as one run at a stretch.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from reports.files import write_text
from simulator.dask_cluster import optional_dask_client
from simulator.errors import one_line
from simulator.results import result_document
from simulator.scenario import Scenario, run_scenario
from simulator.sweep_spec import SweepPoint, SweepSpec, base_scenario, scenario_with, setting_text

CSV_NAME = "sweep.csv"
HEAD_COLUMNS = ("point_id", "status", "error")
OUTPUT_COLUMNS = ("step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu",
                  "model_flops_per_token", "peak_tflops_per_gpu")
NESTED_ORDER = ("breakdown_s.", "memory_bytes_per_gpu.", "scenario.")
BREAKDOWN_PREFIX = "breakdown_s."
SUMMARY_COLUMNS = ("tokens_per_s_per_gpu", "tflops_per_gpu", "step_time_s")

Outcome = dict[str, Any]
TextRow = dict[str, str]
Record = Callable[[SweepPoint, Outcome], None]


def _flat(document: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level, keys joined by dots; lists as `a+b` (the --set syntax)."""
    flat: dict[str, Any] = {}
    for key, value in document.items():
        if isinstance(value, Mapping):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = ("+".join(map(str, value)) if isinstance(value, list)
                                      else value)
    return flat


def evaluate_point(base: Scenario, point: SweepPoint, folder: str) -> Outcome:
    """The outputs of one point, or its failure: status, error and the flat result document."""
    try:
        result = run_scenario(scenario_with(base, point.settings, folder))
    except Exception as error:  # a failing point is recorded in its row; the sweep goes on
        return {"status": "failed", "error": one_line(error)}
    return {"status": "ok", "error": "", **_flat(result_document(result))}


def _cell(value: Any) -> str:
    return "" if value is None else setting_text(value)


def _text_row(point: SweepPoint, outcome: Outcome) -> TextRow:
    row = {"point_id": point.point_id, "status": outcome["status"], "error": outcome["error"]}
    row.update({key: setting_text(value) for key, value in point.settings})
    row.update({key: _cell(value) for key, value in outcome.items() if key not in row})
    return row


def _column_rank(column: str) -> tuple[int, int, str]:
    if column in OUTPUT_COLUMNS:
        return 0, OUTPUT_COLUMNS.index(column), ""
    for number, prefix in enumerate(NESTED_ORDER, start=2):
        if column.startswith(prefix):
            return number, 0, column
    return 1, 0, column


def sweep_csv(spec: SweepSpec, rows: Mapping[str, TextRow]) -> str:
    """The CSV text of the finished points, in the sweep's order (a fixed column order)."""
    ordered = [rows[p.point_id] for p in spec.points if p.point_id in rows]
    fixed = HEAD_COLUMNS + spec.keys
    others = sorted({column for row in ordered for column in row if column not in fixed},
                    key=_column_rank)
    stream = io.StringIO()
    writer = csv.DictWriter(stream, fieldnames=fixed + tuple(others), lineterminator="\n")
    writer.writeheader()
    for row in ordered:
        writer.writerow(_filled(row, others))
    return stream.getvalue()


def _filled(row: TextRow, columns: list[str]) -> TextRow:
    """The row with 0 s for the breakdown categories an ok point does not have."""
    if row["status"] != "ok":
        return row
    zeros = {c: "0.0" for c in columns if c.startswith(BREAKDOWN_PREFIX) and not row.get(c)}
    return {**row, **zeros}


def table(text: str) -> pd.DataFrame:
    """The CSV text as a DataFrame: nullable numbers, empty cells NA (error "" when none)."""
    frame = pd.read_csv(io.StringIO(text), dtype={column: str for column in HEAD_COLUMNS},
                        keep_default_na=False, na_values=[""], dtype_backend="numpy_nullable")
    frame["error"] = frame["error"].fillna("")
    return frame


def table_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The table as plain records (Python numbers, None for an empty cell), for JSON."""
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def sweep_report_rows(frame: pd.DataFrame, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """The columns a reader scans first: the point, its keys, throughput and any error."""
    columns = ["point_id", *keys, "status", *SUMMARY_COLUMNS]
    columns += ["error"] if (frame["status"] != "ok").any() else []
    return [{column: row.get(column) for column in columns} for row in table_records(frame)]


def finished_rows(out_dir: str | Path, spec: SweepSpec) -> dict[str, TextRow]:
    """The rows of `out_dir/sweep.csv` whose point is in `spec` and ran ("ok")."""
    path = Path(out_dir) / CSV_NAME
    if not path.exists():
        return {}
    try:
        with path.open(encoding="utf-8", newline="") as stream:
            rows = list(csv.DictReader(stream))
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise ValueError(f"{path}: cannot read the sweep table: {one_line(error)}") from None
    if rows and not set(HEAD_COLUMNS) <= set(rows[0]):
        raise ValueError(f"{path}: not a sweep table (no {', '.join(HEAD_COLUMNS)} columns); "
                         f"give another --out folder")
    wanted = {point.point_id for point in spec.points}
    return {row["point_id"]: {k: v or "" for k, v in row.items() if k is not None}
            for row in rows if row["point_id"] in wanted and row["status"] == "ok"}


def _outcome(future: Future[Any]) -> Outcome:
    try:
        return future.result()  # type: ignore[no-any-return]
    except Exception as error:  # a worker that died: the point fails, the sweep goes on
        return {"status": "failed", "error": f"worker: {one_line(error)}"}


def _run_local(base: Scenario, points: list[SweepPoint], folder: str, jobs: int,
               record: Record) -> None:
    if jobs == 1 or len(points) <= 1:
        for point in points:
            record(point, evaluate_point(base, point, folder))
        return
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(points)))
    try:
        futures = {pool.submit(evaluate_point, base, point, folder): point for point in points}
        for future in as_completed(futures):
            record(futures[future], _outcome(future))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _run_dask(base: Scenario, points: list[SweepPoint], folder: str, client: Any,
              record: Record) -> None:
    from distributed import as_completed as dask_completed

    futures = {client.submit(evaluate_point, base, point, folder, pure=False): point
               for point in points}
    try:
        for future in dask_completed(futures, loop=client.loop):
            record(futures[future], _outcome(future))
    finally:
        client.cancel(list(futures))


def run_sweep(spec: SweepSpec, *, out_dir: str | Path | None = None, jobs: int | None = None,
              scheduler: str | None = None, progress: bool = False) -> pd.DataFrame:
    """Run every point not already finished in `out_dir`; the whole table as a DataFrame."""
    jobs = (os.cpu_count() or 1) if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"jobs={jobs}: must be >= 1")
    base = base_scenario(spec)
    folder = Path(out_dir) if out_dir is not None else None
    # The scheduler is reached before anything is written or drawn: a bad address is one line.
    with optional_dask_client(scheduler) as client:
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        rows = finished_rows(folder, spec) if folder is not None else {}
        todo = [point for point in spec.points if point.point_id not in rows]
        with tqdm(total=len(spec.points), initial=len(spec.points) - len(todo), unit="point",
                  disable=not progress, desc=spec.name) as bar:
            def record(point: SweepPoint, outcome: Outcome) -> None:
                rows[point.point_id] = _text_row(point, outcome)
                if folder is not None:
                    write_text(folder / CSV_NAME, sweep_csv(spec, rows))
                bar.update()

            if client is not None:
                _run_dask(base, todo, spec.folder, client, record)
            else:
                _run_local(base, todo, spec.folder, jobs, record)
    text = sweep_csv(spec, rows)
    frame = table(text)
    if folder is not None:
        write_text(folder / CSV_NAME, text)
        from reports.sweep_charts import write_sweep_charts

        write_sweep_charts(frame, spec.keys, folder, spec.name)
    return frame
