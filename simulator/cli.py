"""The command line, `moesim COMMAND`: the parser and the dispatch of every command, and the
handlers of the single-run and catalog commands.

    run        simulate one training step and print what it found (--json, --trace, --gantt)
    list       print the catalogs: GPUs, systems, models, recipes
    show       summarise one built system and draw it (`moesim show system NAME`)
    validate   predicted vs measured for every row of a measurements CSV, locally or on Dask
    calibrate  fit the global cost parameters to a measurements CSV, locally or on Dask
    compare    one model on several systems or recipes          (simulator.cli_studies)
    scale      per-GPU throughput and scaling efficiency vs GPU count    (cli_studies)
    report     a self-contained HTML page and Markdown for a run or a study   (cli_studies)
    sweep      a grid or list of scenarios, locally or on Dask          (cli_studies)

    moesim run                      # DeepSeek-V3 on 256 GB300 NVL72 GPUs, recipe mbridge-26.06
    moesim run --system gb200-nvl72 --pp 4 --vpp 4 --ep 64
    moesim run --set a2a_overlap=false --set system.nic=connectx-7 --json
    moesim run --trace step.json    # open in ui.perfetto.dev
    moesim list                     # GPUs, systems, models and recipes; or `moesim list gpus`
    moesim show system gb300-nvl72 --gpus 256 --domain-size 64 --png gb300.png

The scenario flags shared by run, compare, scale and report live in simulator.cli_scenario.
The figures (matplotlib) and the fit's solver (scipy) are imported where a command draws or
fits: a second of imports that `moesim run` without --gantt would pay for nothing.
Every error is one line on stderr and exit status 2; nothing is written unless the run worked.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from reports.calibration_file import write_calibration
from reports.chrome_trace import write_chrome_trace
from reports.files import check_figure_path, check_output_path
from reports.summary import format_summary, run_title
from reports.tables import counted, format_table
from reports.validation_table import format_validation
from simulator.catalog import (CATALOG_TABLES, build_system, catalog_rows, drawing_data,
                               summarise, summary_rows)
from simulator.cli_scenario import (add_scenario_flags, note_unused_calibration, run_document,
                                    scenario_from_args)
from simulator.cli_studies import STUDY_COMMANDS, add_study_parsers
from simulator.results import pipeline_rows, trace_rows
from simulator.scenario import run_scenario
from simulator.calibration import (DEFAULT_PARAMS, FIRST_PRINCIPLES, CostParams,
                                   calibration_entries, document_values, load_calibration,
                                   params_value, params_with_values, read_calibration_file)
from simulator.fitting import (DEFAULT_FIT, LOSSES, OPTIONAL_FIT, FitParameter, FitResult, Loss,
                               calibration_document, fit, outside_bounds, provenance,
                               rerun_differences)
from simulator.dask_cluster import optional_dask_client
from simulator.gpu_pairs import gpu_pairs
from simulator.ladders import ladders
from simulator.overrides import calibration_settings
from simulator.repeats import repeats
from simulator.uncertainty import CORRELATED, Spread
from simulator.validation import (RowResult, built_scenarios, read_measurements, row_files,
                                  summarize, validate_rows)

SHOW_SUBJECTS = ("system",)


def _run_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser("run", help="simulate one training step",
                              description="Simulate one training step and print a summary.")
    add_scenario_flags(run)
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace")
    run.add_argument("--gantt", metavar="FIGURE",
                     help="draw the steady state of one pipeline (every stage and lane; .png, "
                          ".svg or .pdf)")
    run.add_argument("--unfolded", action="store_true",
                     help="simulate every GPU instead of one per pipeline stage")


def _list_parser(commands: argparse._SubParsersAction) -> None:
    listing = commands.add_parser("list", help="print the catalogs",
                                  description="Print catalog tables (all four by default).")
    listing.add_argument("table", nargs="?", help=" | ".join(CATALOG_TABLES))
    listing.add_argument("--json", action="store_true", help="print the rows as JSON")


def _show_parser(commands: argparse._SubParsersAction) -> None:
    show = commands.add_parser("show", help="summarise and draw a system", description=(
        "Build a system for N GPUs, print its counts and bandwidths, draw it as a PNG."))
    show.add_argument("what", help=" | ".join(SHOW_SUBJECTS))
    show.add_argument("name", help="catalog system name or a system YAML file")
    show.add_argument("--gpus", type=int, metavar="N",
                      help="GPU count (default: four NVLink domains)")
    show.add_argument("--domain-size", type=int, metavar="N",
                      help="GPUs per NVLink domain (default: the system's)")
    show.add_argument("--png", metavar="FIGURE",
                      help="drawing file, .png, .svg or .pdf (default: SYSTEM-N.png)")
    show.add_argument("--json", action="store_true", help="print the summary as JSON")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="moesim", description=(
        "Discrete-event performance simulator for large-model training clusters."))
    commands = top.add_subparsers(dest="command", required=True)
    _run_parser(commands)
    _list_parser(commands)
    _show_parser(commands)
    _validate_parser(commands)
    _calibrate_parser(commands)
    add_study_parsers(commands)
    return top


def _run(args: argparse.Namespace) -> int:
    if args.trace:
        check_output_path(args.trace)
    if args.gantt:
        check_figure_path(args.gantt)
    scenario = scenario_from_args(args)
    note_unused_calibration(args.set, [scenario])
    result = run_scenario(scenario, folded=not args.unfolded)
    document = run_document(args, result)
    if args.trace:
        write_chrome_trace(args.trace, trace_rows(result))
    if args.gantt:
        from reports.gantt import write_gantt

        write_gantt(args.gantt, pipeline_rows(result), title=run_title(document))
    print(json.dumps(document, indent=1) if args.json else format_summary(document))
    return 0


def _list(args: argparse.Namespace) -> int:
    tables = [args.table] if args.table is not None else list(CATALOG_TABLES)
    rows = {table: catalog_rows(table) for table in tables}
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print("\n\n".join(f"{table}\n{format_table(rows[table])}" for table in tables))
    return 0


def _show(args: argparse.Namespace) -> int:
    if args.what not in SHOW_SUBJECTS:
        raise ValueError(f"cannot show {args.what!r}: known are {', '.join(SHOW_SUBJECTS)}")
    system, topology = build_system(args.name, args.gpus, args.domain_size)
    summary = summarise(system, topology)
    png = args.png or f"{system.name}-{topology.num_gpus}.png"
    check_figure_path(png)
    from reports.topology_plot import draw_topology

    draw_topology(drawing_data(system, topology), png)
    if args.json:
        print(json.dumps({**summary, "png": png}, indent=1))
    else:
        print(format_table(summary_rows(summary)))
        print(f"topology drawing written to {png}")
    return 0


def _validate_parser(commands: argparse._SubParsersAction) -> None:
    validate = commands.add_parser(
        "validate", help="predicted vs measured for every row of a measurements CSV",
        description="Run every row of FILE.csv (its columns: the README's \"Your own runs\") "
                    "and print the signed error of each and the median, mean and max absolute "
                    "error.")
    validate.add_argument("csv", metavar="FILE.csv")
    validate.add_argument("--json", action="store_true", help="print one JSON object")
    validate.add_argument("--plot", metavar="FIGURE",
                          help="draw predicted vs measured (.png, .svg or .pdf)")
    validate.add_argument("--jobs", type=int, default=1, metavar="N",
                          help="rows to run in parallel processes")
    _add_scheduler(validate)
    validate.add_argument("--calibration", metavar="FILE",
                          help="cost parameters from `moesim calibrate`")
    _add_only(validate, "run")
    validate.add_argument("--set", action="append", default=[], dest="settings",
                          metavar="calibration.FIELD[.KEY]=VALUE",
                          help="a cost parameter for every row, on top of --calibration (e.g. "
                               "calibration.memory_efficiency=0.7); repeatable")
    _add_by(validate)


def _add_scheduler(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="run the rows on this Dask distributed scheduler's workers "
                             "instead of --jobs processes (they need moesim installed)")


def _add_only(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument("--only", action="append", default=[], metavar="COLUMN=VALUE[,VALUE]",
                        help=f"{verb} only the rows with one of these values in COLUMN (e.g. "
                             "model=qwen3-30b-a3b); repeated, a row must match each")


def _add_by(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--by", action="append", default=[], metavar="COLUMN[,COLUMN]",
                        help="error statistics per value of these CSV columns too (e.g. "
                             "release,pp), besides per GPU and per model; repeatable")


def _calibrate_parser(commands: argparse._SubParsersAction) -> None:
    calibrate = commands.add_parser(
        "calibrate", help="fit the global cost parameters to a measurements CSV",
        description="Fit the global cost parameters (bounded robust least squares on log "
                    "error) to every row of FILE.csv and write them with their meaning and "
                    "bounds.")
    calibrate.add_argument("csv", metavar="FILE.csv")
    calibrate.add_argument("-o", "--output", required=True, metavar="FILE.yaml",
                           help="where to write the fit (written whole when it ends or is stopped)")
    calibrate.add_argument("--jobs", type=int, default=1, metavar="N",
                           help="rows to run in parallel processes")
    _add_scheduler(calibrate)
    calibrate.add_argument("--max-evaluations", type=int, default=40, metavar="N",
                           help="simulations of the rows (a Jacobian column counts as one)")
    calibrate.add_argument("--loss", choices=LOSSES,
                           help="soft_l1 (default): a row's cost grows like its log error "
                                "squared below --loss-scale and linearly above it; linear: "
                                "plain least squares")
    calibrate.add_argument("--loss-scale", type=float, metavar="LOG_ERROR",
                           help="where soft_l1 turns from quadratic to linear (default 0.1, "
                                "about 10 %%)")
    calibrate.add_argument("--parameters", metavar="KEY,KEY",
                           help="fit only these of the default parameters")
    calibrate.add_argument("--start", metavar="FILE.yaml",
                           help="start from the values in a file `moesim calibrate` wrote "
                                "(default: the first-principles values); the file's values "
                                "that --parameters leaves out are held and written under "
                                "`fixed`")
    calibrate.add_argument("--first-principles", metavar="KEY,KEY",
                           help="these parameters start at their first-principles values, "
                                "not the --start file's, and are held there unless fitted: a "
                                "blind leave-one-out in one command")
    calibrate.add_argument("--rerun", metavar="FILE.yaml",
                           help="fit the parameters of a file `moesim calibrate` wrote, "
                                "beginning where that fit began (reproduces it with the same "
                                "rows and --max-evaluations)")
    calibrate.add_argument("--hold-out", metavar="COLUMN=VALUE[,VALUE]",
                           help="leave these rows out of the fit (e.g. gpu=gb300) and report "
                                "how the fitted parameters predict them")
    _add_only(calibrate, "use")
    calibrate.add_argument("--uncertainty-only", action="store_true",
                           help="measure the Jacobian at the start values and report each "
                                "parameter's standard error there, moving nothing")
    _add_by(calibrate)


def _fit_parameters(selection: str | None, option: str = "--parameters"
                    ) -> tuple[FitParameter, ...]:
    if not selection:
        return DEFAULT_FIT
    known = {p.key: p for p in (*DEFAULT_FIT, *OPTIONAL_FIT)}
    keys = [key.strip() for key in selection.split(",") if key.strip()]
    unknown = [key for key in keys if key not in known]
    if unknown or not keys:
        raise ValueError(f"{option} {selection!r}: known are {', '.join(known)}")
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise ValueError(f"{option} {selection!r}: {', '.join(twice)} named more than once")
    return tuple(known[key] for key in keys)


def _matching(rows: list[dict[str, Any]], selection: str, option: str
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows whose COLUMN holds one of the VALUEs of `selection`, the others)."""
    column, _, values = selection.partition("=")
    wanted = {v.strip() for v in values.split(",") if v.strip()}
    if not rows or column not in rows[0] or not wanted:
        known = ", ".join(rows[0]) if rows else "none"
        raise ValueError(f"{option} {selection!r}: must be COLUMN=VALUE[,VALUE] with a "
                         f"column of the CSV ({known})")
    return ([row for row in rows if row[column] in wanted],
            [row for row in rows if row[column] not in wanted])


def _only(rows: list[dict[str, Any]], selections: list[str]) -> list[dict[str, Any]]:
    """The rows that match every `--only COLUMN=VALUE[,VALUE]`."""
    for selection in selections:
        matched, _ = _matching(rows, selection, "--only")
        if not matched:
            raise ValueError(f"--only {selection!r}: matches none of the rows left "
                             f"({counted(len(rows), 'row')})")
        rows = matched
    return rows


def _split_held_out(rows: list[dict[str, Any]], selection: str | None
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows to fit, rows `--hold-out COLUMN=VALUE[,VALUE]` names; none without it)."""
    if selection is None:
        return rows, []
    held, kept = _matching(rows, selection, "--hold-out")
    if not held or not kept:
        raise ValueError(f"--hold-out {selection!r}: must leave some rows in and some out "
                         f"(it matches {len(held)} of {len(rows)})")
    return kept, held


def _fit_loss(args: argparse.Namespace, rerun_document: Any) -> Loss:
    """The loss given on the command line; under --rerun, else the one its file
    (`rerun_document`, as read) records (a file without one was fitted by plain least
    squares)."""
    recorded: dict[str, Any] = {}
    if args.rerun:
        recorded = (rerun_document.get("loss", {"name": "linear"})
                    if isinstance(rerun_document, dict) else {})
        if not isinstance(recorded, dict):
            raise ValueError(f"--rerun {args.rerun}: loss={recorded!r} must be a mapping of "
                             "name and scale")
    default = Loss()
    return Loss(name=args.loss or recorded.get("name", default.name),
                scale=(args.loss_scale if args.loss_scale is not None
                       else recorded.get("scale", default.scale)))


def _calibrate(args: argparse.Namespace) -> int:
    for flag, value in (("--jobs", args.jobs), ("--max-evaluations", args.max_evaluations)):
        if value < 1:
            raise ValueError(f"{flag}={value}: must be >= 1")
    check_output_path(args.output)
    if args.rerun and (args.start or args.parameters or args.first_principles):
        raise ValueError(f"--rerun {args.rerun}: takes its parameters and start from the file; "
                         "leave out --start, --parameters and --first-principles")
    reset = (_fit_parameters(args.first_principles, "--first-principles")
             if args.first_principles else ())
    carried = args.rerun or args.start
    carried_document = read_calibration_file(carried) if carried else {}
    parameters = (_fit_parameters(",".join(calibration_entries(carried_document, args.rerun)),
                                  f"--rerun {args.rerun}: parameters")
                  if args.rerun else _fit_parameters(args.parameters))
    rows, held = _split_held_out(_only(read_measurements(args.csv), args.only), args.hold_out)
    origin = provenance(args.csv, args.command_line, row_files(rows))
    if args.rerun:
        for difference in rerun_differences(carried_document, origin, len(rows)):
            print(f"moesim: note: --rerun {args.rerun}: {difference}; this fit may not "
                  "reproduce it", file=sys.stderr)
    by = _by_columns(args.by, rows)
    loss = _fit_loss(args, carried_document)

    started_s = time.monotonic()

    def progress(evaluation: int, message: str) -> None:
        print(f"evaluation {evaluation} ({time.monotonic() - started_s:.0f} s): {message}",
              file=sys.stderr, flush=True)

    first_principles = {p.key: params_value(FIRST_PRINCIPLES, p.key) for p in reset}
    file_values = document_values(carried_document, carried) if carried else {}
    start = document_values(carried_document, carried, "start") if args.rerun else file_values
    base = params_with_values(FIRST_PRINCIPLES, {**start, **first_principles})
    from_file = {key: value for key, value in start.items() if key not in first_principles}
    for line in outside_bounds(parameters, from_file):
        print(f"moesim: note: {'--rerun' if args.rerun else '--start'} {carried}: {line}",
              file=sys.stderr)
    with optional_dask_client(args.scheduler) as client:
        result = _fit_until_stopped(rows, parameters, base, args, loss, progress, client)
        fitted_keys = {p.key for p in parameters}
        fixed = ({key: value for key, value in
                  {**file_values, **first_principles}.items()
                  if key not in fitted_keys} if carried else {})
        document = calibration_document(result, parameters, origin, fixed)
        write_calibration(args.output, document)
        print(_fit_text(document, result, rows, by, args.output))
        if held:
            predicted = validate_rows(held, result.params, jobs=args.jobs, client=client)
            print(f"\nheld out ({args.hold_out}), predicted with the fitted parameters:")
            print(format_validation([asdict(r) for r in predicted], _summary(predicted, held, by)))
        return 0


def _fit_text(document: dict[str, Any], result: FitResult, rows: list[dict[str, Any]],
              by: tuple[str, ...], output: str) -> str:
    """What calibrate prints of a fit: each parameter, the pairs that trade against each
    other, the fitted rows' errors and the objective."""
    loss = result.loss
    return "\n".join([
        format_table([{"parameter": key, "value": f"{entry['value']:.3g}",
                       "std error": _std_error_text(entry), "rows": entry.get("rows", ""),
                       "bounds": f"{entry['bounds'][0]:g} .. {entry['bounds'][1]:g}",
                       "meaning": entry["meaning"]}
                      for key, entry in document["parameters"].items()]),
        _correlations_text(result.spread),
        format_validation([asdict(r) for r in result.final_rows],
                          _summary(list(result.final_rows), rows, by)),
        f"{loss.name} loss (scale {loss.scale:g}) objective {result.initial_objective:.4f} -> "
        f"{result.final_objective:.4f}; rms log error {result.initial_rms_log_error:.4f} -> "
        f"{result.final_rms_log_error:.4f} over {counted(result.rows_used, 'row')} "
        f"({result.rows_failed} failed); written to {output}"
        + (f" (stopped after {counted(result.evaluations, 'evaluation')})"
           if result.stopped else "")])


def _std_error_text(entry: dict[str, Any]) -> str:
    """A fitted value's standard error, absolute and relative, or why it has none."""
    std = entry.get("std_error")
    if std is None:
        return entry.get("no_std_error", "")
    return f"{std:.2g} ({100 * std / abs(entry['value']):.0f} %)" if entry["value"] else \
        f"{std:.2g}"


def _correlations_text(spread: Spread) -> str:
    pairs = "; ".join(f"{a} & {b} {rho:+.2f}" for a, b, rho in spread.correlations)
    return f"correlated fitted values (|r| >= {CORRELATED}): {pairs or 'none'}"


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _fit_until_stopped(rows: list[dict[str, Any]], parameters: tuple[FitParameter, ...],
                       base: CostParams, args: argparse.Namespace, loss: Loss,
                       progress: Callable[[int, str], None], client: Any) -> FitResult:
    """`fit`, which Ctrl-C or SIGTERM ends at the best values so far once its steps have
    begun; before them there is nothing to write."""
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        return fit(rows, parameters, base=base, jobs=args.jobs,
                   max_evaluations=args.max_evaluations, loss=loss,
                   steps=not args.uncertainty_only, progress=progress, client=client)
    except KeyboardInterrupt:
        raise ValueError("calibrate: stopped before its first step (start rows, short rows "
                         "or Jacobian); nothing written") from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def _summary(results: list[RowResult], rows: list[dict[str, Any]],
             by: tuple[str, ...] = ()) -> dict[str, Any]:
    """The error statistics of `summarize` (also per value of each column in `by`), every
    optimisation ladder among the rows, the rows that moesim simulates alike
    (simulator.repeats) and the pairs of rows that ran one workload on two GPUs
    (simulator.gpu_pairs)."""
    return {**summarize(results, rows, by), "ladders": ladders(results),
            "repeats": repeats(rows, results), "gpu_pairs": gpu_pairs(rows, results)}


def _by_columns(options: list[str], rows: list[dict[str, Any]]) -> tuple[str, ...]:
    """The CSV columns that `--by COLUMN[,COLUMN]` names, each once, in order."""
    columns = [c.strip() for option in options for c in option.split(",") if c.strip()]
    known = list(rows[0]) if rows else []
    for column in columns:
        if column not in known or column in ("gpu", "model", "name"):
            allowed = ", ".join(c for c in known if c not in ("gpu", "model", "name"))
            raise ValueError(f"--by {column!r}: must be a column of the CSV other than gpu, "
                             f"model and name ({allowed or 'none'})")
    return tuple(dict.fromkeys(columns))


def _validate(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise ValueError(f"--jobs={args.jobs}: must be >= 1")
    if args.plot:
        check_figure_path(args.plot)
    params = calibration_settings(
        load_calibration(args.calibration) if args.calibration else DEFAULT_PARAMS,
        args.settings)
    measurements = _only(read_measurements(args.csv), args.only)
    by = _by_columns(args.by, measurements)
    if args.settings:
        note_unused_calibration(args.settings, [
            scenario for scenario in built_scenarios(measurements, params)
            if not isinstance(scenario, str)], "any row")
    with optional_dask_client(args.scheduler) as client:
        results = validate_rows(measurements, params, jobs=args.jobs, progress=not args.json,
                                client=client)
    rows = [asdict(r) for r in results]
    summary = _summary(results, measurements, by)
    if args.plot:
        from reports.validation_plot import write_validation_plot

        median = summary["median_abs_error_pct"]
        write_validation_plot(rows, args.plot, f"moesim vs {Path(args.csv).name} " + (
            "(no row ran)" if median is None else f"(median |error| {median:.1f} %)"),
            summary["gpu_pairs"]["pairs"])
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=1))
    else:
        print(format_validation(rows, summary))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": _run, "list": _list, "show": _show, "validate": _validate, "calibrate": _calibrate,
    **STUDY_COMMANDS}


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.command_line = shlex.join(["moesim", *(sys.argv[1:] if argv is None else argv)])
    try:
        return COMMANDS[args.command](args)
    except (ValueError, OSError) as error:
        print(f"moesim: error: {error}", file=sys.stderr)
        return 2
