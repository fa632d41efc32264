"""Model specs, parameter counts and Megatron model FLOPs against published numbers."""

from dataclasses import replace

import pytest

from workloads import flops
from workloads.flops import model_flops_per_token, reported_flops_per_token
from workloads.models import MODELS, ModelSpec, model_spec

DSV3 = MODELS["deepseek-v3"]
LLAMA3_8B = MODELS["llama3-8b"]


def test_dsv3_flops_per_token_with_mtp_is_megatron_exact() -> None:
    # deepseek-v3-and-flops.md §2.3: 259,992,950,784 FLOP/token; Bridge 26.06 table 1648 TF at
    # 6338 tokens/s/GPU gives 2.60019e11 (rounding of the published integers).
    value = flops.model_flops_per_token(DSV3, 4096)
    assert value == 259_992_950_784
    assert value == pytest.approx(1648e12 / 6338, rel=1e-3)


def test_dsv3_flops_per_token_without_mtp() -> None:
    # §2.3: 249.812 GF/token without MTP; Bridge 25.11 table 1088 TF at 4357 tokens/s/GPU.
    value = flops.model_flops_per_token(DSV3.with_mtp(0), 4096)
    assert value == pytest.approx(249.812e9, rel=1e-3)
    assert value == pytest.approx(1088e12 / 4357, rel=1e-3)


# hardware-and-recipes.md §2: GFLOP/token that NVIDIA's Megatron-Bridge performance tables imply
# (Model TFLOP/s/GPU / tokens/s/GPU, causal counting), with the sequence length of the table row.
PUBLISHED_GFLOP_PER_TOKEN = {
    "llama3.1-405b": (8192, 2524.0), "llama3-8b": (8192, 51.5), "qwen3-235b-a22b": (4096, 148.0),
    "llama3-70b": (8192, 447.0), "qwen3-30b-a3b": (4096, 23.0), "gpt-oss-120b": (4096, 32.6),
    "kimi-k2": (4096, 204.6),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_GFLOP_PER_TOKEN))
def test_flops_per_token_match_published_tables(name: str) -> None:
    # Within 0.5 %. Llama-3-70B is the loosest: 449.2 here vs 447 (+0.50 %); the same shapes
    # reproduce NeMo 25.07's non-causal ratio 1957 / 4066 = 481.3 (here 449.2 + 32.2 = 481.4).
    seq_len, gflop = PUBLISHED_GFLOP_PER_TOKEN[name]
    value = flops.model_flops_per_token(MODELS[name], seq_len)
    assert value == pytest.approx(gflop * 1e9, rel=5e-3)


def test_causal_keys_per_query_is_the_exact_window_average() -> None:
    # (1/s)·Σ_{i=1..s} min(i, w), counted key by key, against the closed form.
    for seq_len, window in ((16, 1), (16, 5), (16, 15), (4096, 128), (7, 3)):
        counted = sum(min(i, window) for i in range(1, seq_len + 1)) / seq_len
        assert flops.causal_keys_per_query(seq_len, window) == pytest.approx(counted, rel=1e-15)
    assert flops.causal_keys_per_query(4096, 128) == 128 - 128 * 127 / 8192
    # Full causal attention is Megatron's s/2 (not (s+1)/2); so is a window >= s.
    assert flops.causal_keys_per_query(4096) == 2048
    assert flops.causal_keys_per_query(4096, 4096) == 2048
    assert flops.causal_keys_per_query(4096, 9999) == 2048


def test_gpt_oss_window_layers() -> None:
    # 18 sliding-window layers (w = 128) and 18 full layers; q = 64 heads x 64.
    oss = MODELS["gpt-oss-120b"]
    full = flops.core_attention_fwd_flops(oss, 4096, layer=1)
    window = flops.core_attention_fwd_flops(oss, 4096, layer=0)
    assert full == 2 * 2048 * 2 * 4096
    assert window == 2 * (128 - 128 * 127 / 8192) * 2 * 4096
    assert flops.core_attention_fwd_flops(oss, 4096) == (full + window) / 2
    assert oss.num_window_layers == 18
    no_window = replace(oss, sliding_window=None, window_layer_pattern=())
    saved = 3 * 18 * (full - window)
    assert flops.model_flops_per_token(no_window, 4096) - flops.model_flops_per_token(oss, 4096) \
        == pytest.approx(saved, rel=1e-12)


def test_dsv3_flops_per_step() -> None:
    # §2.3: 4.36196e18 FLOP per GBS-4096 iteration.
    assert flops.model_flops_per_step(DSV3, 4096, 4096) == pytest.approx(4.36196e18, rel=1e-5)


def _block_sum(model: ModelSpec, seq_len: int, tp: int) -> float:
    """Forward FLOPs per token summed layer by layer, the way a task graph adds its tasks."""
    moe = (model.moe_router_topk * flops.expert_fwd_flops(model)
           + flops.shared_expert_fwd_flops(model))
    dense = flops.dense_mlp_fwd_flops(model)
    types = [model.is_moe_layer(i) for i in range(model.num_layers)]
    types += [types[-1]] * model.mtp_layers
    total = sum(flops.attention_linear_fwd_flops(model)
                + flops.core_attention_fwd_flops(model, seq_len, layer)
                + (moe if is_moe else dense) for layer, is_moe in enumerate(types))
    total += model.mtp_layers * flops.mtp_proj_fwd_flops(model)
    return total + (1 + model.mtp_layers) * flops.logits_fwd_flops(model, tp)


BLOCK_SUM_MODELS = [*MODELS.values(), DSV3.with_mtp(0), DSV3.with_mtp(2),
                    MODELS["gpt-oss-120b"].with_mtp(1)]


@pytest.mark.parametrize("model", BLOCK_SUM_MODELS,
                         ids=[*MODELS, "dsv3-mtp0", "dsv3-mtp2", "gpt-oss-mtp1"])
@pytest.mark.parametrize("tp", [1, 2])
def test_blocks_times_three_equal_model_flops(model: ModelSpec, tp: int) -> None:
    assert 3 * _block_sum(model, 4096, tp) == flops.model_flops_per_token(model, 4096, tp)


def test_dsv3_per_gemm_forward_flops() -> None:
    # §2.4 table, forward FLOP per token.
    assert flops.expert_fwd_flops(DSV3) * 8 == pytest.approx(704.64e6, rel=1e-4)
    assert flops.shared_expert_fwd_flops(DSV3) == pytest.approx(88.08e6, rel=1e-4)
    assert flops.dense_mlp_fwd_flops(DSV3) == pytest.approx(792.72e6, rel=1e-4)
    assert flops.router_fwd_flops(DSV3) == pytest.approx(3.67e6, rel=1e-3)
    assert flops.core_attention_fwd_flops(DSV3, 4096) == pytest.approx(100.66e6 + 67.11e6, rel=1e-4)
    assert flops.mtp_proj_fwd_flops(DSV3) == pytest.approx(205.56e6, rel=1e-4)
    assert flops.logits_fwd_flops(DSV3) == pytest.approx(1853.36e6, rel=1e-4)


def test_router_is_not_model_flops() -> None:
    no_router = flops.model_flops_per_token(DSV3, 4096)
    assert 3 * _block_sum(DSV3, 4096, 1) == no_router
    assert flops.router_fwd_flops(DSV3) > 0


def test_only_tp_enters_model_flops_through_vocab_padding() -> None:
    # The plan's pp, ep, cp, dp are not inputs at all; tp pads the vocab to 1280·tp.
    assert DSV3.padded_vocab_size(1) == 129_280
    assert DSV3.padded_vocab_size(2) == 130_560
    tp1 = flops.model_flops_per_token(DSV3, 4096, tp=1)
    tp2 = flops.model_flops_per_token(DSV3, 4096, tp=2)
    assert tp2 - tp1 == 3 * 2 * 2 * DSV3.hidden_size * (130_560 - 129_280)
    assert LLAMA3_8B.padded_vocab_size(2) == 128_256  # 128256 = 256 x 501
    assert LLAMA3_8B.padded_vocab_size(8) == 129_024  # next multiple of 1024


def test_dsv3_parameter_counts() -> None:
    # §1.2 recount: 671,026,404,352 without MTP, 37.55e9 active incl. embedding and head;
    # 187,107,328 attention params per layer; 44,040,192 per expert.
    main = DSV3.with_mtp(0)
    assert main.total_params() == 671_026_404_352
    assert main.active_params() == 37_552_282_624
    assert DSV3.attention_params_per_layer == 187_107_328
    assert DSV3.expert_params == 44_040_192
    assert DSV3.num_moe_layers == 58 and DSV3.num_dense_layers == 3


def test_dsv3_with_mtp_matches_hf_checkpoint() -> None:
    # DeepSeek-V3 README: the HF checkpoint holds 685B = 671B + MTP module, which stores its own
    # copies of the embedding and output head (shared, so counted once by total_params).
    checkpoint = DSV3.total_params() + 2 * DSV3.embedding_params
    assert checkpoint == pytest.approx(685e9, rel=1e-3)


def test_llama3_8b_parameter_count() -> None:
    assert LLAMA3_8B.total_params() == pytest.approx(8.03e9, rel=1e-3)
    assert LLAMA3_8B.active_params() == LLAMA3_8B.total_params()
    assert LLAMA3_8B.num_moe_layers == 0 and not LLAMA3_8B.is_moe_layer(0)


def test_model_lookup_and_errors() -> None:
    assert model_spec("deepseek-v3") is DSV3
    with pytest.raises(ValueError, match="known: deepseek-v3, gpt-oss-120b, kimi-k2"):
        model_spec("gpt-5")
    with pytest.raises(ValueError, match="moe_layer_freq"):
        ModelSpec(name="x", hidden_size=64, num_layers=2, vocab_size=100, num_attention_heads=4,
                  ffn_hidden_size=128, num_experts=4, moe_ffn_hidden_size=32, moe_router_topk=2,
                  moe_layer_freq=(1,))
    with pytest.raises(ValueError, match="attention="):
        ModelSpec(name="x", hidden_size=64, num_layers=2, vocab_size=100, num_attention_heads=4,
                  ffn_hidden_size=128, attention="mha")
    with pytest.raises(ValueError, match="seq_len=0"):
        flops.core_attention_fwd_flops(DSV3, 0)


# --- formulas of other sources ------------------------------------------------------------

@pytest.mark.parametrize("name, seq_len, expected_gflops", [
    ("llama3-70b", 8192, 481.0), ("llama3-8b", 8192, 57.9), ("mixtral-8x7b", 4096, 82.9),
])
def test_nemo_noncausal_counts_match_the_published_per_token_figures(name, seq_len,
                                                                     expected_gflops):
    """NeMo's figures (../shared/data/README.md, flops_formula) are Megatron + full attention."""
    gflops = reported_flops_per_token(model_spec(name), seq_len, "megatron-noncausal") / 1e9
    assert gflops == pytest.approx(expected_gflops, rel=2e-3)


def test_torchtitan_counts_6n_plus_full_attention_without_mtp():
    """281.158 GF/token for DeepSeek-V3 at 4,096 (deepseek-v3-and-flops.md §3.1)."""
    dsv3 = model_spec("deepseek-v3").with_mtp(0)
    assert reported_flops_per_token(dsv3, 4096, "torchtitan") / 1e9 == pytest.approx(281.158,
                                                                                     abs=1e-3)


def test_llama3_counts_palms_6n_plus_12lhqt():
    """Meta's MFU is PaLM's: 6N + 12LHQT per token, N the matmul parameters but the input
    embedding. Llama 3.1 405B by hand: 126 layers of (2 x 16,384^2 + 2 x 16,384 x 1,024 +
    3 x 16,384 x 53,248 + 2 x 16,384 norm) parameters, the 16,384 x 128,256 head, the final
    norm; 12 x 126 x 128 x 128 x 8,192 for attention."""
    n = 126 * 3_187_703_808 + 16_384 * 128_256 + 16_384
    by_hand = 6 * n + 12 * 126 * 128 * 128 * 8192
    assert reported_flops_per_token(model_spec("llama3.1-405b"), 8192, "llama3") == by_hand


def test_causal_and_derived_are_megatrons_count_and_unknown_formulas_are_refused():
    dsv3 = model_spec("deepseek-v3")
    assert reported_flops_per_token(dsv3, 4096, "derived") == model_flops_per_token(dsv3, 4096)
    with pytest.raises(ValueError, match="flops_formula='maxtext'"):
        reported_flops_per_token(dsv3, 4096, "maxtext")
