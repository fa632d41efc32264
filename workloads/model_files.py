"""Model files: a ModelSpec from YAML, a Hugging Face config.json or Megatron's model flags;
and the helpers the recipe, scenario and command-line readers share (YAML reading, key checks,
`extends`, typed values, `build`, FlagValues).

A model file maps ModelSpec fields (read from the dataclass, so fields added later work too) and
optionally `extends: NAME-or-PATH` (a catalog model, another .yaml file or a Hugging Face
config.json, relative to this file);
without `extends` it must give every required field. `name` defaults to the extended model's
when nothing else changes, else to the file's stem. `moe_layer_freq` also takes Megatron's
forms: an int N (layer i is MoE when i % N == 0) or a pattern such as "([0]*3+[1]*58)".
YAML is read with yaml.safe_load only; every error is one line naming the file, the key, the
value and what is allowed. Float fields accept numeric strings: YAML 1.1 (PyYAML) reads 1.8e12,
with no sign in the exponent, as a string.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from workloads.models import MODELS, ModelSpec

YAML_SUFFIXES = (".yaml", ".yml")
MAX_EXTENDS_DEPTH = 16
MAX_LAYERS = 100_000  # bound on patterns and layouts a file or command line may expand to
MODEL_KEYS = ("extends",) + tuple(f.name for f in fields(ModelSpec))
Spec = TypeVar("Spec")
UNSET: Any = object()  # a flag absent from a command line of changes
_FAIL: Any = object()


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a mapping was read: a file, and the key inside it ("" for the whole file)."""

    path: Path
    key: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.key}" if self.key else str(self.path)

    def error(self, message: str) -> ValueError:
        return ValueError(f"{self}: {message}")

    def child(self, key: str) -> Origin:
        return Origin(self.path, f"{self.key}.{key}" if self.key else key)

    @property
    def label(self) -> str:
        """A default name for what the mapping defines: the file's stem (and the key)."""
        return f"{self.path.stem}.{self.key}" if self.key else self.path.stem

    def file(self, relative: str) -> Path:
        """A path written in this mapping, relative to its file's folder."""
        return self.path.parent / relative


def identity(path: Path) -> str:
    """The absolute, normalised path: what `extends` cycles are detected by."""
    return os.path.normpath(os.path.abspath(path))


def show(value: Any) -> str:
    """repr(value), cut to 60 characters for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_yaml_mapping(path: Path) -> dict[Any, Any]:
    """The mapping in a YAML file (yaml.safe_load only); a one-line error naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError) as error:  # ValueError: not UTF-8, a NUL in the path
        detail = getattr(error, "strerror", None) or " ".join(str(error).split())
        raise ValueError(f"{path}: cannot read file: {detail}") from None
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError) as error:  # ValueError: e.g. a timestamp out of range
        raise ValueError(f"{path}: not plain YAML (yaml.safe_load: "
                         f"{' '.join(str(error).split())})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of keys, got {type(data).__name__}")
    return data


def check_keys(data: Any, allowed: tuple[str, ...], origin: Origin) -> dict[str, Any]:
    """`data` if it is a mapping whose keys are all allowed."""
    if not isinstance(data, dict):
        raise origin.error(f"expected a mapping with keys {', '.join(allowed)}, "
                           f"got {type(data).__name__}")
    for key in data:
        if key not in allowed:
            raise origin.error(f"unknown key {show(key)}: allowed are {', '.join(allowed)}")
    return data


def extended(value: Any, origin: Origin, chain: tuple[str, ...], catalog: Mapping[str, Spec],
             load: Callable[[Path, tuple[str, ...]], Spec], kind: str,
             suffixes: tuple[str, ...] = YAML_SUFFIXES) -> Spec:
    """What `extends: value` names: a catalog entry, or a file relative to `origin`."""
    if isinstance(value, str) and value in catalog:
        return catalog[value]
    if not isinstance(value, str) or not value.endswith(suffixes):
        raise origin.error(f"extends={show(value)}: unknown {kind}; known are "
                           f"{', '.join(sorted(catalog))}, or a path to a {'/'.join(suffixes)} "
                           f"file")
    path = origin.file(value)
    if identity(path) in chain:
        raise origin.error(f"extends={value!r}: a cycle ({' -> '.join(chain)} -> "
                           f"{identity(path)})")
    if len(chain) >= MAX_EXTENDS_DEPTH:
        raise origin.error(f"extends={value!r}: more than {MAX_EXTENDS_DEPTH} files deep")
    try:
        return load(path, chain)
    except ValueError as error:
        raise origin.error(f"extends: {error}") from None


def _describe(kind: Any) -> str:
    args = get_args(kind)
    if get_origin(kind) in (Union, UnionType):
        named = [_describe(arg) for arg in args if arg is not NoneType]
        return " or ".join(named + (["null"] if NoneType in args else []))
    if get_origin(kind) is tuple:
        return f"a list (each item {_describe(args[0])})"
    return {bool: "true or false", int: "an integer", float: "a finite number",
            str: "a string"}.get(kind, str(kind))


def _convert(kind: Any, value: Any) -> Any:
    """`value` as type `kind` (int and numeric strings widen to float, a list to a tuple)."""
    args = get_args(kind)
    if get_origin(kind) in (Union, UnionType):
        if value is None and NoneType in args:
            return None
        results = [_convert(arg, value) for arg in args if arg is not NoneType]
        return next((result for result in results if result is not _FAIL), _FAIL)
    if get_origin(kind) is tuple and len(args) == 2 and args[1] is Ellipsis:
        if not isinstance(value, (list, tuple)):
            return _FAIL
        items = [_convert(args[0], item) for item in value]
        return _FAIL if any(item is _FAIL for item in items) else tuple(items)
    if kind is float:
        return _finite_number(value)
    if kind in (bool, int, str):
        exact = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        return value if exact else _FAIL
    raise ValueError(f"fields of type {kind} cannot be set from a file")


def _finite_number(value: Any) -> Any:
    """A finite float from a number or a numeric string; _FAIL for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return _FAIL
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return _FAIL
    return number if math.isfinite(number) else _FAIL


def typed_value(kind: Any, value: Any, key: str, origin: Origin) -> Any:
    """`value` if it fits the dataclass field type `kind`; a one-line error otherwise."""
    try:
        converted = _convert(kind, value)
    except ValueError as error:
        raise origin.error(f"{key}: {error}") from None
    if converted is _FAIL:
        raise origin.error(f"{key}={show(value)}: must be {_describe(kind)}")
    return converted


def typed_changes(cls: type, changes: Mapping[str, Any], origin: Origin) -> dict[str, Any]:
    """Each change checked against the type of field `key` of dataclass `cls`."""
    hints = get_type_hints(cls)
    return {key: typed_value(hints[key], value, key, origin) for key, value in changes.items()}


def build(cls: type[Spec], base: Spec | None, values: dict[str, Any], origin: Origin) -> Spec:
    """`base` with `values` replaced, or a new `cls` when there is no base; validated. The name
    defaults to the base's when nothing else differs from it, else to the origin's label."""
    named = "name" in values
    if not named:
        values = {**values, "name": origin.label}
    try:
        if base is not None:
            result = replace(base, **values)  # type: ignore[type-var]
            same = replace(result, name=getattr(base, "name")) == base  # type: ignore[type-var]
            return base if same and not named else result
        missing = [f.name for f in fields(cls)  # type: ignore[arg-type]
                   if f.name not in values and f.default is MISSING
                   and f.default_factory is MISSING]
        if missing:
            raise ValueError(f"missing key {missing[0]!r}: without extends, required are "
                             f"{', '.join(missing)}")
        return cls(**values)
    except ValueError as error:
        raise origin.error(str(error)) from None


# --- Megatron's --moe-layer-freq and layout sizes ---------------------------------------------

_PATTERN_CHARS = re.compile(r"[^,\d\[\]()+*\s]")


def parse_moe_layer_freq(text: str) -> int | tuple[int, ...]:
    """Megatron's moe_freq_type: an int N, or a list expression such as "([0]*3+[1]*58)"."""
    if "[" not in text:
        try:
            return int(text)
        except ValueError:
            raise ValueError("must be an integer or a list expression like ([0]*3+[1]*58)") \
                from None
    if _PATTERN_CHARS.search(text):
        raise ValueError("a pattern may hold only digits, [ ] ( ) , + and *")
    try:
        result = _evaluate(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        raise ValueError(f"not a list expression ({' '.join(str(error).split())})") from None
    if not isinstance(result, list):
        raise ValueError("a pattern must be a list of 0/1 flags")
    return tuple(result)


def _evaluate(node: ast.AST) -> int | list[int]:
    """Integers, lists of integers, + and *; lists bounded by MAX_LAYERS."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.List):
        items = [_evaluate(item) for item in node.elts]
        flags = [item for item in items if isinstance(item, int)]
        if len(flags) != len(items):
            raise ValueError("list items must be integers")
        return flags
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(left, int) and isinstance(right, int):
            return left + right if isinstance(node.op, ast.Add) else left * right
        if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
            return _bounded(left + right, 1)
        if isinstance(node.op, ast.Mult) and isinstance(left, list) and isinstance(right, int):
            return _bounded(left, right)
        if isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, list):
            return _bounded(right, left)
    raise ValueError("only integers, [lists], + and * are allowed")


def _bounded(items: list[int], count: int) -> list[int]:
    if len(items) * count > MAX_LAYERS:
        raise ValueError(f"pattern longer than {MAX_LAYERS} layers")
    return items * count


def moe_layer_pattern(value: int | tuple[int, ...], num_layers: int) -> tuple[int, ...]:
    """One 0/1 flag per layer: an int N makes layer i MoE when i % N == 0 (Megatron's rule)."""
    if not 0 < num_layers <= MAX_LAYERS:
        raise ValueError(f"num_layers={num_layers}: must be in 1..{MAX_LAYERS} for a pattern")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"{value}: an integer frequency must be >= 1")
        return tuple(int(layer % value == 0) for layer in range(num_layers))
    if len(value) != num_layers or any(flag not in (0, 1) for flag in value):
        raise ValueError(f"a pattern of {len(value)} flags: must hold num_layers={num_layers} "
                         f"flags, each 0 or 1")
    return value


def bounded_layout(text: str) -> str:
    """`text` if its repeat counts multiply to at most MAX_LAYERS (parse_layout expands them)."""
    size = math.prod(int(count) for count in re.findall(r"\*\s*(\d{1,12})", text))
    if size > MAX_LAYERS or re.search(r"\d{13}", text):
        raise ValueError(f"layout={show(text)}: repeats expand past {MAX_LAYERS} symbols")
    return text


# --- model files ------------------------------------------------------------------------------

def names_file(name: str, catalog: Mapping[str, Any]) -> bool:
    """Whether a model or recipe argument names a file: not a `catalog` name, and a .yaml, .yml
    or .json name or a path that exists."""
    return name not in catalog and (name.endswith(YAML_SUFFIXES + (".json",))
                                    or Path(name).exists())


def load_model(name_or_path: str) -> ModelSpec:
    """A catalog model by name, or a model file (`load_model_file`) by path."""
    if names_file(name_or_path, MODELS):
        return load_model_file(name_or_path)
    if name_or_path not in MODELS:
        raise ValueError(f"model={name_or_path!r}: unknown model; known: "
                         f"{', '.join(sorted(MODELS))} (or a path to a .yaml model file or a "
                         f"Hugging Face config.json)")
    return MODELS[name_or_path]


def load_model_file(path: str | Path) -> ModelSpec:
    """A model from a .yaml/.yml model file, or from a Hugging Face config.json."""
    return _load_model(Path(path), ())


def _load_model(path: Path, chain: tuple[str, ...]) -> ModelSpec:
    if path.suffix == ".json":
        return _hf_model(path)
    return model_from_mapping(read_yaml_mapping(path), Origin(path), chain + (identity(path),))


def model_from_mapping(data: Any, origin: Origin, chain: tuple[str, ...] = ()) -> ModelSpec:
    """A model from a mapping of ModelSpec fields, optionally `extends: NAME-or-PATH`."""
    check_keys(data, MODEL_KEYS, origin)
    base = (extended(data["extends"], origin, chain, MODELS, _load_model, "model",
                     YAML_SUFFIXES + (".json",)) if "extends" in data else None)
    changes = {key: value for key, value in data.items() if key != "extends"}
    frequency: Any = changes.get("moe_layer_freq")
    megatron_form = isinstance(frequency, (int, str)) and not isinstance(frequency, bool)
    values = typed_changes(ModelSpec, {key: value for key, value in changes.items()
                                       if not (megatron_form and key == "moe_layer_freq")}, origin)
    if megatron_form:
        layers = values.get("num_layers", base.num_layers if base is not None else 0)
        try:
            parsed = parse_moe_layer_freq(frequency) if isinstance(frequency, str) else frequency
            values["moe_layer_freq"] = moe_layer_pattern(parsed, layers)
        except ValueError as error:
            raise origin.error(f"moe_layer_freq={show(frequency)}: {error}") from None
    return build(ModelSpec, base, values, origin)


def _hf_model(path: Path) -> ModelSpec:
    """A Hugging Face config.json through workloads.hf_config, where that module exists."""
    if importlib.util.find_spec("workloads.hf_config") is None:
        raise ValueError(f"{path}: reading a Hugging Face config.json needs "
                         f"workloads/hf_config.py, which this installation lacks")
    from workloads.hf_config import model_from_hf_config  # type: ignore[import-not-found]
    return model_from_hf_config(path)  # type: ignore[no-any-return]


# --- command-line settings (workloads.megatron_args) and the model fields they give -----------

@dataclass(frozen=True, slots=True)
class FlagValues:
    """A command line's mapped flags: values by canonical flag (the last one wins, as in
    argparse), each as written; on a complete line an absent flag takes `defaults` (Megatron's),
    on a line of changes it is UNSET. Readers append to `ignored` (with the reason) and `notes`."""

    values: dict[str, Any]
    written: dict[str, str]
    defaults: dict[str, Any]
    complete: bool
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def has(self, flag: str) -> bool:
        return flag in self.values

    def get(self, flag: str, default: Any = None) -> Any:
        return self.values.get(flag, default)

    def setting(self, flag: str) -> Any:
        if flag in self.values:
            return self.values[flag]
        return self.defaults.get(flag) if self.complete else UNSET

    def ignore(self, reason: str, *flags: str) -> None:
        """Report each of `flags` that was given as ignored, for `reason`."""
        self.ignored.extend(f"{self.written[flag]} ({reason})" for flag in flags
                            if flag in self.values)


_MODEL = {"--hidden-size": "hidden_size", "--num-layers": "num_layers",
          "--num-attention-heads": "num_attention_heads", "--ffn-hidden-size": "ffn_hidden_size",
          "--vocab-size": "vocab_size", "--swiglu": "swiglu", "--mtp-num-layers": "mtp_layers",
          "--make-vocab-size-divisible-by": "make_vocab_size_divisible_by",
          "--qk-layernorm": "qk_layernorm", "--add-bias-linear": "linear_bias"}
_MLA = {"--q-lora-rank": "q_lora_rank", "--kv-lora-rank": "kv_lora_rank",
        "--qk-head-dim": "qk_head_dim", "--qk-pos-emb-head-dim": "qk_pos_emb_head_dim",
        "--v-head-dim": "v_head_dim"}
_GQA = {"--kv-channels": "kv_channels", "--num-query-groups": "num_query_groups"}
_MOE = {"--num-experts": "num_experts", "--moe-ffn-hidden-size": "moe_ffn_hidden_size",
        "--moe-router-topk": "moe_router_topk",
        "--moe-router-num-groups": "moe_router_num_groups",
        "--moe-router-group-topk": "moe_router_group_topk",
        "--moe-shared-expert-intermediate-size": "moe_shared_expert_intermediate_size"}


def model_fields_from_flags(flags: FlagValues) -> dict[str, Any]:
    """ModelSpec fields of a command line (moe_layer_freq always expanded to a tuple)."""
    result = {name: flags.setting(flag) for flag, name in {**_MODEL, **_MLA, **_GQA, **_MOE}.items()
              if flags.setting(flag) is not UNSET}
    for flag, name, same in (("--untie-embeddings-and-output-weights", "tie_embeddings", False),
                             ("--share-embeddings-and-output-weights", "tie_embeddings", True),
                             ("--disable-bias-linear", "linear_bias", False)):
        if flags.has(flag):
            result[name] = flags.get(flag) == same
    if flags.setting("--softmax-type") is not UNSET:  # learnable: one sink logit per head
        result["attention_sinks"] = flags.setting("--softmax-type") == "learnable"
    if flags.complete:
        _complete_model(flags, result)
    elif flags.has("--multi-latent-attention"):
        result["attention"] = "mla" if flags.get("--multi-latent-attention") else "gqa"
    elif flags.has("--group-query-attention"):
        result["attention"] = "gqa"
        if not flags.get("--group-query-attention"):
            result["num_query_groups"] = None
    _layer_pattern(flags, result)
    return result


def _layer_pattern(flags: FlagValues, result: dict[str, Any]) -> None:
    """moe_layer_freq as one flag per layer (an int N needs --num-layers on the line)."""
    frequency, layers = flags.setting("--moe-layer-freq"), result.get("num_layers")
    if frequency is UNSET or flags.complete and not result["num_experts"]:
        return
    if result.get("num_experts", 1) == 0:
        flags.ignore("no effect with --num-experts 0", "--moe-layer-freq")
    elif isinstance(frequency, int) and layers is None:
        flags.ignore("an integer needs --num-layers on the line", "--moe-layer-freq")
    else:
        try:
            result["moe_layer_freq"] = moe_layer_pattern(frequency, layers or len(frequency))
        except ValueError as error:
            raise ValueError(f"{flags.written['--moe-layer-freq']}: {error}") from None


def _complete_model(flags: FlagValues, result: dict[str, Any]) -> None:
    """Megatron's derived defaults (validate_args) and what each attention/MoE kind ignores."""
    result.setdefault("tie_embeddings", True)
    if result["vocab_size"] is None:
        del result["vocab_size"]  # Megatron reads it from the tokenizer
    if result["ffn_hidden_size"] is None:
        hidden = result["hidden_size"]
        result["ffn_hidden_size"] = (int(4 * hidden * 2 / 3 / 64) * 64 if result["swiglu"]
                                     else 4 * hidden)
    if flags.get("--multi-latent-attention"):
        result.update(attention="mla", kv_channels=None, num_query_groups=None,
                      qk_layernorm=False)  # MLA's q/kv norms are part of MLA
        flags.ignore("no effect with --multi-latent-attention", *_GQA, "--group-query-attention",
                     "--qk-layernorm")
    else:
        result["attention"] = "gqa"
        for name in _MLA.values():
            del result[name]
        flags.ignore("needs --multi-latent-attention", *_MLA)
        if not flags.get("--group-query-attention"):
            result["num_query_groups"] = None
            flags.ignore("needs --group-query-attention", "--num-query-groups")
    if result["num_experts"]:
        if result["moe_ffn_hidden_size"] is None:
            result["moe_ffn_hidden_size"] = result["ffn_hidden_size"]  # Megatron's default
        return
    for name in list(_MOE.values())[1:]:
        del result[name]
    result["moe_layer_freq"] = ()
    flags.ignore("needs --num-experts", *list(_MOE)[1:], "--moe-layer-freq")
