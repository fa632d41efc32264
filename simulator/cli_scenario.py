"""The scenario flags that every simulating command shares (`moesim run`, `compare`, `scale`,
`report`): declaring them on a parser and turning the parsed flags into a Scenario.

Order of application: the scenario file or a measured row (--row; else the default study),
--megatron-args, --system, --model, --mtp, --recipe, --precision, --auto-plan, --calibration,
then the plan flags and every --set together (simulator.overrides.apply_settings), so that no
invalid plan has to exist in between: `--gpus 16 --set ep=8` and `--set gpus=16 --set ep=8`
both work.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any, Sequence

from topologies.systems import load_system, system_gpu
from workloads.megatron_args import read_megatron_args
from workloads.model_files import load_model, names_file
from workloads.model_presets import model_preset
from workloads.recipe_files import load_recipe
from workloads.recipes import RECIPES, recipe_with

from simulator.calibration import load_calibration
from simulator.fitting import touches
from simulator.overrides import apply_settings, plan_and_recipe_changes
from simulator.planner import recipe_for, sensible_plan
from simulator.results import result_document
from simulator.scenario import (Result, Scenario, default_domain_size, default_scenario,
                                with_model)
from simulator.scenario_files import load_scenario_file, scenario_from_megatron_args
from simulator.validation import find_row, row_comparison, row_scenario

PLAN_FLAGS = {"gpus": "num_gpus", "tp": "tp", "pp": "pp", "vpp": "vpp", "ep": "ep",
              "etp": "etp", "cp": "cp", "mbs": "mbs", "gbs": "gbs", "seq": "seq_len"}
SCENARIO_OPTIONS = ("scenario", "row", "megatron_args", "system", "model", *PLAN_FLAGS, "mtp",
                    "precision", "recipe", "calibration")


def add_scenario_flags(command: argparse.ArgumentParser, *, gpus: bool = True) -> None:
    """The scenario flags of `moesim run`, which every command that simulates accepts;
    `gpus=False` leaves `--gpus` to the command (it is then None for `scenario_from_args`)."""
    command.add_argument("scenario", nargs="?", metavar="SCENARIO.yaml",
                         help="a scenario file (default: the built-in DeepSeek-V3 GB300 study)")
    command.add_argument("--row", metavar="FILE.csv:NAME",
                         help="start from a measured row of a measurements CSV, as `moesim "
                              "validate` runs it")
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


def run_document(args: argparse.Namespace, result: Result) -> dict[str, Any]:
    """The run's result document; with --row, the row's measurement and this run's error
    under `measured_row` (simulator.validation.row_comparison)."""
    document = result_document(result)
    if args.row:
        document["measured_row"] = row_comparison(find_row(args.row), result.scenario,
                                                  result.metrics.tokens_per_s_per_gpu)
    return document


def unused_calibration_settings(settings: Sequence[str],
                                scenarios: Sequence[Scenario]) -> list[str]:
    """The `calibration.FIELD[.KEY]` keys among --set `settings` that cannot change any of
    `scenarios`' steps (no kernel or collective of them reads them; `fitting.touches`)."""
    keys = [setting.partition("=")[0].strip() for setting in settings]
    return [key for key in keys if key.startswith("calibration.") and not any(
        touches(key.removeprefix("calibration."), scenario, scenario.params)
        for scenario in scenarios)]


def note_unused_calibration(settings: Sequence[str], scenarios: Sequence[Scenario],
                            where: str = "this run") -> None:
    """Name on stderr each --set calibration key that no scenario of `scenarios` reads, and
    for a rack's NVLink rate the "-nvlink8" key that 8-GPU baseboards read instead."""
    for key in unused_calibration_settings(settings, scenarios):
        reads_nvlink8 = key.endswith("-nvlink") and not unused_calibration_settings(
            [f"{key}8"], scenarios)
        hint = f"; NVLink domains of at most 8 GPUs read {key}8" if reads_nvlink8 else ""
        print(f"moesim: --set {key} changes nothing in {where} (no kernel or collective reads "
              f"it{hint})", file=sys.stderr)


def scenario_flags_given(args: argparse.Namespace) -> list[str]:
    """The names of the scenario flags given on the command line."""
    given = [name for name in SCENARIO_OPTIONS if getattr(args, name) is not None]
    return given + ["set"] * bool(args.set) + ["auto_plan"] * args.auto_plan


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    """The default scenario with every given flag and --set applied (module docstring)."""
    return apply_scenario_flags(base_scenario(args), args)


def base_scenario(args: argparse.Namespace) -> Scenario:
    """The scenario file or measured row (else the default study) with --megatron-args
    applied."""
    if args.scenario and args.row:
        raise ValueError(f"--row {args.row}: give a scenario file or --row, not both")
    if args.row:
        scenario = row_scenario(find_row(args.row))
    else:
        scenario = load_scenario_file(args.scenario) if args.scenario else default_scenario()
    if args.megatron_args:
        scenario, ignored = scenario_from_megatron_args(read_megatron_args(args.megatron_args),
                                                        scenario)
        if ignored:
            print(f"moesim: megatron args not modelled: {'; '.join(ignored)}", file=sys.stderr)
    return scenario


def apply_scenario_flags(scenario: Scenario, args: argparse.Namespace) -> Scenario:
    """`scenario` with the system, model, recipe and calibration flags, then the plan flags
    and every --set together, applied."""
    if args.system:
        system = load_system(args.system)
        scenario = replace(scenario, system=system, domain_size=default_domain_size(system))
    if args.model:
        scenario = with_model(scenario, load_model(args.model))
    if args.mtp is not None:
        scenario = replace(scenario, model=scenario.model.with_mtp(args.mtp))
    if args.recipe:
        scenario = replace(scenario, recipe=load_recipe(args.recipe))
    if args.precision:
        scenario = replace(scenario, recipe=recipe_with(scenario.recipe, precision=args.precision))
    elif args.system or args.recipe:
        scenario = precision_for_system(scenario)
    if (args.recipe or args.model or args.system or args.precision) and not (
            args.recipe and names_file(args.recipe, RECIPES)):
        scenario = with_model_preset(scenario)
    if args.auto_plan:
        scenario = _auto_plan(scenario, args)
    if args.calibration:
        scenario = replace(scenario, params=load_calibration(args.calibration))
    return apply_settings(scenario, [*_plan_settings(args), *args.set])


def precision_for_system(scenario: Scenario) -> Scenario:
    """A block-scaled recipe (MXFP8, NVFP4) on Hopper runs its FP8 with per-tensor scaling
    instead (simulator.planner.recipe_for), said on stderr; --precision chooses otherwise."""
    recipe_ = recipe_for(scenario.system, scenario.recipe)
    if recipe_.precision != scenario.recipe.precision:
        print(f"moesim: {system_gpu(scenario.system).name} has no {scenario.recipe.precision}: "
              f"precision={recipe_.precision} (--precision chooses)", file=sys.stderr)
    return replace(scenario, recipe=recipe_)


def _plan_settings(args: argparse.Namespace) -> list[str]:
    """The plan flags as `plan.FIELD=N` settings; any plan flag, a new model or --auto-plan
    resets the pipeline layout to the default (a --set layout=... after them still wins)."""
    settings = [f"plan.{field}={getattr(args, flag)}" for flag, field in PLAN_FLAGS.items()
                if getattr(args, flag) is not None]
    if settings or args.model or args.mtp is not None or args.auto_plan:
        settings.insert(0, "plan.layout=default")
    return settings


def with_model_preset(scenario: Scenario) -> Scenario:
    """A catalog release's recipe as its performance scripts set it for this model and GPU
    (workloads.model_presets); the changes are named on stderr."""
    release = scenario.recipe
    if release.name not in RECIPES:
        return scenario
    gpu = system_gpu(scenario.system).name
    changes = {key: value for key, value in model_preset(
        release.name, scenario.model.name, gpu, release.precision).items()
        if getattr(release, key) != value}
    if not changes:
        return scenario
    listed = ", ".join(f"{key}={value}" for key, value in changes.items())
    print(f"moesim: {release.name} preset for {scenario.model.name} on {gpu}: {listed}",
          file=sys.stderr)
    return replace(scenario, recipe=recipe_with(release, **changes))


def _auto_plan(scenario: Scenario, args: argparse.Namespace) -> Scenario:
    """The smallest plan that fits (simulator.planner) for the chosen model and system, with
    the plan fields that the flags and --set give kept and the recipe as --set leaves it."""
    plan_changes, recipe_changes = plan_and_recipe_changes([*_plan_settings(args), *args.set])
    recipe_ = recipe_for(scenario.system, scenario.recipe)
    plan = sensible_plan(scenario.model, scenario.system, recipe_with(recipe_, **recipe_changes),
                         domain_size=scenario.domain_size,
                         fixed={"seq_len": scenario.plan.seq_len, **plan_changes})
    return replace(scenario, plan=plan, recipe=recipe_)
