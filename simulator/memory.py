"""Per-GPU memory at the peak of a step: weights, gradients, optimizer states, activations in
flight, communication buffers and a fixed framework reserve.

    weights     = P * 2 (BF16); FSDP without a pipeline: the shard plus two gathered layers
                  (one prefetched); under one, all P stay gathered for the step
    gradients   = P * grad bytes; FSDP without a pipeline: the shard plus one layer being
                  reduced; under one, all P accumulate unreduced
    optimizer   = (P_dense / (dp * cp) + P_expert / expert_dp) * optimizer bytes per parameter
    activations = units in flight * tokens per GPU * sum over the unit's layers of the bytes
                  a layer keeps for backward (less what recompute discards), less the
                  share of the rank's layers whose activations are offloaded to the host

Units in flight on a pipeline rank are its warm-up forwards plus the one in progress. The
per-token activation bytes follow the layer's saved tensors (Korthikanti et al. 2022 style):
inputs of every GEMM and of the attention kernel, at one byte per element where FP8 GEMMs
keep FP8 copies.
"""

from __future__ import annotations

from dataclasses import dataclass

from topologies.hardware import GPUSpec
from workloads.blocks import BF16_BYTES, tokens_per_gpu
from workloads.routing import dispatch_copies_per_token
from workloads.models import ModelSpec
from workloads.parallelism import (ParallelPlan, fsdp_gathers_once_per_step,
                                   microbatches_per_run, pipeline_layout)
from workloads.recipes import Recipe
from workloads.schedules import activations_in_flight, chunk_stages
from workloads.step_params import chunk_params, rank_params

GIB = 2**30
# CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers and allocator fragmentation: a few GB
# on every training GPU (PyTorch CUDA caching allocator notes; NCCL_BUFFSIZE x channels).
FRAMEWORK_RESERVE_BYTES = 4 * GIB


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryEstimate:
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    buffers_bytes: float
    reserve_bytes: float = FRAMEWORK_RESERVE_BYTES

    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes + self.buffers_bytes + self.reserve_bytes)

    def as_dict(self) -> dict[str, float]:
        return {"weights": self.weights_bytes, "gradients": self.gradients_bytes,
                "optimizer": self.optimizer_bytes, "activations": self.activations_bytes,
                "buffers": self.buffers_bytes, "reserve": self.reserve_bytes,
                "total": self.total_bytes}


def _gemm_input_bytes(recipe: Recipe) -> float:
    return 1.0 if recipe.precision != "bf16" else BF16_BYTES


def attention_activation_bytes_per_token(model: ModelSpec, recipe: Recipe, tp: int) -> float:
    """Bytes one attention block keeps per token: residual, norm output, projections'
    outputs that feed attention, attention output."""
    h, n = model.hidden_size, model.num_attention_heads
    modules = set(recipe.recompute_modules)
    gemm = _gemm_input_bytes(recipe)
    kept = 2 * h * BF16_BYTES + h * gemm
    if model.attention == "mla":
        lora = ((model.q_lora_rank or 0) + model.kv_lora_rank + model.qk_pos_emb_head_dim)
        kept += 2 * lora * BF16_BYTES
        if "mla_up_proj" not in modules:
            qkv = n * (model.qk_head_dim + model.qk_pos_emb_head_dim) \
                + n * (model.qk_head_dim + model.v_head_dim)
            kept += qkv * BF16_BYTES / tp
        kept += n * model.v_head_dim * gemm / tp
    else:
        kv = (model.num_query_groups or n) * model.head_dim
        kept += (n * model.head_dim + 2 * kv) * BF16_BYTES / tp + n * model.head_dim * gemm / tp
    return kept


def mlp_activation_bytes_per_token(model: ModelSpec, plan: ParallelPlan, recipe: Recipe,
                                   moe: bool) -> float:
    """Bytes an FFN or MoE block keeps per token (SwiGLU: fc1 output and activation output)."""
    modules = set(recipe.recompute_modules)
    gemm = _gemm_input_bytes(recipe)
    h = model.hidden_size
    if not moe:
        if "mlp" in modules:
            return h * gemm
        return h * gemm + model.ffn_hidden_size * (2 * BF16_BYTES + gemm) / plan.tp
    if "moe" in modules:
        return h * BF16_BYTES
    pairs, f = model.moe_router_topk, model.moe_ffn_hidden_size
    act = 0.0 if "moe_act" in modules else f * gemm
    kept = h * BF16_BYTES + pairs * (h * gemm + 2 * f * BF16_BYTES + act)
    shared = model.moe_shared_expert_intermediate_size
    if shared and "shared_experts" not in modules:
        kept += (2 * shared * BF16_BYTES + shared * gemm) / plan.tp
    return kept


def _unit_activation_bytes(model: ModelSpec, plan: ParallelPlan, recipe: Recipe,
                           symbols: tuple[str, ...], first_layer: int) -> float:
    if "full" in recipe.recompute_modules:
        return symbols.count("t") * model.hidden_size * BF16_BYTES * tokens_per_gpu(plan)
    per_token, layer = 0.0, first_layer
    for symbol in symbols:
        if symbol in ("t", "m"):
            moe = model.mtp_is_moe if symbol == "m" else model.is_moe_layer(layer)
            per_token += attention_activation_bytes_per_token(model, recipe, plan.tp)
            per_token += mlp_activation_bytes_per_token(model, plan, recipe, moe)
            layer += symbol == "t"
        elif symbol == "L":
            per_token += model.padded_vocab_size(plan.tp) * 4 / plan.tp
    return per_token * tokens_per_gpu(plan)


def activation_bytes(model: ModelSpec, plan: ParallelPlan, recipe: Recipe, stage: int) -> float:
    """Peak activations on a GPU of pipeline stage `stage` (its chunks' mean unit size)."""
    stages = pipeline_layout(plan, model)
    schedule = recipe.pipeline_schedule
    virtuals = chunk_stages(schedule, stage, plan.pp, plan.vpp)
    units = [_unit_activation_bytes(model, plan, recipe, stages[v],
                                    sum(s.count("t") for s in stages[:v])) for v in virtuals]
    in_flight = activations_in_flight(schedule, stage, plan.pp, plan.vpp,
                                      microbatches_per_run(plan, recipe.local_batch_size),
                                      recipe.a2a_overlap)
    layers = sum(stages[v].count("t") for v in virtuals)
    on_gpu = 1.0 - min(recipe.activation_offload_layers, layers) / max(layers, 1)
    return in_flight * on_gpu * sum(units) / len(units)


def buffer_bytes(model: ModelSpec, plan: ParallelPlan, recipe: Recipe) -> float:
    """EP dispatch/combine send and receive buffers (sized to the larger capacity factor)."""
    if not model.is_moe:
        return 0.0
    copies = dispatch_copies_per_token(model, plan, recipe)
    factor = max(recipe.expert_capacity_factor or 1.0, recipe.rank_capacity_factor or 1.0)
    return 4 * tokens_per_gpu(plan) * copies * model.hidden_size * BF16_BYTES * factor


def estimate_memory(model: ModelSpec, plan: ParallelPlan, recipe: Recipe,
                    stage: int) -> MemoryEstimate:
    stages = pipeline_layout(plan, model)
    dense, expert = rank_params(model, plan, stages, recipe.pipeline_schedule, stage)
    params = dense + expert
    fsdp = plan.dp_sharding == "fsdp" and not fsdp_gathers_once_per_step(plan)
    # Megatron shards dense state over data parallelism with context parallelism (CP ranks
    # hold the same weights): parallel_state's data-parallel group with_context_parallel.
    shard = dense / (plan.dp * plan.cp) + expert / plan.expert_dp
    layer = max(sum(chunk_params(model, plan, stages, v)) / max(1, len(stages[v]))
                for v in chunk_stages(recipe.pipeline_schedule, stage, plan.pp, plan.vpp))
    return MemoryEstimate(
        weights_bytes=(shard + 2 * layer if fsdp else params) * BF16_BYTES,
        gradients_bytes=(shard + layer if fsdp else params) * recipe.grad_reduce_dtype_bytes,
        optimizer_bytes=shard * recipe.optimizer_state_bytes_per_param,
        activations_bytes=activation_bytes(model, plan, recipe, stage),
        buffers_bytes=buffer_bytes(model, plan, recipe))


def peak_memory(model: ModelSpec, plan: ParallelPlan, recipe: Recipe) -> MemoryEstimate:
    """The estimate of the pipeline stage that needs the most memory."""
    return max((estimate_memory(model, plan, recipe, stage) for stage in range(plan.pp)),
               key=lambda estimate: estimate.total_bytes)


def check_fits(estimate: MemoryEstimate, gpu: GPUSpec) -> None:
    """Raise a one-line error with the breakdown when the plan does not fit in usable HBM."""
    if estimate.total_bytes <= gpu.hbm_capacity_bytes:
        return
    parts = ", ".join(f"{key} {value / GIB:.1f}" for key, value in estimate.as_dict().items())
    raise ValueError(f"memory: the plan needs {estimate.total_bytes / GIB:.1f} GiB per GPU but "
                     f"{gpu.name} has {gpu.hbm_capacity_bytes / GIB:.1f} GiB usable ({parts} GiB);"
                     " use more pipeline/expert parallelism or recompute")
