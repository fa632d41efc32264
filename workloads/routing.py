"""Where a token's copies go under expert parallelism: how many distinct ranks (or NVLink
domains) hold its top-k experts, which decides what a deduplicating dispatcher (DeepEP,
HybridEP) sends; NCCL's all-to-all sends one copy per token-expert pair. And how many bytes
each copy weighs: BF16, or FP8 on the way to the experts with FP8 dispatch.

The benchmark runs force-balanced routing (random logits through the router's top-k), so a
token's experts are uniform, within the groups that group-limited routing chose uniformly.
"""

from __future__ import annotations

from itertools import combinations
from math import comb

from workloads.models import ModelSpec
from workloads.parallelism import ParallelPlan
from workloads.blocks import BF16_BYTES
from workloads.recipes import NCCL_DISPATCHERS, Recipe

# FP8 dispatch (Recipe.fp8_dispatch; DeepSeek-V3 report §3.3.2, research/deepseek-v3-and-
# flops.md §1): a token goes to its experts as FP8, a byte an element, with a scale per block
# of 128 elements (DeepSeek's 1x128 tiles, FP32: 4 bytes) or of 32 (MXFP8, E8M0: 1 byte), a
# 32nd of a byte an element either way.
FP8_DISPATCH_BYTES_PER_ELEMENT = 1 + 1 / 32
# The share of its BF16 rate at which a dispatcher's kernel sends FP8 tokens. HybridEP's
# dispatch: 539 against 642 GB/s of algorithm bandwidth (GB200 NVL72, EP32, 4,096 tokens of
# hidden 7,168, top-8, 32 SMs; DeepEP's hybrid-ep branch, docs/README_Hybrid-EP.md, in
# research/hardware-and-recipes.md). DeepEP's normal kernels dispatch FP8 at the bottleneck
# bandwidth they combine BF16 at (H800: 153 / 158 GB/s over NVLink; 43 / 43, 58 / 57 and
# 51 / 50 GB/s over RDMA at EP16, 32 and 64; DeepEP docs/legacy.md): the same rate.
FP8_DISPATCH_RATE = {"hybridep": 539 / 642, "deepep": 1.0}


def expected_destinations(experts: int, topk: int, holders: int, groups: int = 1,
                          group_topk: int = 1) -> float:
    """Expected distinct holders (ranks, domains) of a token's top-k experts when `experts`
    are split evenly over `holders`, the token's experts come from `group_topk` of `groups`
    equal groups chosen uniformly, and uniformly from within them (force-balanced routing:
    random logits through the group-limited top-k). Without groups this is
    holders * (1 - C(E - E/holders, k) / C(E, k)); with them, for each holder, the chance
    that none of the k picks from the chosen groups' pool P = group_topk * E / groups lands on
    it, summed over which of the groups it overlaps are chosen:

        P(miss) = sum_T P(chosen ∩ touched = T) * C(P - sum_{i in T} c_i, k) / C(P, k)

    with c_i its experts in group i."""
    per_group, per_holder = experts // groups, experts // holders
    pool = group_topk * per_group
    total = 0.0
    for holder in range(holders):
        first, last = holder * per_holder, (holder + 1) * per_holder
        overlaps = [min(last, (g + 1) * per_group) - max(first, g * per_group)
                    for g in range(first // per_group, (last - 1) // per_group + 1)]
        miss = sum(comb(groups - len(overlaps), group_topk - len(chosen))
                   / comb(groups, group_topk)
                   * comb(pool - sum(chosen), topk) / comb(pool, topk)
                   for size in range(len(overlaps) + 1)
                   for chosen in combinations(overlaps, size))
        total += 1 - miss
    return total


def routing_of(model: ModelSpec) -> tuple[int, int, int, int]:
    """(experts, top-k, groups, chosen groups) of the model's router."""
    return (model.num_experts, model.moe_router_topk, model.moe_router_num_groups,
            model.moe_router_group_topk)


def dispatch_copies_per_token(model: ModelSpec, plan: ParallelPlan, recipe: Recipe) -> float:
    """Copies of a token that leave for the experts: top-k per pair with NCCL dispatchers;
    one per distinct destination rank with DeepEP/HybridEP (force-balanced routing)."""
    if recipe.dispatcher in NCCL_DISPATCHERS:
        return float(model.moe_router_topk)
    experts, topk, groups, chosen = routing_of(model)
    return expected_destinations(experts, topk, plan.ep, groups, chosen)


def dispatch_payload_bytes(recipe: Recipe, to_experts: bool) -> float:
    """Bytes an EP all-to-all moves per element of a token's copy: BF16's 2, or with FP8
    dispatch, towards the experts (the forward dispatch, the backward's gradient for the
    experts' down-projection), FP8 with its scales divided by the share of its BF16 rate that
    the dispatcher's kernel reaches in FP8 (a flow at efficiency e needs 1/e of the line-rate
    time, simulator.collectives)."""
    if not (recipe.fp8_dispatch and to_experts):
        return float(BF16_BYTES)
    return FP8_DISPATCH_BYTES_PER_ELEMENT / FP8_DISPATCH_RATE[recipe.dispatcher]
