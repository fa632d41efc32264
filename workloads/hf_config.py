"""Import a Hugging Face config.json as a `ModelSpec`.

Owns `model_from_hf_config`: one reader per supported model_type maps the HF keys to Megatron's
as Megatron-Bridge's bridges do (num_key_value_heads -> num_query_groups, head_dim ->
kv_channels, n_shared_experts x moe_intermediate_size -> the shared expert, first_k_dense_replace
or mlp_only_layers -> the MoE layer flags, layer_types -> the sliding-window flags,
num_nextn_predict_layers -> MTP depth). make_vocab_size_divisible_by follows Bridge: 1280 for
the DeepSeek-V3 and Kimi-K2 providers, else the largest power of two <= 128 dividing the vocab.
Mixtral's sliding_window is not imported: Bridge's Mixtral provider sets no window, so Megatron
counts full attention. Every bad input raises a one-line ValueError naming the file and the key.
"""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.models import ModelSpec

DEEPSEEK_VOCAB_DIVISOR = 1280
WINDOW_LAYER_TYPES = {"sliding_attention": 1, "full_attention": 0}


@dataclass(frozen=True, slots=True)
class _Config:
    """A parsed config.json and the label (file path) its errors name."""

    label: str
    data: Mapping[str, Any]

    def fail(self, key: str, allowed: str) -> ValueError:
        """The one-line error for a bad `key`: the file, the key, its value, what is allowed."""
        if key not in self.data:
            return ValueError(f"{self.label}: key {key!r} is missing; expected {allowed}")
        value = self.data[key]
        return ValueError(f"{self.label}: key {key!r} = {value!r} ({type(value).__name__}); "
                          f"expected {allowed}")

    def size(self, key: str, minimum: int = 1, default: int | None = None) -> int:
        """An integer >= `minimum` (JSON booleans are not integers); `default`, if given,
        when the key is absent or null."""
        value = self.data.get(key)
        if value is None and default is not None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(key, f"an integer >= {minimum}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, "true or false")
        return value

    def sequence(self, key: str, default: list[Any], length: int | None = None) -> list[Any]:
        value = self.data.get(key, default)
        if not isinstance(value, list) or (length is not None and len(value) != length):
            size = "" if length is None else f" of length num_hidden_layers={length}"
            raise self.fail(key, f"a list{size}")
        return value


def _bridge_vocab_divisor(vocab_size: int) -> int:
    """Megatron-Bridge's make_vocab_size_divisible_by: the largest power of two <= 128 that
    divides the vocab."""
    divisor = 128
    while vocab_size % divisor:
        divisor //= 2
    return divisor


def _decoder(c: _Config) -> dict[str, Any]:
    """The fields every decoder has."""
    vocab = c.size("vocab_size")
    return dict(hidden_size=c.size("hidden_size"), num_layers=c.size("num_hidden_layers"),
                vocab_size=vocab, make_vocab_size_divisible_by=_bridge_vocab_divisor(vocab),
                num_attention_heads=c.size("num_attention_heads"),
                tie_embeddings=c.flag("tie_word_embeddings", False))


def _gqa(c: _Config) -> dict[str, Any]:
    """A GQA decoder with a dense FFN of intermediate_size; head_dim defaults to h / heads."""
    fields = _decoder(c)
    heads = fields["num_attention_heads"]
    fields.update(num_query_groups=c.size("num_key_value_heads", default=heads),
                  kv_channels=c.size("head_dim", default=fields["hidden_size"] // heads),
                  ffn_hidden_size=c.size("intermediate_size"))
    return fields


def _deepseek_v3(c: _Config) -> dict[str, Any]:
    """DeepSeek-V3 architecture (deepseek_v3, kimi_k2): MLA, first_k_dense_replace dense layers,
    then an MoE layer every moe_layer_freq layers, shared experts, MTP."""
    fields = _decoder(c)
    layers, moe_ffn = fields["num_layers"], c.size("moe_intermediate_size")
    first_dense, every = c.size("first_k_dense_replace", 0), c.size("moe_layer_freq")
    fields.update(
        make_vocab_size_divisible_by=DEEPSEEK_VOCAB_DIVISOR, attention="mla",
        q_lora_rank=None if c.data.get("q_lora_rank") is None else c.size("q_lora_rank"),
        kv_lora_rank=c.size("kv_lora_rank"),
        qk_head_dim=c.size("qk_nope_head_dim"), qk_pos_emb_head_dim=c.size("qk_rope_head_dim"),
        v_head_dim=c.size("v_head_dim"), ffn_hidden_size=c.size("intermediate_size"),
        num_experts=c.size("n_routed_experts"), moe_ffn_hidden_size=moe_ffn,
        moe_router_topk=c.size("num_experts_per_tok"),
        moe_shared_expert_intermediate_size=c.size("n_shared_experts", 0) * moe_ffn,
        moe_layer_freq=tuple(int(i >= first_dense and i % every == 0) for i in range(layers)),
        moe_router_num_groups=c.size("n_group", default=1),
        moe_router_group_topk=c.size("topk_group", default=1),
        mtp_layers=c.size("num_nextn_predict_layers", minimum=0, default=0))
    return fields


def _qwen3_moe(c: _Config) -> dict[str, Any]:
    """Qwen3-MoE: GQA with per-head q/k norms; layer i is MoE unless listed in mlp_only_layers
    or (i + 1) is not a multiple of decoder_sparse_step."""
    fields = _gqa(c)
    layers, step = fields["num_layers"], c.size("decoder_sparse_step", default=1)
    dense = c.sequence("mlp_only_layers", [])
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in dense):
        raise c.fail("mlp_only_layers", "a list of layer indices")
    renamed = "num_local_experts" in c.data and "num_experts" not in c.data  # transformers 5
    experts_key = "num_local_experts" if renamed else "num_experts"
    fields.update(
        qk_layernorm=True, num_experts=c.size(experts_key),
        moe_ffn_hidden_size=c.size("moe_intermediate_size"),
        moe_router_topk=c.size("num_experts_per_tok"),
        moe_layer_freq=tuple(int(i not in dense and (i + 1) % step == 0) for i in range(layers)))
    return fields


def _mixtral(c: _Config) -> dict[str, Any]:
    """Mixtral: GQA, every layer MoE with experts of intermediate_size."""
    fields = _gqa(c)
    fields.update(num_experts=c.size("num_local_experts"),
                  moe_ffn_hidden_size=fields["ffn_hidden_size"],
                  moe_router_topk=c.size("num_experts_per_tok"),
                  moe_layer_freq=(1,) * fields["num_layers"])
    return fields


def _gpt_oss(c: _Config) -> dict[str, Any]:
    """GPT-OSS: Mixtral-like MoE with biases on every linear, attention sinks, the clamped
    GLU, and the sliding_window on the layers layer_types calls sliding_attention."""
    fields = _mixtral(c)
    types = c.sequence("layer_types", [], length=fields["num_layers"])
    if any(kind not in WINDOW_LAYER_TYPES for kind in types):
        raise c.fail("layer_types", f"entries in {sorted(WINDOW_LAYER_TYPES)}")
    pattern = tuple(WINDOW_LAYER_TYPES[kind] for kind in types)
    window = c.size("sliding_window") if any(pattern) else None
    fields.update(sliding_window=window, window_layer_pattern=pattern if window else (),
                  attention_sinks=True, linear_bias=True, clamped_glu=True)
    return fields


READERS: dict[str, Callable[[_Config], dict[str, Any]]] = {
    "deepseek_v3": _deepseek_v3, "kimi_k2": _deepseek_v3, "qwen3_moe": _qwen3_moe,
    "mixtral": _mixtral, "llama": _gqa, "gpt_oss": _gpt_oss,
}


def _load(source: str | Path | Mapping[str, Any]) -> _Config:
    if isinstance(source, Mapping):
        return _Config("<mapping>", source)
    path = Path(source)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror}); expected a Hugging Face "
                         f"config.json") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not JSON ({exc}); expected a Hugging Face config.json "
                         f"object") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the top level is a {type(data).__name__}; expected a JSON "
                         f"object (a Hugging Face config.json)")
    return _Config(str(path), data)


def _default_name(source: str | Path | Mapping[str, Any], model_type: str) -> str:
    """The file's stem, or its folder's name for a config.json; model_type for a mapping."""
    if isinstance(source, Mapping):
        return model_type
    path = Path(source)
    return path.parent.name if path.stem == "config" and path.parent.name else path.stem


def model_from_hf_config(source: str | Path | Mapping[str, Any],
                         name: str | None = None) -> ModelSpec:
    """The `ModelSpec` of a Hugging Face config.json (a path, or the parsed mapping)."""
    config = _load(source)
    model_type = config.data.get("model_type")
    if not isinstance(model_type, str) or model_type not in READERS:
        raise config.fail("model_type", f"one of {', '.join(sorted(READERS))}")
    fields = READERS[model_type](config)
    try:
        return ModelSpec(name=name or _default_name(source, model_type), **fields)
    except ValueError as exc:
        raise ValueError(f"{config.label}: {exc}") from None
