"""A sensible parallel plan for a model on a system: the smallest that fits in memory.

Search order (the usual advice for MoE training): the fewest GPUs from a ladder of sizes, then
the fewest pipeline stages, then the least tensor parallelism, then expert parallelism as wide
as fits inside one NVLink domain. Each candidate must pass `validate_plan` and the memory check.
The batch gives every DP rank 2 * pp micro batches (a short but representative 1F1B step).
"""

from __future__ import annotations

from dataclasses import replace
from itertools import product

from topologies.systems import SystemSpec, system_gpu
from workloads.models import ModelSpec
from workloads.parallelism import ParallelPlan, validate_plan
from workloads.recipes import BLOCK_SCALED_PRECISIONS, Recipe

from simulator.memory import check_fits, peak_memory

GPU_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024)
DEGREES = (1, 2, 4, 8, 16)


def _candidates(model: ModelSpec, num_gpus: int, domain: int) -> list[dict[str, int]]:
    eps = [ep for ep in (64, 32, 16, 8, 4, 2, 1)
           if (ep == 1 or (model.is_moe and model.num_experts % ep == 0))]
    plans = []
    for pp, tp, ep in product(DEGREES, (1, 2, 4, 8), eps):
        if tp > domain or pp > model.num_layers or num_gpus % (tp * pp) or num_gpus % (ep * pp):
            continue
        plans.append({"pp": pp, "tp": tp, "ep": ep})
    return sorted(plans, key=lambda p: (p["pp"], p["tp"], -min(p["ep"], domain)))


def _plan(model: ModelSpec, num_gpus: int, degrees: dict[str, int], seq_len: int) -> ParallelPlan:
    dp = num_gpus // (degrees["tp"] * degrees["pp"])
    return ParallelPlan(num_gpus=num_gpus, tp=degrees["tp"], pp=degrees["pp"], ep=degrees["ep"],
                        mbs=1, gbs=dp * 2 * degrees["pp"], seq_len=seq_len)


def _fits(model: ModelSpec, plan: ParallelPlan, recipe: Recipe, system: SystemSpec) -> bool:
    try:
        validate_plan(plan, model)
        check_fits(peak_memory(model, plan, recipe), system_gpu(system))
    except ValueError:
        return False
    return True


def recipe_for(system: SystemSpec, recipe: Recipe) -> Recipe:
    """Hopper has no MXFP8: its FP8 runs with per-tensor scaling."""
    if not system_gpu(system).block_scaled and recipe.precision in BLOCK_SCALED_PRECISIONS:
        return replace(recipe, precision="fp8-cs")
    return recipe


def sensible_plan(model: ModelSpec, system: SystemSpec, recipe: Recipe, *, seq_len: int = 4096,
                  domain_size: int | None = None, num_gpus: int | None = None) -> ParallelPlan:
    """The first plan in the search order that fits (on `num_gpus` GPUs if given, else on the
    fewest of GPU_COUNTS); a one-line error when none does."""
    domain = domain_size or system.gpus_per_domain
    recipe = recipe_for(system, recipe)
    for num_gpus in (num_gpus,) if num_gpus else GPU_COUNTS:
        for degrees in _candidates(model, num_gpus, domain):
            plan = _plan(model, num_gpus, degrees, seq_len)
            if _fits(model, plan, recipe, system):
                return plan
    raise ValueError(f"model {model.name}: no plan on {num_gpus or GPU_COUNTS[-1]} "
                     f"{system_gpu(system).name} GPUs or fewer fits in memory with recipe "
                     f"{recipe.name}")
