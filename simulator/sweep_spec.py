"""Sweep files: a base scenario and the points of a sweep, each with a stable id.

A sweep file (YAML, read with a safe loader) maps:

    base:    optional: a scenario file, or a mapping of sweep keys with optional
             `scenario: FILE` (applied first) and `set: [key=value, ...]`
    grid:    {key: [value, ...], ...}: every combination, the first key slowest
    points:  [{key: value, ...}, ...]: exactly these points   (give grid or points)

Sweep keys: `system`, `model`, `recipe` (catalog names or files, as `moesim run` takes them) and
every `--set` key of simulator.overrides (recipe and system fields, part fields, plan keys,
hardware what-ifs such as nic_gbps, fabric, nvlink_domain_size, calibration). A point's
scenario is the base with the point's system, model and recipe, then its other settings (the
plan keys together); a changed system keeps the domain size while it fits (else takes the
system's recipe domain size, as `--system` does) and a changed model takes the default
pipeline layout. File values are relative to the sweep file.

A point's id is the first 12 hex digits of the SHA-256 of the base (its settings and its
scenario file's text) and the point's settings, so a rerun of an unchanged sweep finds the
points it already ran.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from topologies.systems import load_system
from workloads.model_files import Origin, check_keys, load_model_file, read_yaml_mapping, show
from workloads.models import model_spec
from workloads.recipe_files import load_recipe_file
from workloads.recipes import recipe

from simulator.overrides import apply_settings, check_key, known_keys
from simulator.planner import recipe_for
from simulator.scenario import Scenario, default_domain_size, default_scenario, with_model
from simulator.scenario_files import load_scenario_file

FILE_KEYS = ("base", "grid", "points")
BASE_KEYS = ("scenario", "set")
PART_KEYS = ("system", "model", "recipe")
FILE_SUFFIXES = (".yaml", ".yml", ".json")
MAX_POINTS = 100_000
ID_DIGITS = 12

Setting = tuple[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepPoint:
    """One point: its id and its settings as the sweep file gives them, in the file's order."""

    point_id: str
    settings: tuple[Setting, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepSpec:
    """A whole sweep: where its files are, the base scenario, the swept keys and the points."""

    name: str
    folder: str
    base_file: str | None
    base_settings: tuple[Setting, ...]
    keys: tuple[str, ...]
    points: tuple[SweepPoint, ...]


def setting_text(value: Any) -> str:
    """A setting's value as `--set` text: true/false, repr of a float, the string itself."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def load_sweep(path: str | Path) -> SweepSpec:
    """The sweep in a YAML file (see the module docstring); one-line errors name the key."""
    path = Path(path)
    return sweep_from_mapping(read_yaml_mapping(path), Origin(path))


def sweep_from_mapping(data: Any, origin: Origin) -> SweepSpec:
    """A sweep from a mapping read from `origin` (its folder anchors relative file values)."""
    check_keys(data, FILE_KEYS, origin)
    if ("grid" in data) == ("points" in data):
        raise origin.error("give exactly one of grid and points")
    base_file, base_settings = _base(data.get("base"), origin.child("base"))
    keys, combos = (_grid(data["grid"], origin.child("grid")) if "grid" in data
                    else _points(data["points"], origin.child("points")))
    try:
        base_id = _base_identity(base_file, base_settings)
    except ValueError as error:
        raise origin.child("base").error(str(error)) from None
    points = tuple(SweepPoint(point_id=_point_id(base_id, combo), settings=combo)
                   for combo in combos)
    _check_unique(points, origin)
    return SweepSpec(name=origin.path.stem, folder=str(origin.path.parent), base_file=base_file,
                     base_settings=base_settings, keys=keys, points=points)


def _value(value: Any, origin: Origin) -> Any:
    """A setting's value: a string, a finite number or true/false."""
    if isinstance(value, float) and not math.isfinite(value):
        raise origin.error(f"{show(value)}: must be a finite number")
    if not isinstance(value, (str, int, float, bool)):
        raise origin.error(f"{show(value)}: must be a string, a number or true/false")
    return value


def _key(key: Any, origin: Origin) -> str:
    if not isinstance(key, str) or not (key in PART_KEYS or _known(key)):
        raise origin.error(f"unknown key {show(key)}: known are {', '.join(PART_KEYS)}, "
                           f"{known_keys()}")
    return key


def _known(key: str) -> bool:
    try:
        check_key(key)
    except ValueError:
        return False
    return True


def _base(value: Any, origin: Origin) -> tuple[str | None, tuple[Setting, ...]]:
    """(scenario file, settings) of the base: a file path or a mapping of sweep keys."""
    if value is None:
        return None, ()
    if isinstance(value, str):
        return str(origin.file(value)), ()
    if not isinstance(value, dict):
        raise origin.error(f"{show(value)}: must be a scenario file or a mapping of sweep keys")
    scenario = value.get("scenario")
    if scenario is not None and not isinstance(scenario, str):
        raise origin.child("scenario").error(f"{show(scenario)}: must be a scenario file path")
    settings = [(_key(key, origin), _value(item, origin.child(key)))
                for key, item in value.items() if key not in BASE_KEYS]
    settings.extend(_set_list(value.get("set", []), origin.child("set")))
    return (str(origin.file(scenario)) if scenario else None), tuple(settings)


def _set_list(items: Any, origin: Origin) -> list[Setting]:
    if not isinstance(items, list):
        raise origin.error(f"{show(items)}: must be a list of key=value strings")
    settings = []
    for item in items:
        key, sep, text = item.partition("=") if isinstance(item, str) else ("", "", "")
        if not sep:
            raise origin.error(f"{show(item)}: expected key=value")
        settings.append((_key(key.strip(), origin), text.strip()))
    return settings


def _grid(data: Any, origin: Origin) -> tuple[tuple[str, ...], list[tuple[Setting, ...]]]:
    if not isinstance(data, dict) or not data:
        raise origin.error(f"{show(data)}: must be a mapping of keys to lists of values")
    keys = tuple(_key(key, origin) for key in data)
    columns = []
    for key in keys:
        values = data[key]
        if not isinstance(values, list) or not values:
            raise origin.child(key).error(f"{show(values)}: must be a non-empty list of values")
        columns.append([(key, _value(item, origin.child(key))) for item in values])
    size = math.prod(len(column) for column in columns)
    if size > MAX_POINTS:
        raise origin.error(f"{size} points: more than {MAX_POINTS} are not run in one sweep")
    return keys, list(itertools.product(*columns))


def _points(data: Any, origin: Origin) -> tuple[tuple[str, ...], list[tuple[Setting, ...]]]:
    if not isinstance(data, list) or not data or len(data) > MAX_POINTS:
        raise origin.error(f"must be a list of 1 to {MAX_POINTS} mappings of keys to values")
    combos: list[tuple[Setting, ...]] = []
    keys: dict[str, None] = {}
    for number, point in enumerate(data):
        where = origin.child(str(number))
        if not isinstance(point, dict) or not point:
            raise where.error(f"{show(point)}: must be a mapping of keys to values")
        combos.append(tuple((_key(key, where), _value(item, where.child(key)))
                            for key, item in point.items()))
        keys.update(dict.fromkeys(point))
    return tuple(keys), combos


def _base_identity(base_file: str | None, settings: tuple[Setting, ...]) -> str:
    text = _file_text(base_file) if base_file is not None else ""
    return json.dumps({"scenario_sha256": hashlib.sha256(text.encode()).hexdigest(),
                       "settings": settings})


def _file_text(path: str) -> str:
    """The text of the base scenario file (its hash enters every point id)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, ValueError) as error:
        detail = getattr(error, "strerror", None) or " ".join(str(error).split())
        raise ValueError(f"{path}: cannot read file: {detail}") from None


def _point_id(base_identity: str, settings: tuple[Setting, ...]) -> str:
    text = json.dumps({"base": base_identity, "point": settings})
    return hashlib.sha256(text.encode()).hexdigest()[:ID_DIGITS]


def _check_unique(points: tuple[SweepPoint, ...], origin: Origin) -> None:
    seen: dict[str, int] = {}
    for number, point in enumerate(points):
        if point.point_id in seen:
            raise origin.error(f"points {seen[point.point_id]} and {number} are the same "
                               f"({dict(point.settings)})")
        seen[point.point_id] = number


# --- scenarios ----------------------------------------------------------------------------------

def _file_or_name(value: str, folder: str) -> str:
    return str(Path(folder) / value) if value.endswith(FILE_SUFFIXES) else value


def _with_part(scenario: Scenario, key: str, value: str, folder: str) -> Scenario:
    """The scenario with another system, model or recipe, as the run flags change them."""
    name = _file_or_name(value, folder)
    if key == "system":
        system, size = load_system(name), scenario.domain_size
        fits = size is not None and size <= system.gpus_per_domain
        return replace(scenario, system=system,
                       domain_size=size if fits else default_domain_size(system))
    if key == "model":
        model = load_model_file(name) if value.endswith(FILE_SUFFIXES) else model_spec(name)
        return with_model(scenario, model)
    chosen = load_recipe_file(name) if value.endswith(FILE_SUFFIXES) else recipe(name)
    return replace(scenario, recipe=chosen)


def scenario_with(scenario: Scenario, settings: tuple[Setting, ...], folder: str) -> Scenario:
    """`scenario` with the settings: system, model and recipe first, then the others. A
    block-scaled recipe (MXFP8, NVFP4) put on Hopper, or a Hopper system given one, runs in
    FP8 with per-tensor scaling unless the point sets its precision (as `moesim run`)."""
    for part in PART_KEYS:
        for key, value in settings:
            if key == part:
                scenario = _with_part(scenario, key, setting_text(value), folder)
    keys = {key for key, _ in settings}
    if keys & {"system", "recipe"} and "precision" not in keys:
        scenario = replace(scenario, recipe=recipe_for(scenario.system, scenario.recipe))
    return apply_settings(scenario, [f"{key}={setting_text(value)}" for key, value in settings
                                     if key not in PART_KEYS])


def base_scenario(spec: SweepSpec) -> Scenario:
    """The scenario every point starts from: the file (or the default study) and the base keys."""
    start = load_scenario_file(spec.base_file) if spec.base_file else default_scenario()
    return scenario_with(start, spec.base_settings, spec.folder)
