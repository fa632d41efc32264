"""The executed work of each block of a layer, on one GPU, for one micro batch.

Every block's forward work is its per-token FLOPs times the tokens one GPU handles,
T = mbs * seq / (tp * cp) (tensor parallelism with sequence parallelism splits both the GEMMs
and the token-wise kernels; balanced experts give every GPU T * top-k token-expert pairs).
Backward GEMMs cost 2x forward (data and weight gradients); fused attention backward costs
2.5x forward (it recomputes the scores). Router, permutation, norms and quantisation are
executed work that model FLOPs do not credit; so are recompute and capacity padding (with an
expert capacity factor each expert's input is padded to factor x the balanced load and the
grouped GEMMs run on the padded rows), and the memory-bound kernels around the experts' GEMMs
(activation, quantisation, bias), whose bytes run in series with them. HybridEP's expert-rank
capacity only sizes the buffers (the static shapes a full-iteration CUDA graph needs): the
grouped kernels read the per-expert token counts on the device and leave the buffer's unused
rows alone (Megatron-LM docs/user-guide/features/paged_stash.md, "sync-free" experts;
TransformerEngine tests/pytorch/mxfp8/test_mxfp8_group_quantize_graph_safe.py, where a
buffer of M rows holding M/2 tokens is quantised as its M/2). Fused attention's softmax takes
one exponential per score forward and again backward, where the kernel recomputes the
probabilities (`Work.exponentials`); a sliding-window kernel's efficiency is measured whole,
its exponentials included, so it carries none.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from workloads import flops
from workloads.graph import KernelClass, Work
from workloads.models import ModelSpec
from workloads.parallelism import ParallelPlan
from workloads.recipes import NCCL_DISPATCHERS, Recipe

BF16_BYTES = 2
BACKWARD_GEMM_FACTOR = 2.0
BACKWARD_ATTENTION_FACTOR = 2.5
# Blocks a TE-scoped ("partial") CUDA graph captures: attention, router and preprocessing,
# and the shared expert (Megatron-LM cuda-graph-scope attn, moe_router, moe_preprocess).
# The shared expert only with graph_shared_expert and without shared-expert overlap (guide §2.3).
PARTIAL_GRAPH_BLOCKS = frozenset({"norms", "attn_proj", "core_attn", "router", "shared_expert",
                                  "dense_mlp"})
# Blocks whose FP8 quantisation kernels launch with programmatic dependent launch (recipe.pdl).
PDL_BLOCKS = frozenset({"norms", "attn_proj", "experts", "shared_expert", "dense_mlp"})
# Kernel launches per block (forward, backward), counted from Megatron Core / TE modules.
# The router's and the routed experts' counts depend on the recipe (_router_kernels,
# _expert_kernels); here the experts' fixed part (activation, bookkeeping).
KERNELS = {"norms": (4, 6), "attn_proj": (14, 24), "core_attn": (2, 4), "experts": (6, 10),
           "unpermute": (3, 3), "shared_expert": (5, 8),
           "dense_mlp": (5, 8), "embedding": (2, 2), "logits": (3, 4), "loss": (4, 4),
           "mtp_proj": (4, 6), "optimizer": (12, 12)}

# Router and EP preprocessing, forward + backward: 72 kernels unfused, 31 with router fusion
# (guide §2.1.4); a flex dispatcher (DeepEP/HybridEP) fuses the preprocessing, 31 -> 17
# (guide §2.2.1). `guide` = Megatron-LM docs/discussions/deepseek-v3-gb200-optimization.
ROUTER_KERNELS_UNFUSED, ROUTER_KERNELS_FUSED, FLEX_PREPROCESS_SAVED_KERNELS = 72, 31, 14
# MCore's MXFP8 grouped GEMM is multi-stream cuBLAS (guide §1 item 3): every local expert's
# GEMMs are launches of their own, each quantised tensor its own kernel. TE's GroupedLinear
# quantises one tensor per layer each way: forward its input, backward its output gradient
# (the weight gradient reuses the input's column-wise copy saved forward). Per local expert
# (forward, backward): fc1's and fc2's GEMMs (backward a data and a weight gradient each)
# plus those quantisations (4, 6); without pooled scale buffers, a torch.zeros per row- and
# column-wise scale of each quantised tensor (+4, +4; guide §2.1.2); without the fused
# swizzle, a swizzle per GEMM operand's scales (+4, +8; guide §2.1.3). BF16 experts: the
# GEMMs alone (2, 4).
EXPERT_GEMM_KERNELS = {"bf16": (2, 4), "quantised": (4, 6)}
EXPERT_SCALE_ALLOC_KERNELS = (4, 4)
EXPERT_SWIZZLE_KERNELS = (4, 8)
# Without permute fusion, the router's permutation and the unpermute run as unfused
# kernels, up to 10x slower than TE's fused one when top-k << experts (TE PR 1927, guide
# §2.1.1): KernelClass.UNFUSED_PERMUTE, slowed by CostParams.unfused_permute_slowdown.
# The fused grouped MLP of TE's operation fuser (recipe.fused_grouped_mlp, MXFP8 only) runs all
# local experts in 2 launches forward (FC1 + SwiGLU + quantisation of the hidden activation,
# then FC2) and 4 backward (FC2 dgrad + dSwiGLU + quantisation, FC1 dgrad, two weight
# gradients): TransformerEngine PR 2622, as the same cuDNN fused ops count them in
# pytorch/torchtitan PR 4257.
FUSED_GROUPED_MLP_KERNELS = (2, 4)
# The fused MLP's FC2-dgrad + dGLU kernel with the experts' bias gradient reduced in it takes
# 155.632 us where it takes 139.392 us without (cuDNN's grouped GEMM dGLU, SM100, the issue's
# shape; NVIDIA/cudnn-frontend PR 322). The fitted fused-MLP rate is the kernels' without a
# bias (the rows that set it have none), so models with linear_bias pay this on top.
DBIAS_KERNEL_SLOWDOWN = 155.632 / 139.392
# The fused MLP's cuDNN kernels (grouped GEMM + GLU, + quantisation, + dGLU, weight gradient)
# run 256 x 256 MMA tiles, and TE passes no other (cudnn-frontend python/cudnn/grouped_gemm/
# */api.py: mma_tiler_mn = (256, 256); TransformerEngine ops/fused/grouped_mlp.py), with a K
# step of four 32-wide MXFP8 MMA instructions, 128 (CUTLASS DSL blockscaled kernels:
# mma_inst_tile_k = 4). A width that is no multiple of its tile runs the last tile whole.
FUSED_MLP_TILE_MN = 256
FUSED_MLP_TILE_K = 128
# Memory-bound kernels around the routed experts' GEMMs (Work.streaming_hbm_bytes), bytes per
# element: quantising a BF16 tensor to FP8 reads 2 and writes a row-wise and a column-wise
# copy (1 + 1; the scales are 1/32 or less of that); SwiGLU reads gate and up and writes
# their product (2 + 2 + 2), its backward reads the product's gradient, gate and up and
# writes both gradients (2 + 4 + 4). A non-gated activation moves half of each.
QUANTISE_BYTES = 4
ACTIVATION_FWD_BYTES, ACTIVATION_BWD_BYTES = 6, 10
# GPT-OSS's clamped GLU (ModelSpec.clamped_glu) unfused: Megatron-Core runs chunk, two clamps
# and cat as eager ops around a compiled GLU (megatron/core/fusions/fused_bias_geglu.py), about
# 3 reads and 2.5 writes of the [pairs, 2f] BF16 tensor forward and 4.5 reads and 3 writes
# backward: 22 and 30 bytes per hidden element.
CLAMPED_ACTIVATION_FWD_BYTES, CLAMPED_ACTIVATION_BWD_BYTES = 22, 30
# With linear_bias and the unfused experts, FC2's bias is added per local expert after the
# GEMM (TEGroupedMLP._apply_bias: t + b * p, then torch.cat): two passes over [pairs, h] each
# way forward (8 bytes per element), the bias gradient's reduction reads the gradient again
# with the cat's backward (4); 2 kernels per local expert and the cat forward, 1 per local
# expert backward.
EXPERT_BIAS_FWD_BYTES, EXPERT_BIAS_BWD_BYTES = 8, 4
# Context parallelism, Megatron's default cp_comm_type "p2p": Transformer Engine's
# AttnFuncWithCPAndKVP2P (transformer_engine/pytorch/attention/dot_product_attention/
# context_parallel.py) splits each layer's core attention into cp steps around the CP ring.
# With the load-balanced causal layout (rank r holds sequence chunks r and 2cp-1-r) every step
# computes as many scores. Step i runs on the keys and values that exchange i-1 brought, while
# exchange i passes them on: forward cp-1 exchanges of K and V; backward cp, K and V first,
# then K, V and the partial dK, dV, then dK, dV alone (`ring_exchanges`). Around the steps,
# memory-bound kernels counted from that code. Per step after the first (forward, backward):
# forward a contiguous copy of the half-chunk operand, the softmax-statistics correction and
# the output correction (the step's partial output read, the accumulated output read and
# written, BF16: 6 bytes per output element, as the first step's); backward a half-chunk copy
# and the dQ and dKV accumulations (6 bytes per element each). Once per layer: forward the cat
# of K and V into the send buffer and the first step's output; backward the first step's
# three, the copy of K and V into the buffers, dout's and the statistics' contiguous copies and
# the final dKV add.
RING_STEP_KERNELS, RING_FIXED_KERNELS = (3, 3), (2, 7)
RING_MERGE_BYTES = 6
# Fusing MXFP8 quantisation into the norm (cuDNN, guide §2.1.5) saves a kernel per norm
# each way and one pass over the normalised activations.
NORM_QUANT_FUSED_SAVED_KERNELS = (2, 2)


def _router_kernels(recipe: Recipe) -> tuple[int, int]:
    total = ROUTER_KERNELS_FUSED if recipe.router_fusion else ROUTER_KERNELS_UNFUSED
    if recipe.dispatcher not in NCCL_DISPATCHERS:
        total -= FLEX_PREPROCESS_SAVED_KERNELS
    return (total + 1) // 2, total // 2


def fuses_grouped_mlp(recipe: Recipe) -> bool:
    """Whether the routed experts run as TE's fused grouped MLP (MXFP8 only)."""
    return recipe.fused_grouped_mlp and recipe.precision == "mxfp8"


def expert_streaming_bytes(model: ModelSpec, recipe: Recipe) -> tuple[float, float]:
    """HBM bytes per token-expert pair of the experts' memory-bound kernels (forward,
    backward): the activation function, and with FP8/FP4 the quantisation of FC1's input, of
    the hidden activation and of their gradients. The fused grouped MLP keeps only the
    quantisation of FC1's input (forward) and of FC2's output gradient (backward)."""
    h, f, gate = model.hidden_size, model.moe_ffn_hidden_size, _gate_share(model)
    quantised = recipe.precision != "bf16"
    if fuses_grouped_mlp(recipe):
        return QUANTISE_BYTES * h, QUANTISE_BYTES * h
    forward, backward = (activation_bytes(model)[0] * gate * f,
                         activation_bytes(model)[1] * gate * f)
    if quantised:
        forward += QUANTISE_BYTES * (h + f)
        backward += QUANTISE_BYTES * (h + 2 * gate * f)
    if model.linear_bias:
        forward += EXPERT_BIAS_FWD_BYTES * h
        backward += EXPERT_BIAS_BWD_BYTES * h
    return forward, backward


def _dbias_backward_factor(model: ModelSpec, recipe: Recipe) -> float:
    """How many times as long the fused grouped MLP's backward takes when its dGLU kernel also
    reduces the experts' bias gradient (DBIAS_KERNEL_SLOWDOWN as designed, times
    recipe.fused_mlp_dbias_slowdown): that kernel is FC2's data gradient, h·f of the
    backward's 2·(h·f + h·f_1) weights-worth of GEMMs (f_1 = 2f gated, f otherwise)."""
    if not (model.linear_bias and fuses_grouped_mlp(recipe)):
        return 1.0
    fc1 = (model.ffn_matrices - 1) * model.moe_ffn_hidden_size
    share = model.moe_ffn_hidden_size / (2 * (model.moe_ffn_hidden_size + fc1))
    return 1 + (DBIAS_KERNEL_SLOWDOWN * recipe.fused_mlp_dbias_slowdown - 1) * share


def _tile_waste(width: int, tile: int) -> float:
    """Work a kernel does along a dimension of `width` in whole tiles, over the useful work."""
    return -(-width // tile) * tile / width


def fused_mlp_tile_factors(model: ModelSpec) -> tuple[float, float]:
    """How many times the useful MMA work the fused MLP's kernels do (forward, backward) at
    their tiles (FUSED_MLP_TILE_MN, FUSED_MLP_TILE_K), each GEMM weighted by its FLOPs: 1.0
    where the hidden size h and the FC1 width g*f (g = 2 gated) divide by the tiles.
    Forward: FC1 (N = g*f, K = h) and FC2 (N = h, K = f). Backward: FC2's data gradient with
    the dGLU (N = f, K = h), FC1's (N = h, K = g*f), and the weight gradients, tiled over both
    of the weights' dimensions (h x f and g*f x h; K is the tokens)."""
    h, f = model.hidden_size, model.moe_ffn_hidden_size
    g = model.ffn_matrices - 1
    mn, k = FUSED_MLP_TILE_MN, FUSED_MLP_TILE_K
    forward = (g * _tile_waste(g * f, mn) * _tile_waste(h, k)
               + _tile_waste(h, mn) * _tile_waste(f, k)) / (g + 1)
    data_gradients = (_tile_waste(f, mn) * _tile_waste(h, k)
                      + g * _tile_waste(h, mn) * _tile_waste(g * f, k))
    weight_gradients = _tile_waste(h, mn) * (_tile_waste(f, mn) + g * _tile_waste(g * f, mn))
    backward = (data_gradients + weight_gradients) / (2 * (g + 1))
    return forward, backward


def _gate_share(model: ModelSpec) -> float:
    """What a non-gated activation moves of a gated one's bytes."""
    return 1.0 if model.swiglu else 0.5


def activation_bytes(model: ModelSpec) -> tuple[int, int]:
    """HBM bytes per hidden element of the experts' unfused gated activation (forward,
    backward)."""
    if model.clamped_glu:
        return CLAMPED_ACTIVATION_FWD_BYTES, CLAMPED_ACTIVATION_BWD_BYTES
    return ACTIVATION_FWD_BYTES, ACTIVATION_BWD_BYTES


def _expert_kernels(model: ModelSpec, plan: ParallelPlan, recipe: Recipe) -> tuple[int, int]:
    if fuses_grouped_mlp(recipe):
        return FUSED_GROUPED_MLP_KERNELS
    local_experts = max(1, model.num_experts // plan.ep)
    base_fwd, base_bwd = KERNELS["experts"]
    if model.linear_bias:
        base_fwd, base_bwd = base_fwd + 2 * local_experts + 1, base_bwd + local_experts
    if recipe.precision == "bf16":
        per_fwd, per_bwd = EXPERT_GEMM_KERNELS["bf16"]
    else:
        per_fwd, per_bwd = EXPERT_GEMM_KERNELS["quantised"]
        for fused, extra in ((recipe.quant_alloc_fusion, EXPERT_SCALE_ALLOC_KERNELS),
                             (recipe.swizzle_fusion, EXPERT_SWIZZLE_KERNELS)):
            if not fused:
                per_fwd, per_bwd = per_fwd + extra[0], per_bwd + extra[1]
    return base_fwd + local_experts * per_fwd, base_bwd + local_experts * per_bwd


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockWork:
    """Forward and backward work of one block; `recompute` is forward work redone in backward."""

    forward: Work
    backward: Work
    recompute: Work | None = None


def tokens_per_gpu(plan: ParallelPlan) -> float:
    """Tokens of one micro batch that one GPU processes in token-parallel kernels."""
    return plan.mbs * plan.seq_len / (plan.tp * plan.cp)


def _graphed(block: str, recipe: Recipe) -> bool:
    if recipe.cuda_graphs == "full":
        return True
    if block == "shared_expert":
        return (recipe.cuda_graphs == "partial" and recipe.graph_shared_expert
                and not recipe.shared_expert_overlap)
    return recipe.cuda_graphs == "partial" and block in PARTIAL_GRAPH_BLOCKS


def _gemm(block: str, fwd_flops: float, hbm_bytes: float, precision: str, recipe: Recipe,
          kernel_class: KernelClass = KernelClass.GEMM,
          backward_factor: float = BACKWARD_GEMM_FACTOR,
          kernels: tuple[int, int] | None = None) -> BlockWork:
    fwd_kernels, bwd_kernels = kernels or KERNELS[block]
    graphed = _graphed(block, recipe)
    pdl = recipe.pdl and block in PDL_BLOCKS and precision != "bf16"
    forward = Work(flops=fwd_flops, hbm_bytes=hbm_bytes, kernel_class=kernel_class,
                   precision=precision, kernels=fwd_kernels, graphed=graphed, pdl=pdl)
    backward = Work(flops=fwd_flops * backward_factor, hbm_bytes=2 * hbm_bytes,
                    kernel_class=kernel_class, precision=precision, kernels=bwd_kernels,
                    graphed=graphed, pdl=pdl)
    return BlockWork(forward=forward, backward=backward)


def _memory(block: str, hbm_bytes: float, recipe: Recipe,
            kernels: tuple[int, int] | None = None, precision: str = "bf16") -> BlockWork:
    return _gemm(block, 0.0, hbm_bytes, precision, recipe, KernelClass.MEMORY,
                 kernels=kernels)


def _with_recompute(block: BlockWork, recomputed: bool) -> BlockWork:
    if not recomputed:
        return block
    return BlockWork(forward=block.forward, backward=block.backward, recompute=block.forward)


def _mla_up_proj_flops(model: ModelSpec) -> float:
    n = model.num_attention_heads
    q_up = (model.q_lora_rank or 0) * n * (model.qk_head_dim + model.qk_pos_emb_head_dim)
    kv_up = model.kv_lora_rank * n * (model.qk_head_dim + model.v_head_dim)
    return 2.0 * (q_up + kv_up)


def _norms(elements: float, recipe: Recipe) -> BlockWork:
    """Norms, residual adds and the activations' quantisation: 7 passes over h per token,
    6 and two kernels fewer each way when cuDNN fuses the quantisation into the norm."""
    fwd, bwd = KERNELS["norms"]
    if recipe.norm_quant_fusion and recipe.precision != "bf16":
        saved_fwd, saved_bwd = NORM_QUANT_FUSED_SAVED_KERNELS
        return _memory("norms", elements * 6 * BF16_BYTES, recipe,
                       (fwd - saved_fwd, bwd - saved_bwd), recipe.precision)
    return _memory("norms", elements * 7 * BF16_BYTES, recipe, precision=recipe.precision)


def attention_blocks(model: ModelSpec, plan: ParallelPlan, recipe: Recipe,
                     layer: int | None = None) -> dict[str, BlockWork]:
    """Norms (with residuals and quantisation), attention projections, core attention of
    attention layer `layer` (its sliding window, if any, as its own kernel class; None = the
    mean layer)."""
    tokens, h = tokens_per_gpu(plan), model.hidden_size
    modules = set(recipe.recompute_modules)
    full = "full" in modules
    norms = _norms(tokens * h, recipe)
    proj = _gemm("attn_proj", tokens * flops.attention_linear_fwd_flops(model),
                 tokens * h * 4 * BF16_BYTES, recipe.precision, recipe)
    if "mla_up_proj" in modules and model.attention == "mla" and not full:
        up = _gemm("attn_proj", tokens * _mla_up_proj_flops(model), 0.0, recipe.precision,
                   recipe)
        proj = BlockWork(forward=proj.forward, backward=proj.backward, recompute=up.forward)
    windowed = (layer is not None and model.is_window_layer(layer)
                and (model.sliding_window or 0) < plan.seq_len)
    core_flops = tokens * flops.core_attention_fwd_flops(model, plan.seq_len, layer)
    core = _gemm("core_attn", core_flops, 0.0, "fp8" if recipe.fp8_attention else "bf16",
                 recipe, KernelClass.WINDOW_ATTENTION if windowed else KernelClass.ATTENTION,
                 BACKWARD_ATTENTION_FACTOR)
    if not windowed:
        scores = core_flops / flops.core_attention_flops_per_score(model)
        head_dim = model.query_key_head_dim
        core = BlockWork(
            forward=replace(core.forward, exponentials=scores, head_dim=head_dim),
            backward=replace(core.backward, exponentials=scores, head_dim=head_dim))
    return {"norms": _with_recompute(norms, full or "layernorm" in modules),
            "attn_proj": _with_recompute(proj, full),
            "core_attn": _with_recompute(core, full or "core_attn" in modules)}


def _ring_kv_elements(model: ModelSpec, plan: ParallelPlan) -> float:
    """Elements of one GPU's keys and values for one micro batch. MLA keeps its up-projected
    per-head keys and values; GQA one key and one value per query group, a TP rank holding at
    least one group."""
    tokens = plan.mbs * plan.seq_len / plan.cp
    if model.attention == "mla":
        return tokens * model.num_attention_heads / plan.tp * (model.query_key_head_dim
                                                               + model.v_head_dim)
    return tokens * max(model.query_groups / plan.tp, 1.0) * 2 * model.head_dim


def ring_kv_bytes(model: ModelSpec, plan: ParallelPlan, recipe: Recipe) -> float:
    """The message of one exchange of context parallelism's ring: one GPU's keys and values
    of a micro batch, in FP8 with FP8 attention, else in BF16."""
    return _ring_kv_elements(model, plan) * (1 if recipe.fp8_attention else BF16_BYTES)


def ring_exchanges(cp: int, backward: bool) -> tuple[int, ...]:
    """Messages of one layer's ring, in units of `ring_kv_bytes`: forward cp - 1 exchanges of
    K and V; backward cp, K and V first, then K, V and the partial dK, dV, the last dK, dV
    alone (see RING_STEP_KERNELS)."""
    if not backward:
        return (1,) * (cp - 1)
    return (1,) + (2,) * (cp - 2) + (1,)


def ring_attention(core: BlockWork, model: ModelSpec, plan: ParallelPlan,
                   recipe: Recipe) -> tuple[BlockWork, BlockWork]:
    """Core attention under context parallelism (see RING_STEP_KERNELS): one step of the
    ring, 1/cp of the layer's scores, and the memory-bound kernels that merge the steps."""
    cp = plan.cp
    tokens, heads = plan.mbs * plan.seq_len / cp, model.num_attention_heads / plan.tp
    out = tokens * heads * (model.v_head_dim if model.attention == "mla" else model.head_dim)
    query = tokens * heads * model.query_key_head_dim
    kv, kv_bytes = _ring_kv_elements(model, plan), ring_kv_bytes(model, plan, recipe)
    forward_bytes = (cp + 1) * kv_bytes + RING_MERGE_BYTES * cp * out
    backward_bytes = (2 + cp) * kv_bytes + RING_MERGE_BYTES * (cp * (query + kv) + kv)
    graphed = _graphed("core_attn", recipe)
    fwd_kernels, bwd_kernels = (fixed + (cp - 1) * per_step for fixed, per_step
                                in zip(RING_FIXED_KERNELS, RING_STEP_KERNELS))
    merge_forward = Work(flops=0.0, hbm_bytes=forward_bytes, kernel_class=KernelClass.MEMORY,
                         precision="bf16", kernels=fwd_kernels, graphed=graphed)
    merge_backward = Work(flops=0.0, hbm_bytes=backward_bytes, kernel_class=KernelClass.MEMORY,
                          precision="bf16", kernels=bwd_kernels, graphed=graphed)

    def step_of(work: Work) -> Work:
        return replace(work, flops=work.flops / cp, exponentials=work.exponentials / cp)

    step = BlockWork(forward=step_of(core.forward), backward=step_of(core.backward),
                     recompute=None if core.recompute is None else step_of(core.recompute))
    merge = BlockWork(forward=merge_forward, backward=merge_backward,
                      recompute=None if core.recompute is None else merge_forward)
    return step, merge


def moe_blocks(model: ModelSpec, plan: ParallelPlan, recipe: Recipe) -> dict[str, BlockWork]:
    """Router with permutation, routed experts (grouped GEMM), unpermute, shared expert."""
    tokens, h, k = tokens_per_gpu(plan), model.hidden_size, model.moe_router_topk
    modules = set(recipe.recompute_modules)
    whole = bool({"full", "moe"} & modules)
    pairs = tokens * k
    padded = pairs * (recipe.expert_capacity_factor or 1.0)
    permute = KernelClass.GEMM if recipe.permute_fusion else KernelClass.UNFUSED_PERMUTE
    router = _gemm("router", tokens * flops.router_fwd_flops(model),
                   (tokens * h + 2 * pairs * h) * BF16_BYTES, "bf16", recipe, permute,
                   kernels=_router_kernels(recipe))
    unpermute = _gemm("unpermute", 0.0, 2 * pairs * h * BF16_BYTES, "bf16", recipe,
                      KernelClass.MEMORY if recipe.permute_fusion else permute)
    experts = _gemm("experts", padded * flops.expert_fwd_flops(model),
                    padded * (h + model.moe_ffn_hidden_size) * 2 * BF16_BYTES, recipe.precision,
                    recipe, (KernelClass.FUSED_GROUPED_MLP if fuses_grouped_mlp(recipe)
                             else KernelClass.GROUPED_GEMM),
                    kernels=_expert_kernels(model, plan, recipe))
    streaming_fwd, streaming_bwd = expert_streaming_bytes(model, recipe)
    tiles_fwd, tiles_bwd = (fused_mlp_tile_factors(model) if fuses_grouped_mlp(recipe)
                            else (1.0, 1.0))
    experts = BlockWork(
        forward=replace(experts.forward, streaming_hbm_bytes=padded * streaming_fwd,
                        flops=experts.forward.flops * tiles_fwd),
        backward=replace(experts.backward, streaming_hbm_bytes=padded * streaming_bwd,
                         flops=(experts.backward.flops * tiles_bwd
                                * _dbias_backward_factor(model, recipe))))
    if "moe_act" in modules and not whole:
        act_bytes = (pairs * model.moe_ffn_hidden_size * _gate_share(model)
                     * activation_bytes(model)[0])
        experts = BlockWork(forward=experts.forward, backward=experts.backward,
                            recompute=_memory("experts", act_bytes, recipe).forward)
    blocks = {"router": _with_recompute(router, whole),
              "experts": _with_recompute(experts, whole),
              "unpermute": _with_recompute(unpermute, whole)}
    if model.moe_shared_expert_intermediate_size:
        shared = _gemm("shared_expert", tokens * flops.shared_expert_fwd_flops(model),
                       tokens * h * 2 * BF16_BYTES, recipe.precision, recipe)
        blocks["shared_expert"] = _with_recompute(
            shared, whole or "shared_experts" in modules)
    return blocks


def dense_mlp_block(model: ModelSpec, plan: ParallelPlan, recipe: Recipe) -> BlockWork:
    tokens = tokens_per_gpu(plan)
    mlp = _gemm("dense_mlp", tokens * flops.dense_mlp_fwd_flops(model),
                tokens * model.hidden_size * 2 * BF16_BYTES, recipe.precision, recipe)
    return _with_recompute(mlp, bool({"full", "mlp"} & set(recipe.recompute_modules)))


def head_blocks(model: ModelSpec, plan: ParallelPlan, recipe: Recipe) -> dict[str, BlockWork]:
    """Embedding lookup, output logits (kept in BF16), cross entropy, MTP projection."""
    tokens_seq = plan.mbs * plan.seq_len / plan.cp
    vocab = model.padded_vocab_size(plan.tp)
    h = model.hidden_size
    return {
        "embedding": _memory("embedding", tokens_seq * h * BF16_BYTES / plan.tp, recipe),
        "logits": _gemm("logits", tokens_seq * flops.logits_fwd_flops(model, plan.tp) / plan.tp,
                        tokens_seq * vocab * BF16_BYTES / plan.tp, "bf16", recipe,
                        KernelClass.LOGITS),
        "loss": _memory("loss", tokens_seq * vocab * 3 * BF16_BYTES / plan.tp, recipe),
        "mtp_proj": _gemm("mtp_proj", tokens_per_gpu(plan) * flops.mtp_proj_fwd_flops(model),
                          tokens_per_gpu(plan) * h * 3 * BF16_BYTES, recipe.precision, recipe),
    }


def optimizer_work(params_per_gpu: float, recipe: Recipe, graphed: bool) -> Work:
    """Adam on this GPU's shard: read gradient, read and write states and main weights,
    write the model weight (bytes per parameter from the recipe)."""
    bytes_per_param = 2 * recipe.optimizer_state_bytes_per_param + 2 * BF16_BYTES
    return Work(flops=0.0, hbm_bytes=params_per_gpu * bytes_per_param,
                kernel_class=KernelClass.MEMORY, precision="bf16",
                kernels=KERNELS["optimizer"][0], graphed=graphed)
