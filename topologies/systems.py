"""Named systems: which GPU, NVLink switch, NIC and scale-out fabric a cluster is built from.

A SystemSpec names catalog parts (topologies.hardware) plus the wiring parameters; it holds no
numbers of its own beyond the wiring. The catalog lives as YAML in topologies/systems/NAME.yaml,
read with yaml.safe_load only; a user may also pass a path to their own .yaml file.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from topologies.hardware import gpu_spec, nic_spec, nvlink_switch_spec, switch_spec

SYSTEMS_DIR = Path(__file__).parent / "systems"
SYSTEM_NAMES: tuple[str, ...] = tuple(sorted(path.stem for path in SYSTEMS_DIR.glob("*.yaml")))


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemSpec:
    """A cluster design: parts by catalog name and how they are wired."""

    name: str
    gpu: str
    gpus_per_domain: int
    nvlink_switch: str
    nic: str
    scale_out_switch: str
    tiers: int
    oversubscription: float
    rails: int

    def __post_init__(self) -> None:
        for key in ("name", "gpu", "nvlink_switch", "nic", "scale_out_switch"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value:
                raise ValueError(f"system: {key} must be a non-empty string, got {value!r}")
        owner = f"system '{self.name}'"
        gpu_spec(self.gpu)
        nvlink_switch_spec(self.nvlink_switch)
        nic_spec(self.nic)
        switch_spec(self.scale_out_switch)
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


SYSTEM_KEYS = tuple(field.name for field in dataclasses.fields(SystemSpec))


def load_system(name_or_path: str) -> SystemSpec:
    """A catalog system by name (see SYSTEM_NAMES) or a system read from a .yaml file."""
    if name_or_path in SYSTEM_NAMES:
        path = SYSTEMS_DIR / f"{name_or_path}.yaml"
    elif str(name_or_path).endswith((".yaml", ".yml")):
        path = Path(name_or_path)
    else:
        raise ValueError(f"unknown system {name_or_path!r}: known are {', '.join(SYSTEM_NAMES)} "
                         "(or give a path to a .yaml file)")
    try:
        return _system_from_mapping(_read_yaml(path))
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def _read_yaml(path: Path) -> Any:
    """The safe_load-ed content of a file; any OS or YAML error becomes a one-line ValueError."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"cannot read file: {error.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        detail = " ".join(str(error).split())
        raise ValueError(f"not a plain YAML mapping (yaml.safe_load: {detail})") from None


def _system_from_mapping(data: Any) -> SystemSpec:
    """Check keys (all required, nothing extra) and build the spec, which checks the values."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a mapping of {', '.join(SYSTEM_KEYS)}, "
                         f"got {type(data).__name__}")
    missing = [key for key in SYSTEM_KEYS if key not in data]
    if missing:
        raise ValueError(f"missing key {missing[0]!r}: required are {', '.join(SYSTEM_KEYS)}")
    unknown = [key for key in data if key not in SYSTEM_KEYS]
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r}: allowed are {', '.join(SYSTEM_KEYS)}")
    return SystemSpec(**data)


def system_with(spec: SystemSpec, **overrides: Any) -> SystemSpec:
    """A copy of spec with some fields replaced (e.g. nic="connectx-7"), validated again."""
    unknown = [key for key in overrides if key not in SYSTEM_KEYS]
    if unknown:
        raise ValueError(f"unknown system field {unknown[0]!r}: allowed are "
                         + ", ".join(SYSTEM_KEYS))
    return dataclasses.replace(spec, **overrides)
