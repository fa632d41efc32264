"""Studies: one model run over several systems, recipes or cluster sizes, as a tidy DataFrame.

    compare_systems(base, systems)    one row per system, each with its published plan
    compare_recipes(base, recipes)    one row per recipe on the base scenario's system
    scale(base, gpu_counts, weak=True)  one row per GPU count;
        scaling_efficiency = tokens/s/GPU at N GPUs / tokens/s/GPU at the first point

Weak scaling keeps the batch per data-parallel rank (gbs grows with dp); strong scaling keeps
the global batch. Every row holds every input (point, system, gpu, model, recipe and its
fields, num_gpus, plan degrees, batch) and every output (step_time_s, tokens_per_s_per_gpu,
tflops_per_gpu, mfu, memory, and `breakdown_<category>_s` for every breakdown category).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from topologies.systems import SystemSpec
from workloads.recipes import Recipe, recipe_with

from reports.summary import BREAKDOWN_ORDER
from simulator.results import result_document
from simulator.scenario import Scenario, default_domain_size, run_scenario

Adjust = Callable[[Scenario], Scenario]


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishedPlan:
    """A published plan: parallel degrees and batch, MTP depth, recipe fields changed from
    the named release."""

    plan: Mapping[str, Any]
    mtp_layers: int
    recipe: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


def _published(*, pp: int, vpp: int, ep: int, mbs: int = 1, mtp_layers: int = 1,
               **recipe_fields: Any) -> PublishedPlan:
    degrees = {"tp": 1, "pp": pp, "vpp": vpp, "ep": ep, "etp": 1, "cp": 1, "mbs": mbs,
               "gbs": 4096}
    return PublishedPlan(plan=MappingProxyType(degrees), mtp_layers=mtp_layers,
                         recipe=MappingProxyType(recipe_fields))


# NVIDIA's published DeepSeek-V3 plans, by (model, system, recipe): all TP1 ETP1 CP1, GBS 4096,
# sequence 4096, the layout Megatron-Bridge uses for pp * vpp (workloads/pipeline_layouts.py).
# Source: /work/shared/research/hardware-and-recipes.md §3 (rows GB300 26.06/26.08, GB200
# 26.06/26.08, GB300 26.02-26.04.01) and §2 caveat 7 (25.11 table: PP2 VP4 EP32, no MTP);
# README "Accuracy" table for the commands these reproduce.
PUBLISHED_PLANS: Mapping[tuple[str, str, str], PublishedPlan] = MappingProxyType({
    ("deepseek-v3", "gb300-nvl72", "mbridge-26.06"): _published(pp=2, vpp=8, ep=32),
    ("deepseek-v3", "gb300-nvl72", "mbridge-26.08"): _published(pp=2, vpp=8, ep=32),
    ("deepseek-v3", "gb300-nvl72", "mbridge-26.02"): _published(pp=2, vpp=8, ep=32, mbs=2),
    ("deepseek-v3", "gb300-nvl72", "mbridge-26.04"): _published(pp=2, vpp=8, ep=32, mbs=2),
    ("deepseek-v3", "gb300-nvl72", "mbridge-25.11"): _published(pp=2, vpp=4, ep=32,
                                                                mtp_layers=0),
    ("deepseek-v3", "gb200-nvl72", "mbridge-26.06"): _published(
        pp=4, vpp=4, ep=64, recompute_modules=("mla_up_proj",), fp8_attention=False),
    ("deepseek-v3", "gb200-nvl72", "mbridge-26.08"): _published(
        pp=4, vpp=4, ep=64, recompute_modules=("mla_up_proj",), fp8_attention=False),
})


def published_scenario(scenario: Scenario) -> Scenario:
    """`scenario` with the published plan for its model, system and recipe, if there is one."""
    key = (scenario.model.name, scenario.system.name, scenario.recipe.name)
    published = PUBLISHED_PLANS.get(key)
    if published is None:
        return scenario
    return replace(scenario, plan=replace(scenario.plan, **published.plan, layout=None),
                   model=scenario.model.with_mtp(published.mtp_layers),
                   recipe=recipe_with(scenario.recipe, **published.recipe))


def on_system(scenario: Scenario, system: SystemSpec) -> Scenario:
    """`scenario` on another system, with the NVLink domain size recipes use there."""
    return replace(scenario, system=system, domain_size=default_domain_size(system))


def _unchanged(scenario: Scenario) -> Scenario:
    return scenario


def _flat_recipe(recipe_fields: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in recipe_fields.items():
        if key != "name":
            flat[f"recipe_{key}"] = "+".join(value) if isinstance(value, list) else value
    return flat


def study_row(point: str, document: Mapping[str, Any]) -> dict[str, Any]:
    """One tidy row from a run's result document (simulator.results)."""
    scenario = dict(document["scenario"])
    recipe_fields = scenario.pop("recipe")
    breakdown = document["breakdown_s"]
    categories = list(BREAKDOWN_ORDER) + sorted(set(breakdown) - set(BREAKDOWN_ORDER))
    return {"point": point, **scenario, "recipe": recipe_fields["name"],
            **_flat_recipe(recipe_fields),
            **{key: document[key] for key in ("step_time_s", "tokens_per_s_per_gpu",
                                              "tflops_per_gpu", "mfu", "model_flops_per_token",
                                              "peak_tflops_per_gpu")},
            "memory_per_gpu_bytes": document["memory_bytes_per_gpu"]["total"],
            **{f"breakdown_{key}_s": breakdown.get(key, 0.0) for key in categories}}


def _run_point(point: str, scenario: Scenario) -> dict[str, Any]:
    try:
        return study_row(point, result_document(run_scenario(scenario)))
    except ValueError as error:
        raise ValueError(f"study point {point!r}: {error}") from None


def compare(scenarios: Mapping[str, Scenario]) -> pd.DataFrame:
    """Run every scenario; one row each, labelled by its key (column `point`)."""
    if not scenarios:
        raise ValueError("study: no points to run")
    frame = pd.DataFrame([_run_point(point, scenario) for point, scenario in scenarios.items()])
    breakdown = [column for column in frame.columns if column.startswith("breakdown_")]
    frame[breakdown] = frame[breakdown].fillna(0.0)
    return frame


def _labels(names: Sequence[str], what: str) -> None:
    if len(set(names)) != len(names):
        raise ValueError(f"--{what} {','.join(names)}: a {what[:-1]} is listed twice")


def compare_systems(base: Scenario, systems: Sequence[SystemSpec], *, published: bool = True,
                    adjust: Adjust = _unchanged, on_gpu: Adjust = _unchanged) -> pd.DataFrame:
    """`base` on each system: `on_gpu` (e.g. the recipe's changes for the model on that GPU),
    the system's published plan for the model and recipe (unless `published` is False), then
    `adjust` (e.g. the user's explicit flags)."""
    _labels([s.name for s in systems], "systems")
    points = {}
    for system in systems:
        scenario = on_gpu(on_system(base, system))
        points[system.name] = adjust(published_scenario(scenario) if published else scenario)
    return compare(points)


def compare_recipes(base: Scenario, recipes: Sequence[Recipe], *, published: bool = True,
                    adjust: Adjust = _unchanged) -> pd.DataFrame:
    """`base` with each recipe on its own system: the recipe's published plan (unless
    `published` is False), then `adjust`."""
    _labels([r.name for r in recipes], "recipes")
    points = {}
    for recipe in recipes:
        scenario = replace(base, recipe=recipe)
        points[recipe.name] = adjust(published_scenario(scenario) if published else scenario)
    return compare(points)


def _scaled(base: Scenario, num_gpus: int, weak: bool) -> Scenario:
    plan = base.plan
    if num_gpus < 1:
        raise ValueError(f"--gpus {num_gpus}: must be >= 1")
    dp = num_gpus // (plan.tp * plan.cp * plan.pp)
    gbs = plan.gbs // plan.dp * dp if weak else plan.gbs
    try:
        return replace(base, plan=replace(plan, num_gpus=num_gpus, gbs=gbs))
    except ValueError as error:
        raise ValueError(f"study point {str(num_gpus)!r}: {error}") from None


def scale(base: Scenario, gpu_counts: Sequence[int], *, weak: bool = True) -> pd.DataFrame:
    """`base` on each GPU count; weak scaling keeps gbs / dp, strong scaling keeps gbs.
    Adds `scaling_efficiency` (per-GPU throughput over the first point's) and `scaling`."""
    _labels([str(n) for n in gpu_counts], "gpus")
    if weak and base.plan.gbs % base.plan.dp != 0:
        raise ValueError(f"gbs={base.plan.gbs}: weak scaling needs gbs divisible by "
                         f"dp={base.plan.dp}")
    frame = compare({str(n): _scaled(base, n, weak) for n in gpu_counts})
    first = frame["tokens_per_s_per_gpu"].iloc[0]
    frame.insert(1, "scaling", "weak" if weak else "strong")
    frame["scaling_efficiency"] = frame["tokens_per_s_per_gpu"] / first
    return frame
