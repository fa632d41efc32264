"""Model FLOPs exactly as Megatron counts them, and the forward FLOPs of each block.

Owns Megatron-LM's `num_floating_point_operations` (megatron/training/training.py; Megatron
Bridge's flop_utils.py is identical for MLA and adds sliding windows for GQA;
research/deepseek-v3-and-flops.md §2.1) for fixed-length (BSHD) batches, and the per-token
forward FLOPs of every block a task graph needs. The one formula, per token, forward + backward
(x3: fwd, dgrad, wgrad; 2 FLOPs per MAC):

    3 · [ N_dense·mlp + N_moe·(k·expert + shared) + L_tot·attn_linear + Σ_layers core_attn(s)
          + D·mtp_proj + (1 + D)·logits(V_padded(tp)) ]

with D MTP layers counted as extra layers of the last layer's type (N_moe or N_dense += D,
L_tot = L + D) and the vocab padded for `tp`. That padding is the only way the parallel plan
enters: model FLOPs do not depend on pp, ep, cp, dp. Core attention costs 2 FLOPs per MAC of
QK^T and P·V over the keys a query sees on average: s/2 for causal attention (Megatron's
halving), and on a sliding-window layer of w keys (the query itself included)

    (1/s) · Σ_{i=1..s} min(i, w) = [w(w+1)/2 + (s − w)·w] / s = w − w(w−1)/(2s)     (w < s),

else s/2 (Megatron-Bridge flop_utils: "exact average causal SWA context"; its GPT-OSS bridge
passes TE window_size = (sliding_window − 1, 0), so w = HF's sliding_window).
Not counted (executed, but not credited): router, permutation, activation and norm kernels
outside MLA's q/kv norms, biases, attention sinks, recompute, capacity padding,
flash-attention backward recompute.
"""

from workloads.models import ModelSpec

FWD_BWD_FACTOR = 3
"""Megatron counts every GEMM three times: forward, backward-dgrad, backward-wgrad."""


def attention_linear_fwd_flops(model: ModelSpec) -> float:
    """Attention projections of one layer, per token. MLA: 2·(Q + KV + h·d_r + n·d_v·h), the
    q/kv norm "+1" terms included; GQA: 2·(h·(q + 2·kv) + q·h). Equals 2 x the layer's
    attention GEMM weights in both cases."""
    return 2.0 * model.attention_weights_per_layer


def causal_keys_per_query(seq_len: int, window: int | None = None) -> float:
    """Keys a query attends to, averaged over a causal sequence of `seq_len`, as Megatron
    counts them: s/2 with full attention, w − w(w−1)/(2s) with a window of w < s keys."""
    if seq_len < 1:
        raise ValueError(f"seq_len={seq_len}: must be >= 1")
    if window is None or window >= seq_len:
        return seq_len / 2
    return window - window * (window - 1) / (2 * seq_len)


def core_attention_flops_per_score(model: ModelSpec) -> float:
    """FLOPs of QK^T and P·V per attention score (one query, one key, one head): each score
    is exactly one exponential of the softmax."""
    if model.attention == "mla":
        return 2.0 * (model.qk_head_dim + model.qk_pos_emb_head_dim + model.v_head_dim)
    return 4.0 * model.head_dim


def _core_attention_flops(model: ModelSpec, keys_per_query: float) -> float:
    """QK^T plus P·V of one layer, per token, over `keys_per_query` keys."""
    return keys_per_query * (model.num_attention_heads * core_attention_flops_per_score(model))


def _core_attention_all_layers(model: ModelSpec, seq_len: int) -> float:
    """Core attention of all L + D attention layers, per token."""
    full = _core_attention_flops(model, causal_keys_per_query(seq_len))
    windows = model.num_window_layers
    total = (model.num_layers + model.mtp_layers - windows) * full
    if windows:
        keys = causal_keys_per_query(seq_len, model.sliding_window)
        total += windows * _core_attention_flops(model, keys)
    return total


def core_attention_fwd_flops(model: ModelSpec, seq_len: int, layer: int | None = None) -> float:
    """Scores QK^T and context P·V of attention layer `layer` (MTP layers from num_layers on),
    per token, causal; `layer` None gives the mean over the L + D attention layers, which is
    every layer's value unless some layers have a sliding window."""
    if layer is None:
        return _core_attention_all_layers(model, seq_len) / (model.num_layers + model.mtp_layers)
    window = model.sliding_window if model.is_window_layer(layer) else None
    return _core_attention_flops(model, causal_keys_per_query(seq_len, window))


def dense_mlp_fwd_flops(model: ModelSpec) -> float:
    """Dense FFN of one layer, per token."""
    return 2.0 * model.mlp_weights(model.ffn_hidden_size)


def expert_fwd_flops(model: ModelSpec) -> float:
    """ONE token through ONE routed expert (a token visits moe_router_topk of them)."""
    return 2.0 * model.mlp_weights(model.moe_ffn_hidden_size)


def shared_expert_fwd_flops(model: ModelSpec) -> float:
    """Shared expert of one MoE layer, per token (0 without a shared expert)."""
    return 2.0 * model.mlp_weights(model.moe_shared_expert_intermediate_size)


def router_fwd_flops(model: ModelSpec) -> float:
    """Router GEMM h -> E, per token. Executed, but NOT part of Megatron's model FLOPs."""
    return 2.0 * model.hidden_size * model.num_experts


def logits_fwd_flops(model: ModelSpec, tp: int = 1) -> float:
    """One output head h -> padded vocab at `tp`, per token."""
    return 2.0 * model.hidden_size * model.padded_vocab_size(tp)


def mtp_proj_fwd_flops(model: ModelSpec) -> float:
    """One MTP layer's eh_proj 2h -> h plus its three norms, per token: 2·(3h + 2h²)."""
    return 2.0 * model.mtp_extra_params


def model_flops_per_token(model: ModelSpec, seq_len: int, tp: int = 1) -> float:
    """Megatron model FLOPs per token, forward + backward, for sequences of `seq_len`."""
    mtp = model.mtp_layers
    moe_layers = model.num_moe_layers + (mtp if model.mtp_is_moe else 0)
    dense_layers = model.num_layers + mtp - moe_layers
    moe_block = model.moe_router_topk * expert_fwd_flops(model) + shared_expert_fwd_flops(model)
    forward = (dense_layers * dense_mlp_fwd_flops(model)
               + moe_layers * moe_block
               + (model.num_layers + mtp) * attention_linear_fwd_flops(model)
               + _core_attention_all_layers(model, seq_len)
               + mtp * mtp_proj_fwd_flops(model)
               + (1 + mtp) * logits_fwd_flops(model, tp))
    return FWD_BWD_FACTOR * forward


def model_flops_per_step(model: ModelSpec, seq_len: int, global_batch: int, tp: int = 1) -> float:
    """Megatron model FLOPs of one iteration over `global_batch` sequences of `seq_len`."""
    if global_batch < 1:
        raise ValueError(f"global_batch={global_batch}: must be >= 1")
    return model_flops_per_token(model, seq_len, tp) * seq_len * global_batch


# How sources count model FLOPs (../shared/data/README.md `flops_formula`): Megatron with
# causal halving; NeMo's older Megatron without it; TorchTitan's 6N + full attention; Meta's
# Llama 3 paper, whose MFU is PaLM's (arXiv 2407.21783 §3.3.2, p. 10: "MFU; Chowdhery et al.
# (2023)"), 6N + 12LHQT per token (PaLM, arXiv 2204.02311, App. B), which is TorchTitan's count
# (it cites that appendix); the DeepSeek production row, derived from Megatron's count with MTP.
FLOPS_FORMULAS = ("megatron-causal", "megatron-noncausal", "torchtitan", "llama3", "derived")


def reported_flops_per_token(model: ModelSpec, seq_len: int, formula: str, tp: int = 1) -> float:
    """FLOPs per token as a source's `formula` counts them (for TFLOP/s comparisons).

    megatron-noncausal counts every key of full-attention layers (core attention twice the
    causal count); torchtitan (and llama3, the same count) is 6 x the active matmul parameters
    (all but the input embedding) + 6 x layers x seq x the attention widths, with no causal
    halving and no MTP attention (deepseek-v3-and-flops.md §3.1)."""
    if formula in ("megatron-causal", "derived"):
        return model_flops_per_token(model, seq_len, tp)
    if formula == "megatron-noncausal":
        full = _core_attention_flops(model, causal_keys_per_query(seq_len))
        extra = (model.num_layers + model.mtp_layers - model.num_window_layers) * full
        return model_flops_per_token(model, seq_len, tp) + FWD_BWD_FACTOR * extra
    if formula in ("torchtitan", "llama3"):
        matmul = model.active_params() - model.embedding_params
        attention = model.num_layers * _core_attention_flops(model, float(seq_len))
        return FWD_BWD_FACTOR * (2.0 * matmul + attention)
    raise ValueError(f"flops_formula={formula!r}: known are {', '.join(FLOPS_FORMULAS)}")
