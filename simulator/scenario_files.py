"""Scenario files (YAML) and Megatron command lines as Scenarios.

A scenario file maps: `extends` (`default` = simulator.scenario.default_scenario(), or another
scenario file); `system` (catalog name, .yaml path or inline mapping, see topologies.systems);
`model` and `recipe` (catalog name, file path or inline mapping, optionally with `extends`);
`plan` (ParallelPlan fields; `gpus` and `seq` also name num_gpus and seq_len); `domain_size`;
`failed_trays`; the asymmetric what-ifs `straggler_gpu`, `straggler_slowdown`, `degraded_link`
and `degraded_link_bandwidth_fraction` (simulator.scenario.Scenario); `calibration` (CostParams
fields: a number, or for a mapping field a mapping of its existing keys to numbers). Paths are
relative to the file. Without `extends` the file must
give system, model, plan and recipe. Two rules keep a one-field change valid: a changed system
keeps the base's domain_size while it fits, else uses whole NVLink domains; and (for command
lines too) an inherited pipeline layout gives way to the default split (None) when the layers
or pp/vpp change. Every error is one line naming the file and the key.

`scenario_from_megatron_args(text, base)` applies a Megatron command line
(workloads.megatron_args) to `base`: a complete line replaces model, plan and recipe (Megatron's
defaults for what it leaves out; from `base` only what a command line cannot say: the system,
the GPU count without launcher flags, vocab_size without --vocab-size, seq_len without
--seq-length); a line of changes changes only what it names. A model or recipe equal to the
base's or a catalog entry but for its name takes that name; anything else is named "megatron-args".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields, replace
from pathlib import Path
from typing import Any, get_type_hints

from topologies.systems import (SYSTEM_NAMES, SystemSpec, load_system, system_from_mapping,
                                system_nvlink_switch)
from workloads.megatron_args import MegatronImport, parse_megatron_args
from workloads.model_files import (MAX_LAYERS, YAML_SUFFIXES, Origin, bounded_layout, check_keys,
                                   extended, identity, load_model_file, model_from_mapping,
                                   read_yaml_mapping, show, typed_changes, typed_value)
from workloads.models import MODELS, ModelSpec
from workloads.parallelism import ParallelPlan, validate_plan
from workloads.recipe_files import load_recipe_file, recipe_from_mapping
from workloads.recipes import RECIPES, Recipe, recipe_with

from simulator.calibration import DEFAULT_PARAMS, CostParams, params_with
from simulator.scenario import WHAT_IF_FIELDS, Scenario, default_scenario

SCENARIO_KEYS = ("extends", "system", "model", "plan", "recipe", "domain_size", "failed_trays",
                 "calibration") + WHAT_IF_FIELDS
REQUIRED_KEYS = ("system", "model", "plan", "recipe")
PLAN_ALIASES = {"gpus": "num_gpus", "seq": "seq_len"}
PLAN_KEYS = tuple(f.name for f in fields(ParallelPlan)) + tuple(PLAN_ALIASES)
IMPORTED_NAME = "megatron-args"


def load_scenario_file(path: str | Path) -> Scenario:
    """A scenario from a .yaml/.yml scenario file (see the module docstring)."""
    return _load(Path(path), ())


def _load(path: Path, chain: tuple[str, ...]) -> Scenario:
    data = read_yaml_mapping(path)
    origin, chain = Origin(path), chain + (identity(path),)
    check_keys(data, SCENARIO_KEYS, origin)
    base = (extended(data["extends"], origin, chain, {"default": default_scenario()}, _load,
                     "scenario") if "extends" in data else None)
    missing = [key for key in REQUIRED_KEYS if base is None and key not in data]
    if missing:
        raise origin.error(f"missing key {missing[0]!r}: without extends, required are "
                           f"{', '.join(REQUIRED_KEYS)}")
    system = (_system(data["system"], origin, chain) if "system" in data
              else getattr(base, "system"))
    model = _entry(data, "model", base, origin, chain, MODELS, load_model_file,
                   model_from_mapping, YAML_SUFFIXES + (".json",))
    recipe = _entry(data, "recipe", base, origin, chain, RECIPES, load_recipe_file,
                    recipe_from_mapping, YAML_SUFFIXES)
    plan = _plan(data.get("plan", {}), base, model, origin.child("plan"))
    settings = dict(domain_size=_domain_size(data, base, system, origin),
                    failed_trays=_failed_trays(data, base, system, origin),
                    params=_calibration(data.get("calibration", {}),
                                        base.params if base else None,
                                        origin.child("calibration")),
                    **_what_ifs(data, base, origin))
    try:
        scenario = Scenario(system=system, model=model, plan=plan, recipe=recipe, **settings)
    except ValueError as error:
        raise origin.error(str(error)) from None
    try:
        _checked_plan(plan, model)
    except ValueError as error:
        raise origin.error(f"plan: {error}") from None
    return scenario


def _system(value: Any, origin: Origin, chain: tuple[str, ...]) -> SystemSpec:
    if isinstance(value, dict):
        return system_from_mapping(value, origin.path, chain, key="system")
    if not isinstance(value, str):
        raise origin.error(f"system={show(value)}: must be a catalog system "
                           f"({', '.join(SYSTEM_NAMES)}), a path to a .yaml file or a mapping")
    try:
        relative = value.endswith(YAML_SUFFIXES) and value not in SYSTEM_NAMES
        return load_system(str(origin.file(value)) if relative else value)
    except ValueError as error:
        raise origin.error(f"system: {error}") from None


def _entry(data: dict[str, Any], key: str, base: Scenario | None, origin: Origin,
           chain: tuple[str, ...], catalog: Mapping[str, Any], load_file: Callable[[Path], Any],
           from_mapping: Callable[..., Any], suffixes: tuple[str, ...]) -> Any:
    """The model or recipe: unchanged from the base, a catalog name, a file or a mapping."""
    if key not in data:
        return getattr(base, key)
    value, where = data[key], origin.child(key)
    if isinstance(value, dict):
        return from_mapping(value, where, chain)
    if isinstance(value, str) and value in catalog:
        return catalog[value]
    if isinstance(value, str) and value.endswith(suffixes):
        try:
            return load_file(origin.file(value))
        except ValueError as error:
            raise where.error(str(error)) from None
    raise where.error(f"{show(value)}: unknown {key}; known are {', '.join(sorted(catalog))}, "
                      f"a path to a {'/'.join(suffixes)} file, or a mapping")


def _plan(value: Any, base: Scenario | None, model: ModelSpec, origin: Origin) -> ParallelPlan:
    check_keys(value, PLAN_KEYS, origin)
    changes: dict[str, Any] = {}
    for key, item in value.items():
        name = PLAN_ALIASES.get(key, key)
        if name in changes:
            raise origin.error(f"{key}: {name} is given twice (as {name} and as an alias)")
        changes[name] = item
    values = typed_changes(ParallelPlan, changes, origin)
    try:
        if isinstance(values.get("layout"), str):
            bounded_layout(values["layout"])
        if base is not None:
            return _kept_layout(base.plan, values, base.model, model)
        missing = [f.name for f in fields(ParallelPlan)
                   if f.name not in values and f.default is MISSING]
        if missing:
            raise ValueError(f"missing key {missing[0]!r}: without extends, required are "
                             f"{', '.join(missing)}")
        return ParallelPlan(**values)
    except ValueError as error:
        raise origin.error(str(error)) from None


def _checked_plan(plan: ParallelPlan, model: ModelSpec) -> None:
    """validate_plan, once the layers and virtual stages it expands are bounded."""
    for what, size in (("num_layers+mtp_layers", model.num_layers + model.mtp_layers),
                       ("pp*vpp", plan.pp * plan.vpp)):
        if size > MAX_LAYERS:
            raise ValueError(f"{what}={size}: more than {MAX_LAYERS} are not simulated")
    validate_plan(plan, model)


def _kept_layout(old: ParallelPlan, changes: dict[str, Any], old_model: ModelSpec,
                 new_model: ModelSpec) -> ParallelPlan:
    """`old` with `changes`, less an inherited layout when the layers or pp/vpp changed."""
    new = replace(old, **changes)
    same = (old.pp, old.vpp, old_model.num_layers, old_model.mtp_layers) == \
        (new.pp, new.vpp, new_model.num_layers, new_model.mtp_layers)
    return new if same or "layout" in changes else replace(new, layout=None)


def _domain_size(data: dict[str, Any], base: Scenario | None, system: SystemSpec,
                 origin: Origin) -> int | None:
    if "domain_size" in data:
        size = typed_value(int | None, data["domain_size"], "domain_size", origin)
        if size is not None and not 0 < size <= system.gpus_per_domain:
            raise origin.error(f"domain_size={size}: must be null or an integer in "
                               f"1..{system.gpus_per_domain} (gpus_per_domain of {system.name})")
        return size  # type: ignore[no-any-return]
    return None if base is None else _domain_size_for(system, base.domain_size)


def _domain_size_for(system: SystemSpec, size: int | None) -> int | None:
    """`size` while it fits `system`'s NVLink domain, else None (whole domains)."""
    return size if size is not None and size <= system.gpus_per_domain else None


def _failed_trays(data: dict[str, Any], base: Scenario | None, system: SystemSpec,
                  origin: Origin) -> int:
    if "failed_trays" not in data:
        return 0 if base is None else base.failed_trays
    trays = typed_value(int, data["failed_trays"], "failed_trays", origin)
    limit = system_nvlink_switch(system).trays_per_rack
    if not 0 <= trays < limit:
        raise origin.error(f"failed_trays={trays}: must be an integer in 0..{limit - 1}")
    return trays  # type: ignore[no-any-return]


def _what_ifs(data: dict[str, Any], base: Scenario | None, origin: Origin) -> dict[str, Any]:
    """The what-if fields that the file gives (type-checked) or the base has."""
    hints = get_type_hints(Scenario)
    return {key: typed_value(hints[key], data[key], key, origin) if key in data
            else getattr(base, key) for key in WHAT_IF_FIELDS if key in data or base is not None}


def _calibration(value: Any, params: CostParams | None, origin: Origin) -> CostParams:
    """CostParams with each given field (or existing mapping entry) set; validated."""
    params = params or DEFAULT_PARAMS
    check_keys(value, tuple(f.name for f in fields(CostParams)), origin)
    for key, item in value.items():
        current = getattr(params, key)
        if isinstance(current, Mapping) and not isinstance(item, dict):
            raise origin.error(f"{key}={show(item)}: must be a mapping of "
                               f"{', '.join(current)} to numbers")
        entries = item.items() if isinstance(current, Mapping) else [("", item)]
        for entry, number in entries:
            name = f"{key}.{entry}" if entry else key
            if entry and entry not in current:
                raise origin.error(f"{name}: unknown key; known are {', '.join(current)}")
            number = typed_value(float, number, name, origin)
            try:
                params = params_with(params, name, number)
            except ValueError as error:
                raise origin.error(str(error)) from None
    return params


# --- Megatron command lines -------------------------------------------------------------------

def scenario_from_megatron_args(text: str, base: Scenario) -> tuple[Scenario, tuple[str, ...]]:
    """`base` with a Megatron command line applied (module docstring); second, every flag not
    simulated (with the reason) and every assumption made, one line each."""
    imported = parse_megatron_args(text)
    try:
        model, model_notes = _imported_model(imported, base.model)
        plan, plan_notes = _imported_plan(imported, base.plan, base.model, model)
        if imported.complete:
            recipe = Recipe(name=base.recipe.name, **imported.recipe_fields)
        else:
            recipe = recipe_with(base.recipe, **imported.recipe_fields)
        _checked_plan(plan, model)
    except ValueError as error:
        raise ValueError(f"megatron args: {error}") from None
    scenario = replace(base, model=model, plan=plan, recipe=_named(recipe, base.recipe, RECIPES))
    return scenario, imported.ignored + imported.notes + model_notes + plan_notes


def _named(spec: Any, base: Any, catalog: Mapping[str, Any]) -> Any:
    """The base or catalog entry `spec` equals but for the name, else `spec` as IMPORTED_NAME."""
    for known in (base, *catalog.values()):
        if replace(spec, name=known.name) == known:
            return known
    return replace(spec, name=IMPORTED_NAME)


def _imported_model(imported: MegatronImport, base: ModelSpec) -> tuple[ModelSpec, tuple[str, ...]]:
    changes = dict(imported.model_fields)
    notes: tuple[str, ...] = ()
    if not imported.complete:
        return _named(replace(base, **changes), base, MODELS), notes
    if "vocab_size" not in changes:
        changes["vocab_size"] = base.vocab_size
        notes = (f"vocab_size={base.vocab_size} kept from model {base.name!r}: no --vocab-size "
                 f"(Megatron reads it from the tokenizer)",)
    required = {f.name: getattr(base, f.name) for f in fields(ModelSpec)
                if f.default is MISSING and f.default_factory is MISSING}
    return _named(ModelSpec(**{**required, **changes, "name": base.name}), base, MODELS), notes


def _imported_plan(imported: MegatronImport, base: ParallelPlan, old_model: ModelSpec,
                   model: ModelSpec) -> tuple[ParallelPlan, tuple[str, ...]]:
    changes = dict(imported.plan_fields)
    notes: tuple[str, ...] = ()
    if imported.num_gpus is not None:
        changes["num_gpus"] = imported.num_gpus
    if not imported.complete:
        return _kept_layout(base, changes, old_model, model), notes
    changes.setdefault("num_gpus", base.num_gpus)
    if "seq_len" not in changes:
        changes["seq_len"] = base.seq_len
        notes = (f"seq_len={base.seq_len} kept from the base plan: no --seq-length",)
    if "gbs" not in changes:  # Megatron: micro batch x data-parallel size, one microbatch
        model_parallel = changes["tp"] * changes["cp"] * changes["pp"]
        changes["gbs"] = changes["mbs"] * max(1, changes["num_gpus"] // model_parallel)
    return ParallelPlan(**changes), notes
