"""Named systems: which GPU, NVLink switch, NIC and scale-out fabric a cluster is built from.

A SystemSpec names catalog parts (topologies.hardware) plus the wiring parameters. The catalog
lives as YAML in topologies/systems/NAME.yaml, read with yaml.safe_load only; a user may also
pass a path to their own .yaml file. A file may say `extends: NAME-or-PATH` (a catalog system,
or another file relative to this one) and give only the keys it changes.

A part (gpu, nvlink_switch, nic, scale_out_switch) is a catalog name, or a mapping that derives
a spec of its own: `gpu: {extends: gb300, nvlink_bandwidth_bytes_per_s: 1.8e12}`. The part's
`extends` defaults to the part of the system being extended, its `name` to "<base>-custom"
(a system's to the file's stem) unless nothing differs from the base;
a peak_flops_per_s mapping is merged key by key; without any base every field is required.
The SystemSpec then carries that spec itself, so it stays frozen, hashable and complete in
itself; read parts through system_gpu / system_nvlink_switch / system_nic /
system_scale_out_switch, which also resolve catalog names. An NVLink domain runs at
min(GPU NVLink bandwidth, links x switch port bandwidth) (topologies.builders), so a faster GPU
NVLink needs a faster switch port too. Float fields accept numeric strings (PyYAML reads 1.8e12,
without a sign in the exponent, as a string).

Routing of the scale-out fabric (optional keys): `routing: adaptive` (the default) spreads
traffic over the equal-cost uplinks by load, which the fluid network's aggregated links model
exactly; it needs a switch with adaptive_routing (every catalog switch has it, and NVIDIA's
subnet manager and NCCL turn it on by default on InfiniBand). `routing: ecmp` pins each queue
pair to one uplink by a static hash; a rank-to-rank connection uses `ecmp_qps_per_connection`
QPs (NCCL_IB_QPS_PER_CONNECTION: "useful on multi-level fabrics which need multiple queue
pairs to have good routing entropy", 1 to 128, default 1; NCCL env docs). See simulator.network
for what hashing costs.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_origin, get_type_hints

import yaml

from topologies.hardware import (GPUSpec, NICSpec, NVLinkSwitchSpec, SwitchSpec, gpu_spec,
                                 nic_spec, nvlink_switch_spec, switch_spec)

SYSTEMS_DIR = Path(__file__).parent / "systems"
SYSTEM_NAMES: tuple[str, ...] = tuple(sorted(path.stem for path in SYSTEMS_DIR.glob("*.yaml")))
MAX_EXTENDS_DEPTH = 16
ROUTINGS = ("adaptive", "ecmp")
MAX_QPS_PER_CONNECTION = 128  # NCCL_IB_QPS_PER_CONNECTION accepts 1..128 (NCCL env docs)
_PARTS: dict[str, tuple[type, Callable[[str], Any]]] = {
    "gpu": (GPUSpec, gpu_spec), "nvlink_switch": (NVLinkSwitchSpec, nvlink_switch_spec),
    "nic": (NICSpec, nic_spec), "scale_out_switch": (SwitchSpec, switch_spec)}


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemSpec:
    """A cluster design: parts (catalog names or specs of their own) and how they are wired."""

    name: str
    gpu: str | GPUSpec
    gpus_per_domain: int
    nvlink_switch: str | NVLinkSwitchSpec
    nic: str | NICSpec
    scale_out_switch: str | SwitchSpec
    tiers: int
    oversubscription: float
    rails: int
    routing: str = "adaptive"
    ecmp_qps_per_connection: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"system: name must be a non-empty string, got {self.name!r}")
        owner = f"system '{self.name}'"
        for key in _PARTS:
            _part_spec(key, getattr(self, key))
        for key in ("gpus_per_domain", "rails"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{owner}: {key} must be a positive int, got {value!r}")
        if isinstance(self.tiers, bool) or self.tiers not in (2, 3):
            raise ValueError(f"{owner}: tiers must be 2 or 3, got {self.tiers!r}")
        if isinstance(self.oversubscription, bool) or not isinstance(
            self.oversubscription, (int, float)
        ) or not (math.isfinite(self.oversubscription) and self.oversubscription >= 1):
            raise ValueError(f"{owner}: oversubscription must be a number >= 1, "
                             f"got {self.oversubscription!r}")
        _check_routing(owner, self.routing, self.ecmp_qps_per_connection,
                       system_scale_out_switch(self))


def _check_routing(owner: str, routing: Any, qps: Any, switch: SwitchSpec) -> None:
    if routing not in ROUTINGS:
        raise ValueError(f"{owner}: routing must be one of {', '.join(ROUTINGS)}, "
                         f"got {routing!r}")
    if routing == "adaptive" and not switch.adaptive_routing:
        raise ValueError(f"{owner}: routing='adaptive' needs a scale_out_switch with "
                         f"adaptive_routing; {switch.name!r} has none (set routing to ecmp)")
    if isinstance(qps, bool) or not isinstance(qps, int) or not (
        1 <= qps <= MAX_QPS_PER_CONNECTION
    ):
        raise ValueError(f"{owner}: ecmp_qps_per_connection must be an int in "
                         f"1..{MAX_QPS_PER_CONNECTION}, got {qps!r}")


SYSTEM_KEYS = tuple(field.name for field in dataclasses.fields(SystemSpec))
REQUIRED_KEYS = tuple(field.name for field in dataclasses.fields(SystemSpec)
                      if field.default is dataclasses.MISSING)
FILE_KEYS = ("extends",) + SYSTEM_KEYS


def _part_spec(key: str, value: Any) -> Any:
    """The spec a part field stands for: its own spec, or the catalog entry it names."""
    kind, lookup = _PARTS[key]
    if isinstance(value, kind):
        return value
    if isinstance(value, str) and value:
        return lookup(value)
    raise ValueError(f"system: {key} must be a catalog name or a {kind.__name__}, "
                     f"got {value!r}")


def system_gpu(system: SystemSpec) -> GPUSpec:
    """The system's GPU spec (read parts through these, not through the catalog lookups)."""
    return _part_spec("gpu", system.gpu)  # type: ignore[no-any-return]


def system_nvlink_switch(system: SystemSpec) -> NVLinkSwitchSpec:
    return _part_spec("nvlink_switch", system.nvlink_switch)  # type: ignore[no-any-return]


def system_nic(system: SystemSpec) -> NICSpec:
    return _part_spec("nic", system.nic)  # type: ignore[no-any-return]


def system_scale_out_switch(system: SystemSpec) -> SwitchSpec:
    return _part_spec("scale_out_switch", system.scale_out_switch)  # type: ignore[no-any-return]


def load_system(name_or_path: str) -> SystemSpec:
    """A catalog system by name (see SYSTEM_NAMES) or a system read from a .yaml file."""
    return _load_system(_system_file(name_or_path, Path()), ())


def _system_file(name_or_path: Any, folder: Path) -> Path:
    if isinstance(name_or_path, str) and name_or_path in SYSTEM_NAMES:
        return SYSTEMS_DIR / f"{name_or_path}.yaml"
    if isinstance(name_or_path, str) and name_or_path.endswith((".yaml", ".yml")):
        return folder / name_or_path
    raise ValueError(f"unknown system {name_or_path!r}: known are {', '.join(SYSTEM_NAMES)} "
                     "(or give a path to a .yaml file)")


def _load_system(path: Path, chain: tuple[str, ...]) -> SystemSpec:
    try:
        data = _read_yaml(path)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return system_from_mapping(data, path, chain + (_identity(path),))


def _identity(path: Path) -> str:
    return os.path.normpath(os.path.abspath(path))


def _read_yaml(path: Path) -> Any:
    """The safe_load-ed content of a file; any OS or YAML error becomes a one-line ValueError."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError) as error:  # ValueError: not UTF-8, a NUL in the path
        detail = getattr(error, "strerror", None) or " ".join(str(error).split())
        raise ValueError(f"cannot read file: {detail}") from None
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, ValueError) as error:  # ValueError: e.g. a timestamp out of range
        detail = " ".join(str(error).split())
        raise ValueError(f"not a plain YAML mapping (yaml.safe_load: {detail})") from None


def system_from_mapping(data: Any, source: Path, chain: tuple[str, ...] = (),
                        key: str = "") -> SystemSpec:
    """A system from a mapping read from file `source` (under `key`; "" = the whole file);
    relative `extends` paths start at the file's folder, `chain` holds the files above."""
    try:
        return _system_from_mapping(data, source, chain, key)
    except ValueError as error:
        raise ValueError(f"{source}: {key}: {error}" if key else f"{source}: {error}") from None


def _system_from_mapping(data: Any, source: Path, chain: tuple[str, ...],
                         key: str) -> SystemSpec:
    """Check keys, resolve `extends` and the parts, and build the spec (which checks values)."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a mapping of {', '.join(SYSTEM_KEYS)}, "
                         f"got {type(data).__name__}")
    unknown = [item for item in data if item not in FILE_KEYS]
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r}: allowed are {', '.join(FILE_KEYS)}")
    base = _extended(data["extends"], source, chain) if "extends" in data else None
    changes = {item: value for item, value in data.items() if item != "extends"}
    for part in _PARTS:
        if part in changes:
            changes[part] = _part(part, changes[part], getattr(base, part, None))
    if "oversubscription" in changes:
        changes["oversubscription"] = _number("oversubscription", changes["oversubscription"])
    if base is None:
        missing = [item for item in REQUIRED_KEYS if item not in changes]
        if missing:
            raise ValueError(f"missing key {missing[0]!r}: required are "
                             f"{', '.join(REQUIRED_KEYS)} (or give extends: SYSTEM)")
        return SystemSpec(**changes)
    if "name" in changes:
        return dataclasses.replace(base, **changes)
    label = f"{source.stem}.{key}" if key else source.stem
    result = dataclasses.replace(base, **changes, name=label)
    return base if dataclasses.replace(result, name=base.name) == base else result


def _extended(value: Any, source: Path, chain: tuple[str, ...]) -> SystemSpec:
    try:
        path = _system_file(value, source.parent)
    except ValueError as error:
        raise ValueError(f"extends: {error}") from None
    if _identity(path) in chain:
        raise ValueError(f"extends={value!r}: a cycle ({' -> '.join(chain)} -> "
                         f"{_identity(path)})")
    if len(chain) >= MAX_EXTENDS_DEPTH:
        raise ValueError(f"extends={value!r}: more than {MAX_EXTENDS_DEPTH} files deep")
    return _load_system(path, chain)


def _part(key: str, value: Any, inherited: Any) -> Any:
    """A part as written: a catalog name stays a name; a mapping derives a spec of its own."""
    if not isinstance(value, dict):
        return value  # SystemSpec checks names and specs
    kind, lookup = _PARTS[key]
    hints = get_type_hints(kind)
    allowed = ("extends", *hints)
    unknown = [item for item in value if item not in allowed]
    if unknown:
        raise ValueError(f"{key}: unknown key {unknown[0]!r}: allowed are {', '.join(allowed)}")
    reference = value.get("extends", inherited)
    base = _part_spec(key, reference) if reference is not None else None
    changes = {field: _part_value(f"{key}.{field}", hints[field], item, base, field)
               for field, item in value.items() if field != "extends"}
    if base is None:
        missing = [field for field in hints if field not in changes]
        if missing:
            raise ValueError(f"{key}: missing key {missing[0]!r}: a {key} without extends needs "
                             f"{', '.join(hints)}")
        return kind(**changes)
    result = dataclasses.replace(base, **{"name": f"{base.name}-custom", **changes})
    same = "name" not in changes and dataclasses.replace(result, name=base.name) == base
    return reference if same else result


def _part_value(where: str, hint: Any, value: Any, base: Any, field: str) -> Any:
    """Floats widen (numeric strings too); a mapping of floats merges into the base's."""
    if hint is float:
        return _number(where, value)
    if get_origin(hint) is Mapping:
        if not isinstance(value, dict) or not all(isinstance(item, str) for item in value):
            raise ValueError(f"{where} must be a mapping of names to numbers, got {value!r}")
        inherited = dict(getattr(base, field)) if base is not None else {}
        return {**inherited, **{item: _number(f"{where}.{item}", number)
                                for item, number in value.items()}}
    return value


def _number(where: str, value: Any) -> Any:
    """A float from a number or numeric string, else `value` itself for the spec to refuse."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return value
    try:
        return float(value)
    except (ValueError, OverflowError):
        raise ValueError(f"{where} must be a number, got {value!r}") from None


def system_with(spec: SystemSpec, **overrides: Any) -> SystemSpec:
    """A copy of spec with some fields replaced (e.g. nic="connectx-7"), validated again."""
    unknown = [key for key in overrides if key not in SYSTEM_KEYS]
    if unknown:
        raise ValueError(f"unknown system field {unknown[0]!r}: allowed are "
                         + ", ".join(SYSTEM_KEYS))
    return dataclasses.replace(spec, **overrides)
