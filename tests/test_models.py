"""The model catalog: Hugging Face config.json import, bad configs, published parameter counts.

tests/data/hf/<name>.json are the fields that matter (plus model_type and architectures) of
the public config.json of: deepseek-ai/DeepSeek-V3, moonshotai/Kimi-K2-Instruct,
Qwen/Qwen3-235B-A22B, Qwen/Qwen3-30B-A3B, openai/gpt-oss-120b, mistralai/Mixtral-8x7B-v0.1,
mistralai/Mixtral-8x22B-v0.1, meta-llama/Meta-Llama-3-8B, meta-llama/Meta-Llama-3-70B,
meta-llama/Llama-3.1-405B.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from workloads import flops
from workloads.hf_config import model_from_hf_config
from workloads.models import MODELS, ModelSpec

HF_DIR = Path(__file__).parent / "data" / "hf"
SEQ_LEN = {"llama3-8b": 8192, "llama3-70b": 8192, "llama3.1-405b": 8192}  # else 4096


def _hf(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HF_DIR / f"{name}.json").read_text())
    return data


@pytest.mark.parametrize("name", sorted(MODELS))
def test_hf_import_reproduces_the_catalog(name: str) -> None:
    imported = model_from_hf_config(HF_DIR / f"{name}.json")
    catalog = MODELS[name]
    assert imported == catalog
    seq_len = SEQ_LEN.get(name, 4096)
    assert flops.model_flops_per_token(imported, seq_len) == \
        flops.model_flops_per_token(catalog, seq_len)
    assert imported.total_params() == catalog.total_params()


def test_hf_import_from_a_mapping_or_a_str_path() -> None:
    spec = model_from_hf_config(_hf("kimi-k2"), name="k2")
    assert spec.name == "k2" and spec.mtp_layers == 0 and spec.num_dense_layers == 1
    assert model_from_hf_config(_hf("llama3-8b")).name == "llama"  # model_type by default
    assert model_from_hf_config(str(HF_DIR / "mixtral-8x7b.json")) == MODELS["mixtral-8x7b"]


def test_hf_import_of_a_config_json_is_named_after_its_folder(tmp_path: Path) -> None:
    folder = tmp_path / "Qwen3-30B-A3B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_hf("qwen3-30b-a3b")))
    assert model_from_hf_config(folder / "config.json").name == "Qwen3-30B-A3B"


def test_hf_import_layer_patterns() -> None:
    # DeepSeek: first_k_dense_replace dense layers, then MoE every moe_layer_freq layers.
    sparse = model_from_hf_config({**_hf("deepseek-v3"), "moe_layer_freq": 2})
    assert sparse.moe_layer_freq[:6] == (0, 0, 0, 0, 1, 0)
    # Qwen3-MoE: mlp_only_layers and decoder_sparse_step; transformers 5 names num_experts
    # num_local_experts.
    qwen = {**_hf("qwen3-30b-a3b"), "mlp_only_layers": [0], "decoder_sparse_step": 2}
    qwen["num_local_experts"] = qwen.pop("num_experts")
    spec = model_from_hf_config(qwen)
    assert spec.moe_layer_freq[:4] == (0, 1, 0, 1) and spec.num_experts == 128
    # GPT-OSS: all full attention means no window at all.
    full = model_from_hf_config({**_hf("gpt-oss-120b"), "layer_types": ["full_attention"] * 36})
    assert full.sliding_window is None and full.num_window_layers == 0
    # Mixtral's sliding_window is not imported (Megatron counts full attention).
    assert model_from_hf_config({**_hf("mixtral-8x7b"), "sliding_window": 4096}) \
        .sliding_window is None


BAD_CONFIGS = [
    ("hidden_size", "7168", r"key 'hidden_size' = '7168' \(str\); expected an integer >= 1"),
    ("hidden_size", -1, r"key 'hidden_size' = -1 \(int\); expected an integer >= 1"),
    ("hidden_size", True, r"key 'hidden_size' = True \(bool\)"),
    ("num_hidden_layers", None, r"key 'num_hidden_layers' = None"),
    ("n_routed_experts", 0, r"key 'n_routed_experts' = 0 \(int\); expected an integer >= 1"),
    ("tie_word_embeddings", "no", r"key 'tie_word_embeddings' = 'no' \(str\); expected true"),
    ("model_type", "gpt2", r"key 'model_type' = 'gpt2' \(str\); expected one of deepseek_v3, "
                           r"gpt_oss, kimi_k2, llama, mixtral, qwen3_moe"),
    ("n_group", 7, r"moe_router_num_groups=7: must be >= 1 and divide num_experts=256"),
    ("topk_group", 9, r"moe_router_group_topk=9: must be in \[1, moe_router_num_groups=8\]"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD_CONFIGS,
                         ids=[f"{key}={value!r}" for key, value, _ in BAD_CONFIGS])
def test_hf_import_rejects_bad_values(tmp_path: Path, key: str, value: Any,
                                      message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**_hf("deepseek-v3"), key: value}))
    with pytest.raises(ValueError, match=message) as error:
        model_from_hf_config(path)
    assert str(error.value).startswith(f"{path}: ") and "\n" not in str(error.value)


@pytest.mark.parametrize("key", ["vocab_size", "kv_lora_rank", "model_type"])
def test_hf_import_names_a_missing_key(key: str) -> None:
    config = _hf("deepseek-v3")
    del config[key]
    with pytest.raises(ValueError, match=f"^<mapping>: key '{key}' is missing; expected "):
        model_from_hf_config(config)


def test_hf_import_rejects_bad_lists_and_bad_shapes() -> None:
    oss = _hf("gpt-oss-120b")
    with pytest.raises(ValueError, match=r"key 'layer_types' = \['full_attention'\] \(list\); "
                                         r"expected a list of length num_hidden_layers=36"):
        model_from_hf_config({**oss, "layer_types": ["full_attention"]})
    with pytest.raises(ValueError, match=r"key 'layer_types' .*expected entries in "):
        model_from_hf_config({**oss, "layer_types": ["chunked_attention"] * 36})
    with pytest.raises(ValueError, match=r"key 'mlp_only_layers' = \['0'\]"):
        model_from_hf_config({**_hf("qwen3-30b-a3b"), "mlp_only_layers": ["0"]})
    # Keys that are fine one by one but not together: ModelSpec's check, with the file named.
    with pytest.raises(ValueError, match=r"^<mapping>: num_query_groups=5: must divide "
                                         r"num_attention_heads=32$"):
        model_from_hf_config({**_hf("llama3-8b"), "num_key_value_heads": 5})


def test_hf_import_rejects_what_is_not_a_config(tmp_path: Path) -> None:
    not_json = tmp_path / "config.json"
    not_json.write_text("{'hidden_size': 7168}")
    with pytest.raises(ValueError, match=f"^{not_json}: not JSON .*; expected a Hugging Face"):
        model_from_hf_config(not_json)
    a_list = tmp_path / "list.json"
    a_list.write_text("[1, 2]")
    with pytest.raises(ValueError, match=f"^{a_list}: the top level is a list; expected"):
        model_from_hf_config(a_list)
    with pytest.raises(ValueError, match="missing.json: cannot read it"):
        model_from_hf_config(tmp_path / "missing.json")


# Published totals, main model (no MTP), embedding and untied output head both counted:
# DeepSeek-V3 README (671B; its HF checkpoint's 685B adds the MTP module); Qwen3-235B-A22B and
# Qwen3-30B-A3B model cards (235B, 30.5B in total); OpenAI gpt-oss-120b model card (116.83B);
# Mistral's "Mixtral of experts" announcement (46.7B) and "Cheaper, Better, Faster, Stronger"
# Mixtral 8x22B announcement (141B); Llama 3 8B 8.03B, 70B 70.6B and Llama 3.1 405B 405.9B
# (Hugging Face safetensors totals of the meta-llama repos; the model cards round to 8B / 70B /
# 405B). Kimi-K2 is checked on its own below.
PUBLISHED_TOTAL_PARAMS = {
    "deepseek-v3": 671e9, "qwen3-235b-a22b": 235e9, "qwen3-30b-a3b": 30.5e9,
    "gpt-oss-120b": 116.83e9, "mixtral-8x7b": 46.7e9, "mixtral-8x22b": 141e9,
    "llama3-8b": 8.03e9, "llama3-70b": 70.6e9, "llama3.1-405b": 405.9e9,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTAL_PARAMS))
def test_total_params_match_published(name: str) -> None:
    main = MODELS[name].with_mtp(0)
    assert main.total_params() == pytest.approx(PUBLISHED_TOTAL_PARAMS[name], rel=1e-2)


def test_kimi_k2_total_params() -> None:
    # The released model (num_nextn_predict_layers=0) holds 1.0264T: 61 MLA layers of 101.1M,
    # 60 MoE layers of 384 + 1 experts of 44.0M and a 2.75M router, one dense FFN of 396.4M,
    # embedding and head of 1.17G each. The tech report's "1.04T" is 1.3 % more; it is met
    # (+0.3 %) only by adding one DeepSeek-V3-style MTP layer (17.16G) -- our reading, not a
    # published breakdown, so the test pins our count and states the gap. (Kimi K2 tech report
    # arXiv:2507.20534: 1.04T total; the HF model card rounds to 1T.)
    kimi = MODELS["kimi-k2"]
    assert kimi.total_params() == 1_026_408_209_408
    assert kimi.total_params() == pytest.approx(1.04e12, rel=1.5e-2)
    assert kimi.with_mtp(1).total_params() == pytest.approx(1.04e12, rel=5e-3)


def test_gpt_oss_counts_biases_and_sinks_as_parameters_not_flops() -> None:
    # Model card: 116.83B total, 5.13B active without the input embedding (1 of 2 x 579M).
    oss = MODELS["gpt-oss-120b"]
    assert oss.total_params() == 116_829_156_672
    assert oss.active_params() - oss.embedding_params == pytest.approx(5.13e9, rel=1e-2)
    plain = ModelSpec(**{**_spec_fields(oss), "linear_bias": False, "attention_sinks": False})
    assert oss.total_params() - plain.total_params() == 36 * (
        64 + (64 + 2 * 8) * 64 + 2880 + 128 * (2 * 2880 + 2880) + 128)
    assert flops.model_flops_per_token(oss, 4096) == flops.model_flops_per_token(plain, 4096)


def test_qwen3_qk_layernorm_params() -> None:
    qwen = MODELS["qwen3-235b-a22b"]
    plain = ModelSpec(**{**_spec_fields(qwen), "qk_layernorm": False})
    assert qwen.attention_params_per_layer - plain.attention_params_per_layer == 2 * 128
    assert qwen.active_params() == pytest.approx(22e9, rel=1e-2)  # "22B activated"


def _spec_fields(spec: ModelSpec) -> dict[str, Any]:
    return {field: getattr(spec, field) for field in ModelSpec.__dataclass_fields__}


@pytest.mark.parametrize(("fields", "message"), [
    ({"sliding_window": 0}, "sliding_window=0: must be None or an integer >= 1"),
    ({"window_layer_pattern": (1, 0)}, r"window_layer_pattern=\(1, 0\): needs a sliding_window"),
    ({"sliding_window": 8, "window_layer_pattern": (1, 2)}, "every entry must be 0 or 1"),
    ({"sliding_window": 8, "window_layer_pattern": (1,)}, "length 1 must equal num_layers=2"),
    ({"attention": "mla", "kv_lora_rank": 8, "qk_head_dim": 8, "v_head_dim": 8,
      "sliding_window": 8}, "only attention='gqa'"),
    ({"attention": "mla", "kv_lora_rank": 8, "qk_head_dim": 8, "v_head_dim": 8,
      "linear_bias": True}, "linear_bias=True: only with attention='gqa'"),
])
def test_model_spec_window_and_bias_errors(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ModelSpec(name="x", hidden_size=64, num_layers=2, vocab_size=100, num_attention_heads=4,
                  ffn_hidden_size=128, **fields)


def test_window_layers_and_mtp() -> None:
    spec = ModelSpec(name="x", hidden_size=64, num_layers=2, vocab_size=100,
                     num_attention_heads=4, ffn_hidden_size=128, sliding_window=8, mtp_layers=1)
    # An empty pattern puts the window on every decoder layer; MTP layers attend fully.
    assert [spec.is_window_layer(i) for i in range(3)] == [True, True, False]
    assert spec.num_window_layers == 2
    with pytest.raises(ValueError, match=r"layer=3: must be in \[0, 3\)"):
        spec.is_window_layer(3)
