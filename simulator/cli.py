"""The command line: `moesim run` simulates one training step and prints what it found;
`moesim list` prints the catalogs and `moesim show system` one built system and its drawing.

    moesim run                      # DeepSeek-V3 on 256 GB300 NVL72 GPUs, recipe mbridge-26.06
    moesim run --system gb200-nvl72 --pp 4 --vpp 4 --ep 64
    moesim run --set a2a_overlap=false --set system.nic=connectx-7 --json
    moesim run --trace step.json    # open in ui.perfetto.dev
    moesim list                     # GPUs, systems, models and recipes; or `moesim list gpus`
    moesim show system gb300-nvl72 --gpus 256 --domain-size 64 --png gb300.png

Every error is one line on stderr and exit status 2; nothing is written unless the run worked.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from topologies.systems import load_system
from workloads.megatron_args import read_megatron_args
from workloads.model_files import load_model_file
from workloads.models import ModelSpec, model_spec
from workloads.recipe_files import load_recipe_file
from workloads.recipes import Recipe, recipe, recipe_with

from reports.calibration_file import write_calibration
from reports.chrome_trace import write_chrome_trace
from reports.gantt import write_gantt
from reports.html_report import run_sections, study_sections, write_report
from reports.study_charts import (compare_figures, scale_figures, study_breakdown_rows,
                                  study_summary_rows, write_study)
from reports.summary import format_summary
from reports.tables import format_table
from reports.topology_plot import draw_topology
from reports.validation_plot import write_validation_plot
from reports.validation_table import format_validation
from simulator.catalog import (CATALOG_TABLES, build_system, catalog_rows, drawing_data,
                               summarise, summary_rows)
from simulator.overrides import apply_setting
from simulator.planner import recipe_for, sensible_plan
from simulator.results import pipeline_rows, result_document, trace_rows
from simulator.scenario import Scenario, default_domain_size, default_scenario, run_scenario
from simulator.scenario_files import load_scenario_file, scenario_from_megatron_args
from simulator.studies import compare_recipes, compare_systems, scale
from simulator.sweep import run_sweep, sweep_report_rows, table_records
from simulator.sweep_spec import load_sweep
from simulator.calibration import DEFAULT_PARAMS, load_calibration
from simulator.fitting import DEFAULT_FIT, FitParameter, calibration_document, fit
from simulator.validation import read_measurements, summarize, validate_rows

SHOW_SUBJECTS = ("system",)
PLAN_FLAGS = {"gpus": "num_gpus", "tp": "tp", "pp": "pp", "vpp": "vpp", "ep": "ep",
              "etp": "etp", "cp": "cp", "mbs": "mbs", "gbs": "gbs", "seq": "seq_len"}


def add_scenario_flags(command: argparse.ArgumentParser, *, gpus: bool = True) -> None:
    """The scenario flags of `moesim run`, which every command that simulates accepts;
    `gpus=False` leaves `--gpus` to the command (it is then None for `scenario_from_args`)."""
    command.add_argument("scenario", nargs="?", metavar="SCENARIO.yaml",
                         help="a scenario file (default: the built-in DeepSeek-V3 GB300 study)")
    command.add_argument("--megatron-args", metavar="ARGS|@FILE",
                         help="a Megatron-LM / Megatron-Bridge command line (or @file with one)")
    command.add_argument("--system", help="catalog system name or a system YAML file")
    command.add_argument("--model", help="catalog model name, model YAML or HF config.json")
    for flag in PLAN_FLAGS:
        if gpus or flag != "gpus":
            command.add_argument(f"--{flag}", type=int, metavar="N")
    if not gpus:
        command.set_defaults(gpus=None)
    command.add_argument("--mtp", type=int, metavar="N", help="multi-token-prediction layers")
    command.add_argument("--precision", help="bf16, fp8-cs, fp8-blockwise, mxfp8 or nvfp4")
    command.add_argument("--recipe", help="recipe name (e.g. mbridge-26.06) or recipe YAML")
    command.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                         help="any recipe, system, plan or calibration field (repeatable)")
    command.add_argument("--calibration", metavar="FILE",
                         help="cost parameters from `moesim calibrate`")
    command.add_argument("--auto-plan", action="store_true",
                         help="pick the smallest plan that fits (other plan flags still apply)")


def _run_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser("run", help="simulate one training step",
                              description="Simulate one training step and print a summary.")
    add_scenario_flags(run)
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace")
    run.add_argument("--gantt", metavar="PNG",
                     help="draw the steady state of one pipeline (every stage and lane)")
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
    show.add_argument("--png", metavar="FILE", help="drawing file (default: SYSTEM-N.png)")
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
    _compare_parser(commands)
    _scale_parser(commands)
    _report_parser(commands)
    _sweep_parser(commands)
    return top


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    """The default scenario with every given flag and --set applied, in that order."""
    return apply_scenario_flags(base_scenario(args), args)


def base_scenario(args: argparse.Namespace) -> Scenario:
    """The scenario file (else the default study) with --megatron-args applied."""
    scenario = load_scenario_file(args.scenario) if args.scenario else default_scenario()
    if args.megatron_args:
        scenario, ignored = scenario_from_megatron_args(read_megatron_args(args.megatron_args),
                                                        scenario)
        if ignored:
            print(f"moesim: megatron args not modelled: {'; '.join(ignored)}", file=sys.stderr)
    return scenario


def apply_scenario_flags(scenario: Scenario, args: argparse.Namespace) -> Scenario:
    """`scenario` with the system, model, recipe and plan flags, then every --set, applied."""
    if args.system:
        system = load_system(args.system)
        scenario = replace(scenario, system=system, domain_size=default_domain_size(system))
    if args.model:
        scenario = replace(scenario, model=_model(args.model))
    if args.mtp is not None:
        scenario = replace(scenario, model=scenario.model.with_mtp(args.mtp))
    if args.recipe:
        scenario = replace(scenario, recipe=_recipe(args.recipe))
    if args.precision:
        scenario = replace(scenario, recipe=recipe_with(scenario.recipe, precision=args.precision))
    changes = {field: getattr(args, flag) for flag, field in PLAN_FLAGS.items()
               if getattr(args, flag) is not None}
    if changes or args.model or args.mtp is not None or args.auto_plan:
        changes["layout"] = None
    if args.auto_plan:
        scenario = _auto_plan(scenario, args)
    scenario = replace(scenario, plan=replace(scenario.plan, **changes))
    if args.calibration:
        scenario = replace(scenario, params=load_calibration(args.calibration))
    for setting in args.set:
        scenario = apply_setting(scenario, setting)
    return scenario


def _is_file(name: str) -> bool:
    return name.endswith((".yaml", ".yml", ".json")) or Path(name).exists()


def _model(name: str) -> ModelSpec:
    return load_model_file(name) if _is_file(name) else model_spec(name)


def _recipe(name: str) -> Recipe:
    return load_recipe_file(name) if _is_file(name) else recipe(name)


def _auto_plan(scenario: Scenario, args: argparse.Namespace) -> Scenario:
    """The smallest plan that fits (simulator.planner) for the chosen model and system."""
    recipe_ = recipe_for(scenario.system, scenario.recipe)
    plan = sensible_plan(scenario.model, scenario.system, recipe_,
                         seq_len=args.seq or scenario.plan.seq_len,
                         domain_size=scenario.domain_size, num_gpus=args.gpus)
    return replace(scenario, plan=plan, recipe=recipe_)


def _run(args: argparse.Namespace) -> int:
    result = run_scenario(scenario_from_args(args), folded=not args.unfolded)
    document = result_document(result)
    if args.trace:
        write_chrome_trace(args.trace, trace_rows(result))
    if args.gantt:
        write_gantt(args.gantt, pipeline_rows(result), title=_run_title(document))
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
        description="Run every row of FILE.csv (schema: ../shared/data/README.md) and print "
                    "the signed error of each and the median, mean and max absolute error.")
    validate.add_argument("csv", metavar="FILE.csv")
    validate.add_argument("--json", action="store_true", help="print one JSON object")
    validate.add_argument("--plot", metavar="PNG", help="draw predicted vs measured")
    validate.add_argument("--jobs", type=int, default=1, metavar="N",
                          help="rows to run in parallel processes")
    validate.add_argument("--calibration", metavar="FILE",
                          help="cost parameters from `moesim calibrate`")


def _calibrate_parser(commands: argparse._SubParsersAction) -> None:
    calibrate = commands.add_parser(
        "calibrate", help="fit the global cost parameters to a measurements CSV",
        description="Fit the global cost parameters (bounded least squares on log error) to "
                    "every row of FILE.csv and write them with their meaning and bounds.")
    calibrate.add_argument("csv", metavar="FILE.csv")
    calibrate.add_argument("-o", "--output", required=True, metavar="FILE.yaml")
    calibrate.add_argument("--jobs", type=int, default=1, metavar="N")
    calibrate.add_argument("--max-evaluations", type=int, default=200, metavar="N")
    calibrate.add_argument("--parameters", metavar="KEY,KEY",
                           help="fit only these of the default parameters")


def _fit_parameters(selection: str | None) -> tuple[FitParameter, ...]:
    if not selection:
        return DEFAULT_FIT
    known = {p.key: p for p in DEFAULT_FIT}
    keys = [key.strip() for key in selection.split(",") if key.strip()]
    unknown = [key for key in keys if key not in known]
    if unknown or not keys:
        raise ValueError(f"--parameters {selection!r}: known are {', '.join(known)}")
    return tuple(known[key] for key in keys)


def _calibrate(args: argparse.Namespace) -> int:
    if args.jobs < 1 or args.max_evaluations < 1:
        raise ValueError("--jobs and --max-evaluations must be >= 1")
    parameters = _fit_parameters(args.parameters)
    rows = read_measurements(args.csv)

    def progress(evaluation: int, rms: float) -> None:
        print(f"evaluation {evaluation}: rms log error {rms:.4f}", file=sys.stderr)

    result = fit(rows, parameters, jobs=args.jobs, max_evaluations=args.max_evaluations,
                 progress=progress)
    document = calibration_document(result, parameters, args.csv,
                                    "moesim " + " ".join(sys.argv[1:]) if sys.argv else "")
    write_calibration(args.output, document)
    print(format_table([{"parameter": key, "value": entry["value"],
                         "bounds": f"{entry['bounds'][0]:g} .. {entry['bounds'][1]:g}",
                         "meaning": entry["meaning"]}
                        for key, entry in document["parameters"].items()]))
    print(f"rms log error {result.initial_rms_log_error:.4f} -> "
          f"{result.final_rms_log_error:.4f} over {result.rows_used} rows "
          f"({result.rows_failed} failed); written to {args.output}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise ValueError(f"--jobs={args.jobs}: must be >= 1")
    params = load_calibration(args.calibration) if args.calibration else DEFAULT_PARAMS
    results = validate_rows(read_measurements(args.csv), params, jobs=args.jobs)
    rows = [asdict(r) for r in results]
    summary = summarize(results)
    if args.plot:
        write_validation_plot(rows, args.plot, f"moesim vs {Path(args.csv).name} "
                              f"(median |error| {summary['median_abs_error_pct']:.1f} %)")
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=1))
    else:
        print(format_validation(rows, summary))
    return 0


# --- studies: compare, scale, report -------------------------------------------------------

def _study_output_flags(command: argparse.ArgumentParser, default_out: str) -> None:
    command.add_argument("--json", action="store_true", help="print the table as JSON records")
    command.add_argument("--out", default=default_out, metavar="DIR",
                         help=f"folder for the CSV and the PNG charts (default: {default_out})")


def _compare_parser(commands: argparse._SubParsersAction) -> None:
    compare = commands.add_parser(
        "compare", help="one model on several systems or recipes",
        description="Run the scenario on each system (each with its published plan and recipe "
                    "changes for the model) or with each recipe (each with its published "
                    "plan) and chart TFLOP/s/GPU and where the step time goes.")
    add_scenario_flags(compare)
    what = compare.add_mutually_exclusive_group(required=True)
    what.add_argument("--systems", metavar="A,B", help="systems (catalog names or YAML files)")
    what.add_argument("--recipes", metavar="A,B", help="recipes on one system (--system)")
    compare.add_argument("--same-recipe", action="store_true",
                         help="the same scenario everywhere: no published per-point plan")
    _study_output_flags(compare, "moesim-compare")


def _scale_parser(commands: argparse._SubParsersAction) -> None:
    scale_ = commands.add_parser(
        "scale", help="per-GPU throughput and scaling efficiency vs GPU count",
        description="Run the scenario on each GPU count; weak scaling keeps the batch per "
                    "data-parallel rank, strong scaling keeps the global batch.")
    add_scenario_flags(scale_, gpus=False)
    scale_.add_argument("--gpus", dest="gpu_counts", default="256,512,1024", metavar="N,N",
                        help="GPU counts (default: 256,512,1024); the plan flags and --gbs "
                             "describe the first")
    mode = scale_.add_mutually_exclusive_group()
    mode.add_argument("--weak", dest="weak", action="store_true", default=True,
                      help="keep gbs / dp (default)")
    mode.add_argument("--strong", dest="weak", action="store_false", help="keep gbs")
    _study_output_flags(scale_, "moesim-scale")


def _report_parser(commands: argparse._SubParsersAction) -> None:
    report = commands.add_parser(
        "report", help="an HTML page and a Markdown file for a run or a study",
        description="Run the scenario (same flags as `moesim run`) and write report.html "
                    "(self-contained) and report.md with the scenario, summary, breakdown "
                    "and the steady-state timeline; with --study DIR, report that study.")
    add_scenario_flags(report)
    report.add_argument("--study", metavar="DIR",
                        help="a folder written by moesim compare, scale or sweep")
    report.add_argument("--out", default="moesim-report", metavar="DIR",
                        help="output folder (default: moesim-report)")


def _names(text: str, flag: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError(f"--{flag} {text!r}: give a comma-separated list")
    return names


def _point_flags(args: argparse.Namespace) -> argparse.Namespace:
    """The flags re-applied at each study point over its published plan: plan degrees,
    --mtp, --precision, --auto-plan and --set (the base already has the rest)."""
    return argparse.Namespace(**{**vars(args), "scenario": None, "megatron_args": None,
                                 "system": None, "model": None, "recipe": None,
                                 "calibration": None})


def _compare(args: argparse.Namespace) -> int:
    published = not (args.same_recipe or args.scenario or args.megatron_args)
    flags = _point_flags(args)

    def adjust(scenario: Scenario) -> Scenario:
        return apply_scenario_flags(scenario, flags)

    base = scenario_from_args(args)
    if args.systems:
        if args.system:
            raise ValueError(f"--system {args.system}: compare --systems takes the systems "
                             f"from --systems")
        systems = [load_system(name) for name in _names(args.systems, "systems")]
        frame = compare_systems(base, systems, published=published, adjust=adjust)
        title = f"{base.model.name} on {base.plan.num_gpus} GPUs"
    else:
        if args.recipe:
            raise ValueError(f"--recipe {args.recipe}: compare --recipes takes the recipes "
                             f"from --recipes")
        recipes = [_recipe(name) for name in _names(args.recipes, "recipes")]
        frame = compare_recipes(base, recipes, published=published, adjust=adjust)
        title = f"{base.model.name} on {base.plan.num_gpus} x {base.system.name}"
    return _study_output(args, "compare", frame, compare_figures(frame, title))


def _gpu_count(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"--gpus {text!r}: must be a positive integer")
    return int(text)


def _scale(args: argparse.Namespace) -> int:
    counts = [_gpu_count(name) for name in _names(args.gpu_counts, "gpus")]
    base = scenario_from_args(argparse.Namespace(**{**vars(args), "gpus": counts[0]}))
    frame = scale(base, counts, weak=args.weak)
    title = (f"{base.model.name} on {base.system.name}, "
             f"{'weak' if args.weak else 'strong'} scaling")
    return _study_output(args, "scale", frame, scale_figures(frame, title))


def _study_output(args: argparse.Namespace, name: str, frame: Any,
                  figures: Mapping[str, Any]) -> int:
    paths = write_study(args.out, name, frame, figures)
    written = f"written to {args.out}: {', '.join(path.name for path in paths)}"
    if args.json:
        print(frame.to_json(orient="records", indent=1))
        print(written, file=sys.stderr)
    else:
        print(format_table(study_summary_rows(frame)))
        print(f"\nwhere the step time goes (s)\n{format_table(study_breakdown_rows(frame))}")
        print(written)
    return 0


def _run_title(document: Mapping[str, Any]) -> str:
    s = document["scenario"]
    return (f"{s['model']} on {s['num_gpus']} x {s['gpu']} ({s['system']}), "
            f"recipe {s['recipe']['name']}")


def _scenario_flags_given(args: argparse.Namespace) -> list[str]:
    options = ("scenario", "megatron_args", "system", "model", *PLAN_FLAGS, "mtp", "precision",
               "recipe", "calibration")
    given = [name for name in options if getattr(args, name) is not None]
    return given + ["set"] * bool(args.set) + ["auto_plan"] * args.auto_plan


def _report(args: argparse.Namespace) -> int:
    if args.study:
        if given := _scenario_flags_given(args):
            raise ValueError(f"--study {args.study}: reports a study folder; the scenario "
                             f"flags ({', '.join(given)}) apply only to a run's report")
        sections = study_sections(args.study)
        title = f"moesim study {Path(args.study).resolve().name}"
    else:
        result = run_scenario(scenario_from_args(args))
        document = result_document(result)
        sections = run_sections(document, pipeline_rows(result))
        title = f"moesim: {_run_title(document)}"
    paths = write_report(args.out, title, sections)
    print(f"report written to {args.out}: {', '.join(path.name for path in paths)}")
    return 0


def _sweep_parser(commands: argparse._SubParsersAction) -> None:
    sweep = commands.add_parser(
        "sweep", help="run a grid or a list of scenarios", description=(
            "Run every point of SWEEP.yaml (a base scenario and a grid or list of settings) "
            "and print one row per point; with --out, write sweep.csv and charts there and "
            "resume an interrupted sweep."))
    sweep.add_argument("sweep", metavar="SWEEP.yaml")
    sweep.add_argument("--out", metavar="DIR",
                       help="folder for sweep.csv and the charts; a rerun skips finished points")
    sweep.add_argument("--jobs", type=int, metavar="N",
                       help="local processes (default: every CPU)")
    sweep.add_argument("--scheduler", metavar="ADDRESS",
                       help="run the points on this Dask distributed scheduler")
    sweep.add_argument("--json", action="store_true", help="print the table as JSON records")


def _sweep(args: argparse.Namespace) -> int:
    spec = load_sweep(args.sweep)
    frame = run_sweep(spec, out_dir=args.out, jobs=args.jobs, scheduler=args.scheduler,
                      progress=True)
    failed = int((frame["status"] != "ok").sum())
    where = f"; sweep.csv and charts in {args.out}" if args.out else ""
    status = f"{len(frame)} points, {failed} failed{where}"
    if args.json:
        print(json.dumps(table_records(frame), indent=1))
        print(f"moesim: {status}", file=sys.stderr)
    else:
        print(format_table(sweep_report_rows(frame, spec.keys)))
        print(status)
    return 0


COMMANDS = {"run": _run, "list": _list, "show": _show, "validate": _validate,
            "calibrate": _calibrate, "compare": _compare, "scale": _scale, "report": _report,
            "sweep": _sweep}


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (ValueError, OSError) as error:
        print(f"moesim: error: {error}", file=sys.stderr)
        return 2
