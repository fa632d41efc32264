"""`key=value` settings that reach any field of a scenario (the CLI's --set, and sweeps).

Keys:
- `recipe.FIELD` (or a bare recipe field) and `calibration.FIELD[.KEY]` (cost parameters);
- `system.FIELD` (a whole field: `system.nic=connectx-7`) and `system.PART.FIELD[.KEY]`, one
  field of a part (gpu, nvlink_switch, nic, scale_out_switch; SI units, e.g.
  `system.nic.bandwidth_bytes_per_s=2e11`), which derives a part named "<part>-custom";
- `plan.FIELD` (or bare): num_gpus (or gpus), tp, pp, vpp, ep, etp, cp, mbs, gbs, seq_len (or
  seq), layout, dp_sharding; a changed pp or vpp resets the layout to the default split;
- `model.mtp_layers` (or bare `mtp_layers`, `mtp`), `domain_size`, `failed_trays`;
- asymmetric what-ifs (simulator.scenario.WHAT_IF_FIELDS): `straggler_gpu` (a GPU index or
  none), `straggler_slowdown`, `degraded_link` (nic:G or nvlink:G, or none),
  `degraded_link_bandwidth_fraction`;
- hardware what-ifs in the units datasheets use (HARDWARE_KEYS):
    nvlink_gbytes_per_s  NVLink GB/s per GPU per direction (GPU and switch ports together)
    nic_gbps             NIC line rate in Gb/s; the scale-out switch ports run at it too
    fabric               infiniband (ib) or ethernet: the catalog switch of that protocol
                         (quantum-x800, spectrum-x) at the current port speed
    oversubscription     leaf uplink oversubscription (= system.oversubscription)
    nvlink_domain_size   GPUs per NVLink domain, all used (gpus_per_domain and domain_size);
                         NVLink switch trays are added when the domain needs more ports
    nvlink_latency_us, nic_latency_us, switch_latency_us: one hop's latency;
    link_latency_us      all three at once

`apply_settings` applies several settings with the plan changes together, so that
`gpus=16, ep=8` does not stop at an invalid plan in between.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields, replace
from typing import Any, get_type_hints

from topologies.hardware import GB, GBIT, GPUSpec, NICSpec, NVLinkSwitchSpec, SwitchSpec
from topologies.systems import (SystemSpec, system_gpu, system_nic, system_nvlink_switch,
                                system_scale_out_switch, system_with)
from workloads.parallelism import ParallelPlan
from workloads.recipes import Recipe, parse_recipe_value, recipe_with

from simulator.calibration import CostParams, params_with
from simulator.scenario import WHAT_IF_FIELDS, Scenario, parse_what_if

Setter = Callable[[Scenario, str, str], Scenario]

RECIPE_FIELDS = tuple(f.name for f in fields(Recipe) if f.name != "name")
SYSTEM_FIELDS = tuple(f.name for f in fields(SystemSpec) if f.name != "name")
PLAN_FIELDS = tuple(f.name for f in fields(ParallelPlan))
PLAN_ALIASES = {"gpus": "num_gpus", "seq": "seq_len"}
SCENARIO_FIELDS = ("domain_size", "failed_trays")
MTP_KEYS = ("mtp_layers", "mtp")
PARTS: dict[str, tuple[type, Callable[[SystemSpec], Any]]] = {
    "gpu": (GPUSpec, system_gpu), "nvlink_switch": (NVLinkSwitchSpec, system_nvlink_switch),
    "nic": (NICSpec, system_nic), "scale_out_switch": (SwitchSpec, system_scale_out_switch)}
FABRIC_NAMES = {"infiniband": "infiniband", "ib": "infiniband", "ethernet": "ethernet"}
FABRIC_SWITCHES = {"infiniband": "quantum-x800", "ethernet": "spectrum-x"}
MICROSECONDS_PER_S = 1e6
TRUE_WORDS, FALSE_WORDS = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _number(key: str, text: str, kind: type) -> Any:
    try:
        return kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"{key}={text!r}: must be {what}") from None


def _bounded(key: str, text: str, low: float, strict: bool) -> float:
    """A finite float > low (strict) or >= low."""
    value = _number(key, text, float)
    if not math.isfinite(value) or value < low or (strict and value == low):
        raise ValueError(f"{key}={text!r}: must be a number {'>' if strict else '>='} {low:g}")
    return value  # type: ignore[no-any-return]


def _flag(key: str, text: str) -> bool:
    if text.lower() in TRUE_WORDS + FALSE_WORDS:
        return text.lower() in TRUE_WORDS
    raise ValueError(f"{key}={text!r}: must be true or false")


def _typed(key: str, hint: Any, text: str) -> Any:
    if hint is bool:
        return _flag(key, text)
    if hint in (int, float):
        return _number(key, text, hint)
    return text


# --- parts of a system --------------------------------------------------------------------------

def with_part(system: SystemSpec, part: str, **changes: Any) -> SystemSpec:
    """`system` whose `part` has `changes`: a spec named "<part>-custom" unless nothing differs."""
    spec = PARTS[part][1](system)
    changed = replace(spec, **changes)
    if changed == spec:
        return system
    name = spec.name if spec.name.endswith("-custom") else f"{spec.name}-custom"
    return system_with(system, **{part: replace(changed, name=name)})


def _part_field(key: str) -> tuple[str, str, str] | None:
    """(part, field, mapping key) of `system.PART.FIELD[.KEY]`, or None."""
    section, _, rest = key.partition(".")
    part, _, rest = rest.partition(".")
    field, _, entry = rest.partition(".")
    if section != "system" or part not in PARTS:
        return None
    hints = get_type_hints(PARTS[part][0])
    if field == "name" or field not in hints or bool(entry) != _is_mapping(hints[field]):
        return None
    return part, field, entry


def _is_mapping(hint: Any) -> bool:
    return getattr(hint, "__origin__", None) is Mapping


def _set_part_field(scenario: Scenario, key: str, text: str) -> Scenario:
    part, field, entry = _part_field(key) or ("", "", "")
    hint = get_type_hints(PARTS[part][0])[field]
    if entry:
        current = dict(getattr(PARTS[part][1](scenario.system), field))
        value: Any = {**current, entry: _number(key, text, float)}
    else:
        value = _typed(key, hint, text)
    return replace(scenario, system=with_part(scenario.system, part, **{field: value}))


# --- hardware what-ifs --------------------------------------------------------------------------

def _nvlink_bandwidth(scenario: Scenario, key: str, text: str) -> Scenario:
    bytes_per_s = _bounded(key, text, 0, strict=True) * GB
    links = system_gpu(scenario.system).nvlink_links
    system = with_part(scenario.system, "gpu", nvlink_bandwidth_bytes_per_s=bytes_per_s)
    system = with_part(system, "nvlink_switch", port_bandwidth_bytes_per_s=bytes_per_s / links)
    return replace(scenario, system=system)


def _nic_speed(scenario: Scenario, key: str, text: str) -> Scenario:
    bytes_per_s = _bounded(key, text, 0, strict=True) * GBIT
    system = with_part(scenario.system, "nic", bandwidth_bytes_per_s=bytes_per_s)
    system = with_part(system, "scale_out_switch", port_bandwidth_bytes_per_s=bytes_per_s)
    return replace(scenario, system=system)


def _fabric(scenario: Scenario, key: str, text: str) -> Scenario:
    protocol = FABRIC_NAMES.get(text.lower())
    if protocol is None:
        raise ValueError(f"{key}={text!r}: must be one of {', '.join(FABRIC_NAMES)}")
    current = system_scale_out_switch(scenario.system)
    if current.protocol == protocol:
        return scenario
    system = system_with(scenario.system, scale_out_switch=FABRIC_SWITCHES[protocol])
    system = with_part(system, "scale_out_switch",
                       port_bandwidth_bytes_per_s=current.port_bandwidth_bytes_per_s)
    return replace(scenario, system=system)


def _oversubscription(scenario: Scenario, key: str, text: str) -> Scenario:
    value = _bounded(key, text, 1, strict=False)
    return replace(scenario, system=system_with(scenario.system, oversubscription=value))


def _nvlink_domain(scenario: Scenario, key: str, text: str) -> Scenario:
    size = _number(key, text, int)
    if size < 1:
        raise ValueError(f"{key}={text!r}: must be an integer >= 1")
    gpu, switch = system_gpu(scenario.system), system_nvlink_switch(scenario.system)
    needed = math.ceil(size * gpu.nvlink_links / (switch.ports * switch.chips_per_tray))
    system = with_part(scenario.system, "nvlink_switch",
                       trays_per_rack=max(switch.trays_per_rack, needed))
    system = system_with(system, gpus_per_domain=size)
    return replace(scenario, system=system, domain_size=size)


def _latency(*targets: tuple[str, str]) -> Setter:
    """A setter of one hop latency in µs for each (part, field) of `targets`."""
    def setter(scenario: Scenario, key: str, text: str) -> Scenario:
        seconds = _bounded(key, text, 0, strict=False) / MICROSECONDS_PER_S
        system = scenario.system
        for part, field in targets:
            system = with_part(system, part, **{field: seconds})
        return replace(scenario, system=system)
    return setter


NVLINK_HOP = ("nvlink_switch", "hop_latency_s")
NIC_HOP = ("nic", "latency_s")
SWITCH_HOP = ("scale_out_switch", "hop_latency_s")
HARDWARE_KEYS: dict[str, Setter] = {
    "nvlink_gbytes_per_s": _nvlink_bandwidth, "nic_gbps": _nic_speed, "fabric": _fabric,
    "oversubscription": _oversubscription, "nvlink_domain_size": _nvlink_domain,
    "nvlink_latency_us": _latency(NVLINK_HOP), "nic_latency_us": _latency(NIC_HOP),
    "switch_latency_us": _latency(SWITCH_HOP),
    "link_latency_us": _latency(NVLINK_HOP, NIC_HOP, SWITCH_HOP)}


# --- the other sections -------------------------------------------------------------------------

def _calibration_value(params: CostParams, key: str, text: str) -> CostParams:
    """`params` with `calibration.FIELD[.KEY]` = `text` (a number)."""
    return params_with(params, key.partition(".")[2], _number(key, text, float))


def _set_calibration(scenario: Scenario, key: str, text: str) -> Scenario:
    return replace(scenario, params=_calibration_value(scenario.params, key, text))


def _set_system(scenario: Scenario, key: str, text: str) -> Scenario:
    field = key.partition(".")[2]
    kind = {f.name: f.type for f in fields(SystemSpec)}[field]
    value = text
    if kind in ("int", int, "float", float):
        value = _number(key, text, int if kind in ("int", int) else float)
    return replace(scenario, system=system_with(scenario.system, **{field: value}))


def _set_mtp(scenario: Scenario, key: str, text: str) -> Scenario:
    return replace(scenario, model=scenario.model.with_mtp(_number(key, text, int)))


def _set_scenario_field(scenario: Scenario, key: str, text: str) -> Scenario:
    return replace(scenario, **{key: _number(key, text, int)})


def _plan_field(key: str) -> str | None:
    section, _, field = key.rpartition(".")
    field = PLAN_ALIASES.get(field, field)
    return field if section in ("", "plan") and field in PLAN_FIELDS else None


def _recipe_field(key: str) -> str | None:
    section, _, field = key.rpartition(".")
    return field if section in ("", "recipe") and field in RECIPE_FIELDS else None


def _plan_value(key: str, field: str, text: str) -> Any:
    if field == "layout":
        return None if text.lower() in ("", "default") else text
    return text if field == "dp_sharding" else _number(key, text, int)


def _new_plan(plan: ParallelPlan, changes: dict[str, Any]) -> ParallelPlan:
    """`plan` with `changes`; a changed pp or vpp drops the layout unless one is given."""
    if "layout" not in changes and any(
            changes.get(field, getattr(plan, field)) != getattr(plan, field)
            for field in ("pp", "vpp")):
        changes = {**changes, "layout": None}
    return replace(plan, **changes)


def _setter(key: str) -> Setter:
    """The setter of a non-plan key; a one-line error naming the known keys."""
    section, _, field = key.partition(".") if "." in key else ("", "", key)
    if section == "calibration" and field:
        return _set_calibration
    if section == "" and field in HARDWARE_KEYS:
        return HARDWARE_KEYS[field]
    if section == "system" and field in SYSTEM_FIELDS:
        return _set_system
    if _part_field(key) is not None:
        return _set_part_field
    if section in ("", "model") and field in MTP_KEYS:
        return _set_mtp
    if section == "" and field in SCENARIO_FIELDS:
        return _set_scenario_field
    raise ValueError(f"--set {key!r}: unknown key; known are {known_keys()}")


def known_keys() -> str:
    """Every key, as the one-line error for an unknown key lists them."""
    parts = ",".join(f"{part}.FIELD" for part in PARTS)
    return ", ".join([f"recipe.{{{','.join(RECIPE_FIELDS)}}}",
                      f"system.{{{','.join(SYSTEM_FIELDS)}}}", f"system.{{{parts}}}",
                      f"plan.{{{','.join(PLAN_FIELDS + tuple(PLAN_ALIASES))}}}",
                      "mtp_layers", "domain_size", "failed_trays", *WHAT_IF_FIELDS, *HARDWARE_KEYS,
                      "calibration.FIELD[.KEY]"])


def check_key(key: str) -> None:
    """Raise the one-line error `apply_setting` gives for an unknown key."""
    if _plan_field(key) is None and _recipe_field(key) is None and key not in WHAT_IF_FIELDS:
        _setter(key)


def _split(setting: str) -> tuple[str, str]:
    key, sep, text = setting.partition("=")
    key, text = key.strip(), text.strip()
    if not sep or not key:
        raise ValueError(f"--set {setting!r}: expected key=value")
    return key, text


def _classified(settings: Iterable[str]) -> tuple[dict[str, Any], dict[str, Any],
                                                  dict[str, Any], list[tuple[Setter, str, str]]]:
    """`settings` parsed and sorted: plan fields, what-ifs, recipe fields and the other keys
    (with their setters); a one-line error for a bad key or a plan, what-if or recipe value."""
    plan: dict[str, Any] = {}
    what_ifs: dict[str, Any] = {}
    recipe: dict[str, Any] = {}
    others = []
    for key, text in map(_split, settings):
        field, recipe_field = _plan_field(key), _recipe_field(key)
        if field is not None:
            plan[field] = _plan_value(key, field, text)
        elif key in WHAT_IF_FIELDS:
            what_ifs[key] = parse_what_if(key, text)
        elif recipe_field is not None:
            recipe[recipe_field] = parse_recipe_value(recipe_field, text)
        else:
            others.append((_setter(key), key, text))
    return plan, what_ifs, recipe, others


def plan_and_recipe_changes(settings: Iterable[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The plan fields and the recipe fields that `settings` set, parsed (what --auto-plan
    keeps while it chooses the rest of the plan)."""
    plan, _, recipe, _ = _classified(settings)
    return plan, recipe


def apply_settings(scenario: Scenario, settings: Iterable[str]) -> Scenario:
    """`scenario` with every `key=value` applied: first the plan keys and the what-ifs that
    name GPUs, in one change (so `gpus=512, straggler_gpu=300` is valid from 256 GPUs), then
    the recipe fields, in one change (so `a2a_overlap=false, shared_expert_overlap=true` is
    valid in either order), then the others in order."""
    plan, what_ifs, recipe, others = _classified(settings)
    if plan or what_ifs:
        scenario = replace(scenario, plan=_new_plan(scenario.plan, plan), **what_ifs)
    if recipe:
        scenario = replace(scenario, recipe=recipe_with(scenario.recipe, **recipe))
    for setter, key, text in others:
        scenario = setter(scenario, key, text)
    return scenario


def calibration_settings(params: CostParams, settings: Iterable[str]) -> CostParams:
    """`params` with every `calibration.FIELD[.KEY]=value` applied in order (`validate --set`,
    which keeps each row's own plan, recipe and system); a one-line error for any other key."""
    for key, text in map(_split, settings):
        section, _, field = key.partition(".")
        if section != "calibration" or not field:
            raise ValueError(f"--set {key}: validate takes calibration.FIELD[.KEY] only (each "
                             f"row keeps its own plan, recipe and system; `moesim run --row` "
                             f"takes the others)")
        params = _calibration_value(params, key, text)
    return params


def apply_setting(scenario: Scenario, setting: str) -> Scenario:
    """`scenario` with one `key=value` applied; a one-line error for a bad key or value."""
    return apply_settings(scenario, [setting])
