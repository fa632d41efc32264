"""Recipes from outside moesim: recipe YAML files, and the Recipe fields of Megatron flags.

A recipe file maps Recipe fields and optionally `extends: NAME-or-PATH` (a catalog recipe such
as mbridge-26.06, or another .yaml file relative to this one); without `extends`, fields it
leaves out keep Recipe's defaults (plain Megatron-LM). `name` defaults to the extended
recipe's when nothing else changes, else to the file's stem. Errors are one line naming the
file, the key, the value and what is allowed (see workloads.model_files).

`recipe_fields_from_flags` is the recipe half of workloads.megatron_args: precision
(--fp8-format/--fp8-recipe, --fp4-format, --bf16), dispatcher (--moe-token-dispatcher-type,
--moe-flex-dispatcher-backend, SM counts), CUDA graphs, overlaps, recompute, capacity factors,
gradient-reduction width and optimizer-state bytes, each by Megatron's rules.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from workloads.model_files import (UNSET, FlagValues, Origin, build, check_keys, extended,
                                   identity, names_file, read_yaml_mapping, typed_changes)
from workloads.recipes import RECIPES, RECOMPUTE_MODULES, Recipe

RECIPE_KEYS = ("extends",) + tuple(f.name for f in fields(Recipe))


def load_recipe(name_or_path: str, field: str = "recipe") -> Recipe:
    """A catalog recipe by name, or a recipe file (`load_recipe_file`) by path; an error names
    `field` (a CSV row's `release`)."""
    if names_file(name_or_path, RECIPES):
        return load_recipe_file(name_or_path)
    if name_or_path not in RECIPES:
        raise ValueError(f"{field}={name_or_path!r}: unknown recipe; known: "
                         f"{', '.join(sorted(RECIPES))} (or a path to a .yaml recipe file)")
    return RECIPES[name_or_path]


def load_recipe_file(path: str | Path) -> Recipe:
    """A recipe from a .yaml/.yml recipe file."""
    return _load_recipe(Path(path), ())


def _load_recipe(path: Path, chain: tuple[str, ...]) -> Recipe:
    return recipe_from_mapping(read_yaml_mapping(path), Origin(path), chain + (identity(path),))


def recipe_from_mapping(data: Any, origin: Origin, chain: tuple[str, ...] = ()) -> Recipe:
    """A recipe from a mapping of Recipe fields, optionally `extends: NAME-or-PATH`."""
    check_keys(data, RECIPE_KEYS, origin)
    base = (extended(data["extends"], origin, chain, RECIPES, _load_recipe, "recipe")
            if "extends" in data else None)
    changes = {key: value for key, value in data.items() if key != "extends"}
    return build(Recipe, base, typed_changes(Recipe, changes, origin), origin)


# --- Recipe fields from Megatron flags ------------------------------------------------------

_SWITCHES = {"--overlap-moe-expert-parallel-comm": "a2a_overlap",
             "--moe-shared-expert-overlap": "shared_expert_overlap",
             "--overlap-grad-reduce": "overlap_grad_reduce",
             "--overlap-param-gather": "overlap_param_gather",
             "--tp-comm-overlap": "tp_comm_overlap",
             "--fp8-dot-product-attention": "fp8_attention",
             "--fp8-param-gather": "fp8_param_gather", "NCCL_NVLS_ENABLE": "nccl_nvls",
             "--moe-router-fusion": "router_fusion", "--moe-permute-fusion": "permute_fusion",
             "NVTE_NORM_FWD_USE_CUDNN": "norm_quant_fusion",
             "--use-transformer-engine-op-fuser": "fused_grouped_mlp"}
BRIDGE_PRECISIONS = {  # Megatron-Bridge mixed_precision recipe names
    "bf16_mixed": "bf16", "fp16_mixed": "bf16", "bf16_with_mxfp8_mixed": "mxfp8",
    "bf16_with_fp8_delayed_scaling_mixed": "fp8-cs",
    "bf16_with_fp8_current_scaling_mixed": "fp8-cs",
    "bf16_with_fp8_subchannel_scaling_mixed": "fp8-blockwise", "bf16_with_nvfp4_mixed": "nvfp4"}
_QUANTIZATION = {"delayed": "fp8-cs", "tensorwise": "fp8-cs", "blockwise": "fp8-blockwise",
                 "mxfp8": "mxfp8", "nvfp4": "nvfp4"}  # --fp8-recipe / --fp4-recipe


def recipe_fields_from_flags(flags: FlagValues) -> dict[str, Any]:
    """Recipe fields of a command line (workloads.megatron_args); unused flags are reported."""
    result = {name: flags.setting(flag) for flag, name in _SWITCHES.items()
              if flags.setting(flag) is not UNSET}
    if result.get("a2a_overlap") and not flags.get("--delay-wgrad-compute"):
        flags.notes.append("--overlap-moe-expert-parallel-comm: modelled with delayed wgrad, "
                           "as with --delay-wgrad-compute")
    if not result.get("a2a_overlap"):
        flags.ignore("only modelled with --overlap-moe-expert-parallel-comm",
                     "--delay-wgrad-compute")
    for part in (_precision, _dispatcher, _cuda_graphs, _recompute, _capacity, _grad_reduce,
                 _optimizer_state, _offload):
        result.update(part(flags))
    return result


def _precision(flags: FlagValues) -> dict[str, Any]:
    if flags.has("--mixed-precision"):
        return {"precision": BRIDGE_PRECISIONS[flags.get("--mixed-precision")]}
    fp4, fp8 = flags.get("--fp4-format"), flags.get("--fp8-format")
    if fp4 is not None and fp8 is not None:
        raise ValueError(f"{flags.written['--fp4-format']} and {flags.written['--fp8-format']}: "
                         f"Megatron accepts only one")
    if fp4 is not None or fp8 is not None:
        flag = "--fp4-recipe" if fp4 is not None else "--fp8-recipe"
        name = flags.get(flag, "nvfp4" if fp4 is not None else "delayed")
        if name == "custom":
            raise ValueError(f"{flags.written[flag]}: a custom quantization recipe is not "
                             f"modelled; allowed: tensorwise, delayed, mxfp8, blockwise, nvfp4")
        return {"precision": _QUANTIZATION[name]}
    flags.ignore("needs --fp8-format", "--fp8-recipe")
    flags.ignore("needs --fp4-format", "--fp4-recipe")
    if flags.get("--fp16"):
        flags.notes.append("--fp16: simulated as BF16 (the same tensor-core rate)")
    elif flags.complete and not flags.get("--bf16"):
        flags.notes.append("no --bf16 or --fp16: FP32 training is not modelled; simulated as "
                           "BF16")
    wanted = flags.get("--bf16") or flags.get("--fp16") or flags.complete
    return {"precision": "bf16"} if wanted else {}


def _dispatcher(flags: FlagValues) -> dict[str, Any]:
    """alltoall/allgather hold no SMs; flex runs DeepEP (default) or HybridEP on N SMs."""
    kind = flags.setting("--moe-token-dispatcher-type")
    sms = {"deepep": "--moe-deepep-num-sms", "hybridep": "--moe-hybridep-num-sms"}
    if kind is UNSET or kind != "flex":
        flags.ignore("needs --moe-token-dispatcher-type flex" if kind is UNSET
                     else f"no effect with the {kind} dispatcher",
                     "--moe-flex-dispatcher-backend", "--moe-enable-deepep", *sms.values())
        return {} if kind is UNSET else {"dispatcher": kind, "dispatcher_sms": 0}
    backend = flags.get("--moe-flex-dispatcher-backend", "deepep")
    if flags.get("--moe-enable-deepep") and backend != "deepep":
        raise ValueError(f"{flags.written['--moe-enable-deepep']}: contradicts "
                         f"{flags.written['--moe-flex-dispatcher-backend']}")
    flags.ignore(f"no effect with the {backend} backend",
                 sms["hybridep" if backend == "deepep" else "deepep"])
    return {"dispatcher": backend,
            "dispatcher_sms": flags.get(sms[backend], flags.defaults[sms[backend]])}


def _offload(flags: FlagValues) -> dict[str, Any]:
    """--cpu-offloading keeps --cpu-offloading-num-layers layers' activations on the host."""
    if not flags.get("--cpu-offloading"):
        flags.ignore("needs --cpu-offloading", "--cpu-offloading-num-layers")
        return {"activation_offload_layers": 0} if flags.has("--cpu-offloading") else {}
    return {"activation_offload_layers": flags.get("--cpu-offloading-num-layers", 0)}


def _cuda_graphs(flags: FlagValues) -> dict[str, Any]:
    """full_iteration (the impl, or local with that scope) -> "full"; local/TE -> "partial"."""
    impl = flags.setting("--cuda-graph-impl")
    for flag, legacy in (("--enable-cuda-graph", "local"),
                         ("--external-cuda-graph", "transformer_engine")):
        if flags.get(flag):
            if impl not in (UNSET, "none"):
                raise ValueError(f"{flags.written[flag]}: Megatron refuses it together with "
                                 f"{flags.written['--cuda-graph-impl']}")
            impl = legacy
    if impl is UNSET or impl == "none":
        flags.ignore("needs --cuda-graph-impl" if impl is UNSET else "no effect without graphs",
                     "--cuda-graph-scope")
        return {} if impl is UNSET else {"cuda_graphs": "none"}
    full = impl == "full_iteration" or "full_iteration" in flags.get("--cuda-graph-scope", ())
    return {"cuda_graphs": "full" if full else "partial"}


def _recompute(flags: FlagValues) -> dict[str, Any]:
    granularity = flags.setting("--recompute-granularity")
    if flags.get("--recompute-activations"):
        granularity = "selective"
    detail = ("--recompute-modules", "--recompute-method", "--recompute-num-layers")
    if granularity is UNSET or granularity is None:
        flags.ignore("needs --recompute-granularity", *detail)
        return {} if granularity is UNSET else {"recompute_modules": ()}
    if granularity == "full":
        flags.ignore("no effect with full granularity", detail[0])
        if flags.get("--recompute-method") == "block":
            flags.notes.append(f"{flags.written['--recompute-method']}: recomputing only some "
                               f"layers is not modelled; simulated as full recompute of all")
        return {"recompute_modules": ("full",)}
    flags.ignore("no effect with selective granularity", *detail[1:])
    modules = flags.get("--recompute-modules", ("core_attn",))  # Megatron's default module
    flags.ignored.extend(f"--recompute-modules {module} (recompute of {module!r} is not "
                         f"modelled)" for module in modules if module not in RECOMPUTE_MODULES)
    return {"recompute_modules": tuple(dict.fromkeys(module for module in modules
                                                     if module in RECOMPUTE_MODULES))}


def _capacity(flags: FlagValues) -> dict[str, Any]:
    """Per EP rank (HybridEP's --moe-expert-rank-capacity-factor, a buffer budget) and per
    expert (--moe-expert-capacity-factor): padded work only with
    --moe-pad-expert-input-to-capacity; without it Megatron drops the tokens over capacity and
    keeps dynamic shapes, which under balanced routing is dropless at any factor >= 1."""
    result: dict[str, Any] = {}
    rank = flags.setting("--moe-expert-rank-capacity-factor")
    if rank is not UNSET:
        result["rank_capacity_factor"] = rank
    expert = flags.setting("--moe-expert-capacity-factor")
    if expert in (UNSET, None):
        flags.ignore("needs --moe-expert-capacity-factor", "--moe-pad-expert-input-to-capacity")
    elif not flags.get("--moe-pad-expert-input-to-capacity"):
        dropped = ("no token is dropped under balanced routing" if expert >= 1 else
                   f"the {1 - expert:.0%} of tokens it would drop are not modelled")
        flags.notes.append(f"{flags.written['--moe-expert-capacity-factor']} without "
                           f"--moe-pad-expert-input-to-capacity: {dropped}; simulated as "
                           f"dropless")
        expert = None
    if expert is not UNSET:
        result["expert_capacity_factor"] = expert
    return result


def _grad_reduce(flags: FlagValues) -> dict[str, Any]:
    """Megatron's rule for 16-bit runs: FP32 unless --grad-reduce-in-bf16 or BF16 main grads."""
    if flags.has("--grad-reduce-in-fp32"):  # Bridge's ddp.grad_reduce_in_fp32
        return {"grad_reduce_dtype_bytes": 4 if flags.get("--grad-reduce-in-fp32") else 2}
    if flags.get("--grad-reduce-in-bf16"):
        return {"grad_reduce_dtype_bytes": 2}
    if flags.get("--accumulate-allreduce-grads-in-fp32"):
        return {"grad_reduce_dtype_bytes": 4}
    if flags.get("--main-grads-dtype") == 2:
        return {"grad_reduce_dtype_bytes": 2}
    return {"grad_reduce_dtype_bytes": 4} if flags.complete else {}


def _optimizer_state(flags: FlagValues) -> dict[str, Any]:
    """Main params + both Adam moments, their widths given with the precision-aware optimizer."""
    aware = flags.setting("--use-precision-aware-optimizer")
    dtypes = ("--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype")
    if aware is True:
        total = sum(flags.get(flag, 4) for flag in dtypes)
        return {"optimizer_state_bytes_per_param": float(total)}
    flags.ignore("needs --use-precision-aware-optimizer", *dtypes)
    return {} if aware is UNSET else {"optimizer_state_bytes_per_param": 12.0}
