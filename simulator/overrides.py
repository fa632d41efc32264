"""`key=value` settings that reach any field of a scenario (the CLI's --set, later sweeps).

Keys: `recipe.FIELD` (or a bare recipe field), `system.FIELD`, `plan.FIELD` (or bare
`layout`, `dp_sharding`), `model.mtp_layers` (or bare `mtp_layers`), `domain_size`,
`failed_trays`, and `calibration.FIELD[.KEY]` for the cost parameters.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from topologies.systems import SystemSpec, system_with
from workloads.recipes import Recipe, parse_recipe_value, recipe_with

from simulator.calibration import params_with
from simulator.scenario import Scenario

RECIPE_FIELDS = tuple(f.name for f in fields(Recipe) if f.name != "name")
SYSTEM_FIELDS = tuple(f.name for f in fields(SystemSpec) if f.name != "name")
PLAN_FIELDS = ("layout", "dp_sharding")
SCENARIO_FIELDS = ("domain_size", "failed_trays")


def _number(key: str, text: str, kind: type) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{key}={text!r}: must be a {kind.__name__}") from None


def _system_value(field: str, text: str) -> Any:
    kind = {f.name: f.type for f in fields(SystemSpec)}[field]
    if kind in ("int", int):
        return _number(f"system.{field}", text, int)
    if kind in ("float", float):
        return _number(f"system.{field}", text, float)
    return text


def _known_keys() -> str:
    return ", ".join([f"recipe.{{{','.join(RECIPE_FIELDS)}}}",
                      f"system.{{{','.join(SYSTEM_FIELDS)}}}", "plan.layout", "plan.dp_sharding",
                      "mtp_layers", "domain_size", "failed_trays", "calibration.FIELD[.KEY]"])


def apply_setting(scenario: Scenario, setting: str) -> Scenario:
    """`scenario` with one `key=value` applied; a one-line error for a bad key or value."""
    key, sep, text = setting.partition("=")
    key, text = key.strip(), text.strip()
    if not sep or not key:
        raise ValueError(f"--set {setting!r}: expected key=value")
    section, _, field = key.partition(".") if "." in key else ("", "", key)
    if section == "calibration":
        return replace(scenario, params=params_with(scenario.params, field,
                                                    _number(key, text, float)))
    if section in ("", "recipe") and field in RECIPE_FIELDS:
        value = parse_recipe_value(field, text)
        return replace(scenario, recipe=recipe_with(scenario.recipe, **{field: value}))
    if section == "system" and field in SYSTEM_FIELDS:
        return replace(scenario, system=system_with(scenario.system,
                                                    **{field: _system_value(field, text)}))
    if section in ("", "plan") and field in PLAN_FIELDS:
        change: dict[str, Any] = {
            field: None if field == "layout" and text.lower() in ("", "default") else text}
        return replace(scenario, plan=replace(scenario.plan, **change))
    if section in ("", "model") and field == "mtp_layers":
        return replace(scenario, model=scenario.model.with_mtp(_number(key, text, int)))
    if section == "" and field in SCENARIO_FIELDS:
        return replace(scenario, **{field: _number(key, text, int)})
    raise ValueError(f"--set {key!r}: unknown key; known are {_known_keys()}")
