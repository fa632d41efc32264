"""The command line: `moesim run` simulates one training step and prints what it found.

    moesim run                      # DeepSeek-V3 on 256 GB300 NVL72 GPUs, recipe mbridge-26.06
    moesim run --system gb200-nvl72 --pp 4 --vpp 4 --ep 64
    moesim run --set a2a_overlap=false --set system.nic=connectx-7 --json
    moesim run --trace step.json    # open in ui.perfetto.dev

Every error is one line on stderr and exit status 2; nothing is written unless the run worked.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Sequence

from topologies.systems import SystemSpec, load_system
from workloads.models import model_spec
from workloads.recipes import recipe, recipe_with

from reports.chrome_trace import write_chrome_trace
from reports.summary import format_summary
from simulator.overrides import apply_setting
from simulator.results import result_document, trace_rows
from simulator.scenario import Scenario, default_scenario, run_scenario

# NVIDIA's DeepSeek-V3 recipes put 64 of an NVL72 rack's 72 GPUs in one NVLink domain
# (hardware-and-recipes.md §3, DESIGN.md "Placement"); smaller domains are used whole.
NVL72_RECIPE_DOMAIN = 64
PLAN_FLAGS = {"gpus": "num_gpus", "tp": "tp", "pp": "pp", "vpp": "vpp", "ep": "ep",
              "etp": "etp", "cp": "cp", "mbs": "mbs", "gbs": "gbs", "seq": "seq_len"}


def default_domain_size(system: SystemSpec) -> int:
    return NVL72_RECIPE_DOMAIN if system.gpus_per_domain == 72 else system.gpus_per_domain


def _run_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser("run", help="simulate one training step",
                              description="Simulate one training step and print a summary.")
    run.add_argument("--system", help="catalog system name or a system YAML file")
    run.add_argument("--model", help="catalog model name")
    for flag in PLAN_FLAGS:
        run.add_argument(f"--{flag}", type=int, metavar="N")
    run.add_argument("--mtp", type=int, metavar="N", help="multi-token-prediction layers")
    run.add_argument("--precision", help="bf16, fp8-cs, fp8-blockwise, mxfp8 or nvfp4")
    run.add_argument("--recipe", help="software recipe name, e.g. mbridge-26.06")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="any recipe, system, plan or calibration field (repeatable)")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace")
    run.add_argument("--unfolded", action="store_true",
                     help="simulate every GPU instead of one per pipeline stage")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="moesim", description=(
        "Discrete-event performance simulator for large-model training clusters."))
    commands = top.add_subparsers(dest="command", required=True)
    _run_parser(commands)
    return top


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    """The default scenario with every given flag and --set applied, in that order."""
    scenario = default_scenario()
    if args.system:
        system = load_system(args.system)
        scenario = replace(scenario, system=system, domain_size=default_domain_size(system))
    if args.model:
        scenario = replace(scenario, model=model_spec(args.model))
    if args.mtp is not None:
        scenario = replace(scenario, model=scenario.model.with_mtp(args.mtp))
    if args.recipe:
        scenario = replace(scenario, recipe=recipe(args.recipe))
    if args.precision:
        scenario = replace(scenario, recipe=recipe_with(scenario.recipe, precision=args.precision))
    changes = {field: getattr(args, flag) for flag, field in PLAN_FLAGS.items()
               if getattr(args, flag) is not None}
    if changes or args.model or args.mtp is not None:
        changes["layout"] = None
    scenario = replace(scenario, plan=replace(scenario.plan, **changes))
    for setting in args.set:
        scenario = apply_setting(scenario, setting)
    return scenario


def _run(args: argparse.Namespace) -> int:
    result = run_scenario(scenario_from_args(args), folded=not args.unfolded)
    document = result_document(result)
    if args.trace:
        write_chrome_trace(args.trace, trace_rows(result))
    print(json.dumps(document, indent=1) if args.json else format_summary(document))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return _run(args)
    except (ValueError, OSError) as error:
        print(f"moesim: error: {error}", file=sys.stderr)
        return 2
