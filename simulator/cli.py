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
from typing import Sequence

from topologies.systems import load_system
from workloads.megatron_args import read_megatron_args
from workloads.model_files import load_model_file
from workloads.models import ModelSpec, model_spec
from workloads.recipe_files import load_recipe_file
from workloads.recipes import Recipe, recipe, recipe_with

from reports.calibration_file import write_calibration
from reports.chrome_trace import write_chrome_trace
from reports.summary import format_summary
from reports.tables import format_table
from reports.topology_plot import draw_topology
from reports.validation_plot import write_validation_plot
from reports.validation_table import format_validation
from simulator.catalog import (CATALOG_TABLES, build_system, catalog_rows, drawing_data,
                               summarise, summary_rows)
from simulator.overrides import apply_setting
from simulator.planner import recipe_for, sensible_plan
from simulator.results import result_document, trace_rows
from simulator.scenario import Scenario, default_domain_size, default_scenario, run_scenario
from simulator.scenario_files import load_scenario_file, scenario_from_megatron_args
from simulator.calibration import DEFAULT_PARAMS, load_calibration
from simulator.fitting import DEFAULT_FIT, FitParameter, calibration_document, fit
from simulator.validation import read_measurements, summarize, validate_rows

SHOW_SUBJECTS = ("system",)
PLAN_FLAGS = {"gpus": "num_gpus", "tp": "tp", "pp": "pp", "vpp": "vpp", "ep": "ep",
              "etp": "etp", "cp": "cp", "mbs": "mbs", "gbs": "gbs", "seq": "seq_len"}


def _run_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser("run", help="simulate one training step",
                              description="Simulate one training step and print a summary.")
    run.add_argument("scenario", nargs="?", metavar="SCENARIO.yaml",
                     help="a scenario file (default: the built-in DeepSeek-V3 GB300 study)")
    run.add_argument("--megatron-args", metavar="ARGS|@FILE",
                     help="a Megatron-LM / Megatron-Bridge command line (or @file holding one)")
    run.add_argument("--system", help="catalog system name or a system YAML file")
    run.add_argument("--model", help="catalog model name, model YAML or HF config.json")
    for flag in PLAN_FLAGS:
        run.add_argument(f"--{flag}", type=int, metavar="N")
    run.add_argument("--mtp", type=int, metavar="N", help="multi-token-prediction layers")
    run.add_argument("--precision", help="bf16, fp8-cs, fp8-blockwise, mxfp8 or nvfp4")
    run.add_argument("--recipe", help="recipe name (e.g. mbridge-26.06) or recipe YAML")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="any recipe, system, plan or calibration field (repeatable)")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace")
    run.add_argument("--calibration", metavar="FILE",
                     help="cost parameters from `moesim calibrate`")
    run.add_argument("--auto-plan", action="store_true",
                     help="pick the smallest plan that fits (other plan flags still apply)")
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
    return top


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    """The default scenario with every given flag and --set applied, in that order."""
    scenario = load_scenario_file(args.scenario) if args.scenario else default_scenario()
    if args.megatron_args:
        scenario, ignored = scenario_from_megatron_args(read_megatron_args(args.megatron_args),
                                                        scenario)
        if ignored:
            print(f"moesim: megatron args not modelled: {'; '.join(ignored)}", file=sys.stderr)
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


COMMANDS = {"run": _run, "list": _list, "show": _show, "validate": _validate,
            "calibrate": _calibrate}


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (ValueError, OSError) as error:
        print(f"moesim: error: {error}", file=sys.stderr)
        return 2
