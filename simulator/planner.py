"""A sensible parallel plan for a model on a system: the smallest that fits in memory.

Search order (the usual advice for MoE training): the fewest GPUs from a ladder of sizes, then
the fewest pipeline stages, then the least tensor parallelism, then expert parallelism as wide
as fits inside one NVLink domain. The plan fields the user gave (`fixed`: --tp, --gbs, --set
mbs=2, ...) are kept and only the others chosen. Each candidate must pass `validate_plan` and
the memory check. Unless given, the batch gives every DP rank 2 * pp micro batches (a short but
representative 1F1B step; whole local batches where the recipe has them), and a recipe with the 1F1B
all-to-all overlap gets two virtual stages per pipeline rank where pp > 1 (Megatron-Core refuses
that overlap without them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from itertools import product
from types import MappingProxyType
from typing import Any

from topologies.systems import SystemSpec, system_gpu
from workloads.models import ModelSpec
from workloads.parallelism import ParallelPlan, pipeline_runs, validate_plan
from workloads.recipes import BLOCK_SCALED_PRECISIONS, Recipe

from simulator.memory import check_fits, peak_memory

GPU_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024)
PP_DEGREES = (1, 2, 4, 8, 16)
TP_DEGREES = (1, 2, 4, 8)
EP_DEGREES = (64, 32, 16, 8, 4, 2, 1)
SEQ_LEN = 4096
NOTHING_FIXED: Mapping[str, Any] = MappingProxyType({})


def _choices(fixed: Mapping[str, Any], field: str, searched: tuple[int, ...]) -> tuple[int, ...]:
    return (fixed[field],) if field in fixed else searched


def _candidates(model: ModelSpec, domain: int,
                fixed: Mapping[str, Any]) -> list[dict[str, int]]:
    """(pp, tp, ep) in search order; a searched tp stays inside one NVLink domain."""
    eps = [ep for ep in _choices(fixed, "ep", EP_DEGREES)
           if (ep == 1 or (model.is_moe and model.num_experts % ep == 0))]
    plans = [{"pp": pp, "tp": tp, "ep": ep}
             for pp, tp, ep in product(_choices(fixed, "pp", PP_DEGREES),
                                       _choices(fixed, "tp", TP_DEGREES), eps)
             if pp <= model.num_layers and ("tp" in fixed or tp <= domain)]
    return sorted(plans, key=lambda p: (p["pp"], p["tp"], -min(p["ep"], domain)))


def _plan(num_gpus: int, degrees: dict[str, int], recipe: Recipe,
          fixed: Mapping[str, Any]) -> ParallelPlan | None:
    """The plan of these degrees on `num_gpus` with the fixed fields as given and the batch
    and virtual stages as the module docstring says; None if that is not a valid plan."""
    fields = {"mbs": 1, "seq_len": SEQ_LEN, **fixed, **degrees, "num_gpus": num_gpus}
    if "vpp" not in fixed:
        fields["vpp"] = 2 if recipe.a2a_overlap and fields["pp"] > 1 else 1
    if "gbs" not in fixed:
        dp = max(num_gpus // (fields["tp"] * fields.get("cp", 1) * fields["pp"]), 1)
        sequences = fields["mbs"] * 2 * fields["pp"]
        local = recipe.local_batch_size if fields["pp"] > 1 else 0
        fields["gbs"] = dp * (-(-sequences // local) * local if local else sequences)
    try:
        return ParallelPlan(**fields)
    except ValueError:
        return None


def _fits(model: ModelSpec, plan: ParallelPlan, recipe: Recipe, system: SystemSpec) -> bool:
    try:
        validate_plan(plan, model)
        pipeline_runs(plan, recipe.local_batch_size)
        check_fits(peak_memory(model, plan, recipe), system_gpu(system))
    except ValueError:
        return False
    return True


def recipe_for(system: SystemSpec, recipe: Recipe) -> Recipe:
    """Hopper has no MXFP8: its FP8 runs with per-tensor scaling."""
    if not system_gpu(system).block_scaled and recipe.precision in BLOCK_SCALED_PRECISIONS:
        return replace(recipe, precision="fp8-cs")
    return recipe


def sensible_plan(model: ModelSpec, system: SystemSpec, recipe: Recipe, *,
                  domain_size: int | None = None,
                  fixed: Mapping[str, Any] = NOTHING_FIXED) -> ParallelPlan:
    """The first plan in the search order that fits with the plan fields in `fixed` kept (on
    `fixed["num_gpus"]` GPUs if given, else on the fewest of GPU_COUNTS); a one-line error
    when none does."""
    domain = domain_size or system.gpus_per_domain
    recipe = recipe_for(system, recipe)
    counts = _choices(fixed, "num_gpus", GPU_COUNTS)
    for num_gpus, degrees in product(counts, _candidates(model, domain, fixed)):
        plan = _plan(num_gpus, degrees, recipe, fixed)
        if plan is not None and _fits(model, plan, recipe, system):
            return plan
    kept = "".join(f", {field}={value}" for field, value in fixed.items()
                   if field not in ("num_gpus", "layout"))
    raise ValueError(f"model {model.name}: no plan on {counts[-1]} {system_gpu(system).name} "
                     f"GPUs{'' if 'num_gpus' in fixed else ' or fewer'} fits in memory with "
                     f"recipe {recipe.name}{kept}")
