"""Parameters held by one GPU, split into dense (replicated over attention DP) and expert
(replicated over expert DP) parameters, per virtual stage of the pipeline layout.

    dense per GPU  = attention / tp + norms + (dense FFN | shared expert) / tp + router
                     (+ embedding or output head / tp on the stages that hold them)
    expert per GPU = experts of its layers * E / (ep * etp) per MoE layer
"""

from __future__ import annotations

from workloads.layout import Layout
from workloads.models import ModelSpec
from workloads.parallelism import ParallelPlan
from workloads.schedules import chunk_stages


def _layer_params(model: ModelSpec, plan: ParallelPlan, moe: bool) -> tuple[float, float]:
    dense = model.attention_params_per_layer / plan.tp + 2 * model.hidden_size
    if not moe:
        return dense + model.dense_mlp_params / plan.tp, 0.0
    dense += model.shared_expert_params / plan.tp + model.router_params
    expert = model.expert_params * model.num_experts / (plan.ep * plan.etp)
    return dense, expert


def chunk_params(model: ModelSpec, plan: ParallelPlan, stages: Layout,
                 virtual: int) -> tuple[float, float]:
    """(dense, expert) parameters of virtual stage `virtual` on one of its GPUs."""
    first = sum(stage.count("t") for stage in stages[:virtual])
    dense = expert = 0.0
    layer = first
    for symbol in stages[virtual]:
        if symbol == "t":
            d, e = _layer_params(model, plan, model.is_moe_layer(layer))
            layer += 1
        elif symbol == "m":
            d, e = _layer_params(model, plan, model.mtp_is_moe)
            d += model.mtp_extra_params
        elif symbol in ("E", "L"):
            d, e = model.embedding_params / plan.tp, 0.0
        dense, expert = dense + d, expert + e
    return dense, expert


def rank_params(model: ModelSpec, plan: ParallelPlan, stages: Layout, schedule: str,
                stage: int) -> tuple[float, float]:
    """(dense, expert) parameters on one GPU of pipeline stage `stage`, all its chunks."""
    parts = [chunk_params(model, plan, stages, virtual)
             for virtual in chunk_stages(schedule, stage, plan.pp, plan.vpp)]
    return sum(p[0] for p in parts), sum(p[1] for p in parts)
