"""The study commands of the command line: `moesim compare`, `scale`, `report` and `sweep`,
their parsers (`add_study_parsers`) and handlers (`STUDY_COMMANDS`); simulator.cli dispatches.

    moesim compare --systems gb200-nvl72,gb300-nvl72 --out gb200-vs-gb300
    moesim compare --recipes mbridge-25.11,mbridge-26.06 --out recipes
    moesim scale --gpus 256,512,1024 --out scale          # weak scaling; --strong keeps gbs
    moesim sweep examples/sweeps/nic-speed.yaml --out nic-speed --jobs 2
    moesim report --out report                            # HTML + Markdown of a run
    moesim report --study scale --out scale-report        # ... or of a study folder

compare, scale and report take the scenario flags of `moesim run` (simulator.cli_scenario).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from topologies.systems import load_system
from workloads.recipe_files import load_recipe
from workloads.recipes import RECIPES, Recipe, recipe, recipe_with

from reports.files import check_output_folder
from reports.summary import run_title
from reports.tables import counted, format_table
from simulator.cli_scenario import (add_scenario_flags, apply_scenario_flags,
                                    note_unused_calibration, precision_for_system,
                                    run_document, scenario_flags_given,
                                    scenario_from_args, with_model_preset)
from simulator.results import pipeline_rows
from simulator.scenario import Scenario, run_scenario
from simulator.studies import compare_recipes, compare_systems, scale
from simulator.sweep import run_sweep, sweep_report_rows, table_records
from simulator.sweep_spec import load_sweep


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


def add_study_parsers(commands: argparse._SubParsersAction) -> None:
    """The parsers of compare, scale, report and sweep, in that order."""
    _compare_parser(commands)
    _scale_parser(commands)
    _report_parser(commands)
    _sweep_parser(commands)


def _names(text: str, flag: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError(f"--{flag} {text!r}: give a comma-separated list")
    return names


def _point_flags(args: argparse.Namespace) -> argparse.Namespace:
    """The flags re-applied at each study point over its published plan: plan degrees,
    --mtp, --precision, --auto-plan and --set (the base already has the rest)."""
    return argparse.Namespace(**{**vars(args), "scenario": None, "row": None, "megatron_args": None,
                                 "system": None, "model": None, "recipe": None,
                                 "calibration": None})


def _compare(args: argparse.Namespace) -> int:
    check_output_folder(args.out)
    published = not (args.same_recipe or args.scenario or args.row or args.megatron_args)
    flags = _point_flags(args)

    def adjust(scenario: Scenario) -> Scenario:
        return apply_scenario_flags(scenario, flags)

    base = scenario_from_args(args)
    if args.systems:
        if args.system:
            raise ValueError(f"--system {args.system}: compare --systems takes the systems "
                             f"from --systems")
        systems = [load_system(name) for name in _names(args.systems, "systems")]
        rebuild = published and base.recipe.name in RECIPES

        def on_gpu(scenario: Scenario) -> Scenario:
            """A catalog release rebuilt for the model on this system's GPU (a base from a
            scenario file, a row or --same-recipe keeps its recipe, in FP8 on Hopper where it
            is block-scaled and --precision is not given)."""
            if not rebuild:
                return scenario if args.precision else precision_for_system(scenario)
            release = recipe(scenario.recipe.name)
            return replace(scenario, recipe=_model_recipe(scenario, release, args.precision))

        frame = compare_systems(base, systems, published=published, adjust=adjust,
                                on_gpu=on_gpu)
        title = f"{base.model.name} on {base.plan.num_gpus} GPUs"
    else:
        if args.recipe:
            raise ValueError(f"--recipe {args.recipe}: compare --recipes takes the recipes "
                             f"from --recipes")
        recipes = [_model_recipe(base, load_recipe(name), args.precision)
                   for name in _names(args.recipes, "recipes")]
        frame = compare_recipes(base, recipes, published=published, adjust=adjust)
        title = f"{base.model.name} on {base.plan.num_gpus} x {base.system.name}"
    from reports.study_charts import compare_figures

    return _study_output(args, "compare", frame, compare_figures(frame, title))


def _model_recipe(base: Scenario, release: Recipe, precision: str | None) -> Recipe:
    """`release` (in --precision, if given; else in FP8 on Hopper where it is block-scaled) as
    its performance scripts set it for the base's model and GPU, as `run --recipe` puts it
    (workloads.model_presets)."""
    if precision:
        release = recipe_with(release, precision=precision)
    else:
        release = precision_for_system(replace(base, recipe=release)).recipe
    return with_model_preset(replace(base, recipe=release)).recipe


def _gpu_count(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"--gpus {text!r}: must be a positive integer")
    return int(text)


def _scale(args: argparse.Namespace) -> int:
    check_output_folder(args.out)
    counts = [_gpu_count(name) for name in _names(args.gpu_counts, "gpus")]
    base = scenario_from_args(argparse.Namespace(**{**vars(args), "gpus": counts[0]}))
    frame = scale(base, counts, weak=args.weak)
    title = (f"{base.model.name} on {base.system.name}, "
             f"{'weak' if args.weak else 'strong'} scaling")
    from reports.study_charts import scale_figures

    return _study_output(args, "scale", frame, scale_figures(frame, title))


def _study_output(args: argparse.Namespace, name: str, frame: Any,
                  figures: Mapping[str, Any]) -> int:
    from reports.study_charts import study_breakdown_rows, study_summary_rows, write_study

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


def _report(args: argparse.Namespace) -> int:
    from reports.html_report import run_sections, study_sections, write_report

    check_output_folder(args.out)
    if args.study:
        if given := scenario_flags_given(args):
            raise ValueError(f"--study {args.study}: reports a study folder; the scenario "
                             f"flags ({', '.join(given)}) apply only to a run's report")
        sections = study_sections(args.study)
        title = f"moesim study {Path(args.study).resolve().name}"
    else:
        scenario = scenario_from_args(args)
        note_unused_calibration(args.set, [scenario])
        result = run_scenario(scenario)
        document = run_document(args, result)
        sections = run_sections(document, pipeline_rows(result))
        title = f"moesim: {run_title(document)}"
    paths = write_report(args.out, title, sections)
    print(f"report written to {args.out}: {', '.join(path.name for path in paths)}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    if args.out:
        check_output_folder(args.out)
    spec = load_sweep(args.sweep)
    frame = run_sweep(spec, out_dir=args.out, jobs=args.jobs, scheduler=args.scheduler,
                      progress=True)
    failed = int((frame["status"] != "ok").sum())
    where = f"; sweep.csv and charts in {args.out}" if args.out else ""
    status = f"{counted(len(frame), 'point')}, {failed} failed{where}"
    if args.json:
        print(json.dumps(table_records(frame), indent=1))
        print(f"moesim: {status}", file=sys.stderr)
    else:
        print(format_table(sweep_report_rows(frame, spec.keys)))
        print(status)
    return 0


STUDY_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "compare": _compare, "scale": _scale, "report": _report, "sweep": _sweep}
