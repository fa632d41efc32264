"""The GB200 guide's kernel-level features act through mechanisms: kernel counts, kernel
speed, launch gaps and host cost; and the ladder's recipe turns them on step by step."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from simulator.calibration import DEFAULT_PARAMS, host_params, params_value, params_with
from simulator.costs import combine, compute_time_s
from simulator.fitting import DEFAULT_FIT, touches
from simulator.memory import buffer_bytes
from simulator.scenario import default_scenario, run_scenario
from simulator.validation import row_recipe
from topologies.hardware import gpu_spec
from topologies.systems import load_system
from workloads.blocks import (attention_blocks, expert_streaming_bytes, fused_mlp_tile_factors,
                              head_blocks, moe_blocks)
from workloads.graph import KernelClass, Work
from workloads.models import model_spec
from workloads.parallelism import ParallelPlan
from workloads.recipes import (GB200_GUIDE_STEPS, guide_step_recipe, recipe, recipe_with,
                               static_expert_shapes)

DSV3 = model_spec("deepseek-v3")
PLAN = ParallelPlan(num_gpus=256, tp=1, pp=8, vpp=4, ep=32, mbs=1, gbs=2048, seq_len=4096)


def _launches(block, recipe_, plan=PLAN):
    work = moe_blocks(DSV3, plan, recipe_)[block]
    return work.forward.kernels, work.backward.kernels


def _kernels(block, recipe_, plan=PLAN):
    return sum(_launches(block, recipe_, plan))


def test_router_kernels_follow_the_guide_counts():
    eager = recipe("megatron-defaults")
    assert _kernels("router", eager) == 72
    assert _kernels("router", recipe_with(eager, router_fusion=True)) == 31
    flex = recipe_with(eager, router_fusion=True, dispatcher="deepep", dispatcher_sms=24)
    assert _kernels("router", flex) == 17


def test_expert_launches_grow_with_local_experts_and_shrink_with_fusions():
    base = guide_step_recipe(0)
    ep64 = replace(PLAN, num_gpus=512, ep=64)
    assert _kernels("experts", base, ep64) < _kernels("experts", base)
    fused = recipe_with(base, quant_alloc_fusion=True, swizzle_fusion=True)
    assert _kernels("experts", fused) < _kernels("experts", base)
    assert (_kernels("experts", recipe_with(base, precision="bf16", fp8_param_gather=False))
            < _kernels("experts", fused))


def test_expert_launches_follow_te_quantising_one_tensor_per_layer_each_way():
    """TE's GroupedLinear quantises a layer's input forward and its output gradient backward:
    one quantisation per fc each way, two scale buffers each; swizzles follow the GEMMs."""
    local = DSV3.num_experts // PLAN.ep
    base = guide_step_recipe(0)
    fwd, bwd = _launches("experts", base)
    for feature, saved in (("quant_alloc_fusion", (4, 4)), ("swizzle_fusion", (4, 8))):
        fused_fwd, fused_bwd = _launches("experts", recipe_with(base, **{feature: True}))
        assert (fwd - fused_fwd, bwd - fused_bwd) == (saved[0] * local, saved[1] * local)
    pooled = recipe_with(base, quant_alloc_fusion=True, swizzle_fusion=True)
    bf16 = recipe_with(pooled, precision="bf16", fp8_param_gather=False)
    quantised, plain = _launches("experts", pooled), _launches("experts", bf16)
    assert (quantised[0] - plain[0], quantised[1] - plain[1]) == (2 * local, 2 * local)


def test_unfused_permute_is_its_own_kernel_class_and_slower():
    gpu = gpu_spec("gb200")
    unfused = moe_blocks(DSV3, PLAN, guide_step_recipe(0))["unpermute"].forward
    fused = moe_blocks(DSV3, PLAN, guide_step_recipe(1))["unpermute"].forward
    assert unfused.kernel_class == KernelClass.UNFUSED_PERMUTE
    params = replace(DEFAULT_PARAMS, unfused_permute_slowdown=4.0, kernel_gap_s=0.0)
    assert compute_time_s(unfused, gpu, params) == pytest.approx(
        4.0 * compute_time_s(fused, gpu, params))


def test_a_kernel_s_math_and_memory_combine_by_the_overlap_exponent():
    assert combine(3.0, 1.0, math.inf) == 3.0
    assert combine(3.0, 1.0, 1.0) == pytest.approx(4.0)
    assert combine(1.0, 1.0, 2.0) == pytest.approx(math.sqrt(2))
    assert combine(0.0, 2.0, 2.0) == 2.0
    assert combine(100.0, 1.0, 2.0) == pytest.approx(100.0, rel=1e-4)


def test_a_gemm_near_the_ridge_slows_most_when_the_roofline_s_corner_rounds():
    """At p = 2 a GEMM whose math and HBM times are equal takes sqrt(2) times the roofline's;
    one ten times as long in math as in memory only 0.5 % longer; p = inf is the roofline."""
    gpu = gpu_spec("gb300")
    params = replace(DEFAULT_PARAMS, kernel_gap_s=0.0, graphed_kernel_gap_s=0.0,
                     roofline_overlap_exponent=math.inf)
    rounded = replace(params, roofline_overlap_exponent=2.0)
    bandwidth = gpu.hbm_bandwidth_bytes_per_s * params.memory_efficiency
    flops_per_s = gpu.peak("fp8") * params.gemm_efficiency["blackwell-ultra-fp8"]
    for ratio, slowdown in ((1.0, math.sqrt(2)), (10.0, math.sqrt(1.01))):
        work = Work(flops=ratio * flops_per_s * 1e-3, hbm_bytes=bandwidth * 1e-3,
                    kernel_class=KernelClass.GEMM, precision="mxfp8", kernels=1,
                    graphed=False)
        assert compute_time_s(work, gpu, params) == pytest.approx(ratio * 1e-3)
        assert compute_time_s(work, gpu, rounded) == pytest.approx(slowdown * ratio * 1e-3)


def test_norm_quant_fusion_saves_kernels_and_bytes_only_in_fp8():
    off, on = guide_step_recipe(11), guide_step_recipe(12)
    norms_off = attention_blocks(DSV3, PLAN, off)["norms"].forward
    norms_on = attention_blocks(DSV3, PLAN, on)["norms"].forward
    assert norms_on.kernels < norms_off.kernels and norms_on.hbm_bytes < norms_off.hbm_bytes
    bf16 = recipe_with(on, precision="bf16", fp8_param_gather=False)
    assert attention_blocks(DSV3, PLAN, bf16)["norms"].forward.kernels == norms_off.kernels


def test_pdl_hides_kernel_gaps_of_quantised_blocks():
    gpu = gpu_spec("gb200")
    without = moe_blocks(DSV3, PLAN, guide_step_recipe(7))["experts"].forward
    with_pdl = replace(without, pdl=True)
    assert not without.pdl
    assert compute_time_s(with_pdl, gpu, DEFAULT_PARAMS) < compute_time_s(without, gpu,
                                                                          DEFAULT_PARAMS)


def test_shared_expert_is_graphed_only_when_captured_and_not_overlapped():
    partial = recipe_with(guide_step_recipe(8), cuda_graphs="partial")
    assert not moe_blocks(DSV3, PLAN, partial)["shared_expert"].forward.graphed
    captured = recipe_with(partial, graph_shared_expert=True)
    assert moe_blocks(DSV3, PLAN, captured)["shared_expert"].forward.graphed
    overlapped = recipe_with(captured, shared_expert_overlap=True)
    assert not moe_blocks(DSV3, PLAN, overlapped)["shared_expert"].forward.graphed


def test_unbound_host_launches_take_longer():
    slow = host_params(DEFAULT_PARAMS, numa_bound=False)
    assert slow.host_launch_s == pytest.approx(DEFAULT_PARAMS.host_launch_s
                                               * DEFAULT_PARAMS.unbound_host_slowdown)
    assert host_params(DEFAULT_PARAMS, numa_bound=True) is DEFAULT_PARAMS


def test_a_grace_host_launches_slower_than_an_x86_host():
    grace = host_params(DEFAULT_PARAMS, numa_bound=False, host_cpu="grace")
    assert grace.host_launch_s == pytest.approx(
        DEFAULT_PARAMS.host_launch_s * DEFAULT_PARAMS.unbound_host_slowdown
        * DEFAULT_PARAMS.grace_host_slowdown)
    assert gpu_spec("gb200").host_cpu == gpu_spec("gb300").host_cpu == "grace"
    assert gpu_spec("b300").host_cpu == gpu_spec("h100").host_cpu == "x86"
    with pytest.raises(ValueError, match="host_cpu='arm'.*x86, grace"):
        replace(gpu_spec("b200"), host_cpu="arm")


def test_te_s_host_clean_up_speeds_its_launches_and_the_host_bound_step(make_scenario):
    """Ladder step 11 cleans up TE's host code: each eager launch costs less CPU time (not
    Megatron's schedule nodes), so a step whose host is exposed runs faster."""
    clean = host_params(DEFAULT_PARAMS, numa_bound=True, te_host_cleanup=True)
    assert clean.host_launch_s == pytest.approx(
        DEFAULT_PARAMS.host_launch_s / DEFAULT_PARAMS.te_host_cleanup_speedup)
    assert clean.host_launch_s < DEFAULT_PARAMS.host_launch_s
    assert clean.schedule_node_host_s == DEFAULT_PARAMS.schedule_node_host_s
    assert not guide_step_recipe(10).te_host_cleanup and guide_step_recipe(11).te_host_cleanup
    eager = recipe_with(recipe("mbridge-26.06"), cuda_graphs="none")
    scenarios = [make_scenario(recipe_=recipe_with(eager, te_host_cleanup=on))
                 for on in (False, True)]
    before, after = (run_scenario(s).metrics for s in scenarios)
    assert after.breakdown_s["launch"] < before.breakdown_s["launch"]
    assert after.step_time_s < before.step_time_s
    assert touches("te_host_cleanup_speedup", scenarios[1], DEFAULT_PARAMS)
    assert not touches("te_host_cleanup_speedup", scenarios[0], DEFAULT_PARAMS)
    with pytest.raises(ValueError, match="te_host_cleanup_speedup=0.5: must be >= 1"):
        replace(DEFAULT_PARAMS, te_host_cleanup_speedup=0.5)


def test_guide_steps_are_cumulative_and_bounded():
    assert not guide_step_recipe(0).router_fusion
    assert guide_step_recipe(2).router_fusion and guide_step_recipe(12).router_fusion
    assert not guide_step_recipe(6).host_numa_bound and guide_step_recipe(7).host_numa_bound
    final = guide_step_recipe(max(GB200_GUIDE_STEPS))
    for changes in GB200_GUIDE_STEPS.values():
        for field, value in changes.items():
            assert getattr(final, field) == value
    with pytest.raises(ValueError, match="step=13"):
        guide_step_recipe(13)


def test_a_ladder_row_gets_its_step_recipe_with_its_columns_on_top():
    row = {"name": "ladder-gb200-07-cpu-bindpcie", "release": "mbridge-gb200-guide-2025-11",
           "precision": "mxfp8", "recompute": "mlp+moe_act", "dispatcher": "deepep",
           "cuda_graphs": "partial", "a2a_overlap": "0", "fp8_attention": "0"}
    made = row_recipe(row)
    assert made.host_numa_bound and made.router_fusion and not made.pdl
    assert made.dispatcher == "deepep" and made.recompute_modules == ("mlp", "moe_act")


def test_touches_skips_rows_a_parameter_cannot_change():
    gb300 = default_scenario()
    assert touches("gemm_efficiency.blackwell-ultra-fp8", gb300, DEFAULT_PARAMS)
    assert not touches("gemm_efficiency.hopper-fp8", gb300, DEFAULT_PARAMS)
    assert touches("comm_efficiency.hybridep-nvlink", gb300, DEFAULT_PARAMS)
    assert not touches("comm_efficiency.deepep-nvlink", gb300, DEFAULT_PARAMS)
    assert not touches("unbound_host_slowdown", gb300, DEFAULT_PARAMS)
    partial = replace(gb300, recipe=recipe_with(gb300.recipe, cuda_graphs="partial"))
    for host_key in ("host_launch_s", "grace_host_slowdown"):  # a full graph needs no host
        assert not touches(host_key, gb300, DEFAULT_PARAMS)
        assert touches(host_key, partial, DEFAULT_PARAMS)
    small = replace(gb300, plan=replace(gb300.plan, num_gpus=64, gbs=1024))
    assert touches("comm_efficiency.nccl-network", gb300, DEFAULT_PARAMS)
    assert not touches("comm_efficiency.nccl-network", small, DEFAULT_PARAMS)  # one domain
    # EP32 inside the NVL72 recipe's 64-GPU domains; across domains of 16
    assert not touches("comm_efficiency.hybridep-network", gb300, DEFAULT_PARAMS)
    assert touches("comm_efficiency.hybridep-network", replace(gb300, domain_size=16),
                   DEFAULT_PARAMS)
    dense = replace(partial, model=model_spec("llama3-8b"))
    assert touches("grouped_gemm_efficiency.fp8", replace(
        partial, recipe=recipe_with(partial.recipe, fused_grouped_mlp=False)), DEFAULT_PARAMS)
    assert not touches("grouped_gemm_efficiency.fp8", partial, DEFAULT_PARAMS)  # all fused
    assert not touches("grouped_gemm_efficiency.fp8", dense, DEFAULT_PARAMS)
    assert touches("comm_efficiency.alltoall-nvlink", replace(
        gb300, recipe=recipe_with(gb300.recipe, dispatcher="alltoall", dispatcher_sms=0)),
        DEFAULT_PARAMS)
    assert not touches("comm_efficiency.alltoall-nvlink", gb300, DEFAULT_PARAMS)
    assert not touches("schedule_node_host_s", gb300, DEFAULT_PARAMS)
    assert touches("schedule_node_host_s", partial, DEFAULT_PARAMS)
    fp8_attention = replace(gb300, recipe=recipe_with(gb300.recipe, fp8_attention=True))
    qwen3 = replace(fp8_attention, model=model_spec("qwen3-30b-a3b"))
    for key, scenario in (("blackwell-ultra-fp8", fp8_attention),
                          ("blackwell-ultra-fp8-d128", qwen3)):
        assert touches(f"attention_efficiency.{key}", scenario, DEFAULT_PARAMS)
    for key, scenario in (("blackwell-ultra-fp8-d128", fp8_attention),
                          ("blackwell-ultra-fp8", qwen3), ("blackwell-ultra-bf16-d128", qwen3)):
        assert not touches(f"attention_efficiency.{key}", scenario, DEFAULT_PARAMS)


def test_touches_tells_an_8_gpu_baseboard_from_a_rack_for_nvlink_rates():
    """DeepEP on a DGX H100 reads deepep-nvlink8; on an NVL72 rack, or squeezed into 8-GPU
    domains of it, the other key; a dispatcher without an nvlink8 entry reads nvlink on both,
    and a fit that gives it one (the entry it fits) on the baseboard."""
    gb300 = replace(default_scenario(), recipe=recipe_with(default_scenario().recipe,
                                                           dispatcher="deepep"))
    dgx = replace(gb300, system=load_system("dgx-h100"), domain_size=None)
    squeezed = replace(gb300, domain_size=8)
    assert touches("comm_efficiency.deepep-nvlink", gb300, DEFAULT_PARAMS)
    assert not touches("comm_efficiency.deepep-nvlink8", gb300, DEFAULT_PARAMS)
    for board in (dgx, squeezed):
        assert touches("comm_efficiency.deepep-nvlink8", board, DEFAULT_PARAMS)
        assert not touches("comm_efficiency.deepep-nvlink", board, DEFAULT_PARAMS)
    alltoall = replace(dgx, recipe=recipe_with(dgx.recipe, dispatcher="alltoall",
                                               dispatcher_sms=0))
    assert touches("comm_efficiency.alltoall-nvlink", alltoall, DEFAULT_PARAMS)
    assert touches("comm_efficiency.alltoall-nvlink8", alltoall, DEFAULT_PARAMS)


def test_fused_grouped_mlp_launches_six_kernels_whatever_the_local_experts():
    fused = recipe_with(recipe("mbridge-26.06"), fused_grouped_mlp=True)
    for ep in (32, 64):
        plan = replace(PLAN, num_gpus=8 * ep, ep=ep)
        experts = moe_blocks(DSV3, plan, fused)["experts"]
        assert (experts.forward.kernels, experts.backward.kernels) == (2, 4)
        assert experts.forward.kernel_class == KernelClass.FUSED_GROUPED_MLP
    unfused = moe_blocks(DSV3, PLAN, recipe_with(fused, fused_grouped_mlp=False))["experts"]
    assert unfused.forward.kernel_class == KernelClass.GROUPED_GEMM
    assert unfused.forward.kernels > 2


def test_fused_grouped_mlp_changes_nothing_outside_mxfp8():
    for precision in ("bf16", "fp8-cs"):
        base = recipe_with(recipe("mbridge-26.06"), precision=precision, fp8_attention=False,
                           fused_grouped_mlp=False)
        fused = recipe_with(base, fused_grouped_mlp=True)
        assert moe_blocks(DSV3, PLAN, fused) == moe_blocks(DSV3, PLAN, base)


def test_fused_grouped_mlp_runs_at_its_own_efficiency():
    gpu = gpu_spec("gb300")
    work = moe_blocks(DSV3, PLAN, recipe("mbridge-26.06"))["experts"].forward
    grouped = {key: value for key, value in DEFAULT_PARAMS.grouped_gemm_efficiency.items()
               if not key.startswith("fused-")} | {"fused-fp8": 0.46}
    params = replace(DEFAULT_PARAMS, kernel_gap_s=0.0, graphed_kernel_gap_s=0.0,
                     grouped_gemm_efficiency=grouped, roofline_overlap_exponent=math.inf)
    slow = replace(params, grouped_gemm_efficiency={**grouped, "fused-fp8": 0.25})
    fast = replace(params, grouped_gemm_efficiency={**grouped, "fused-fp8": 0.5})
    other = replace(params, grouped_gemm_efficiency={**grouped, "fp8": 0.1})
    streaming_s = work.streaming_hbm_bytes / (gpu.hbm_bandwidth_bytes_per_s
                                              * params.memory_efficiency)
    assert compute_time_s(work, gpu, slow) - streaming_s == pytest.approx(
        2 * (compute_time_s(work, gpu, fast) - streaming_s))
    assert compute_time_s(work, gpu, other) == pytest.approx(compute_time_s(work, gpu, params))
    assert touches("grouped_gemm_efficiency.fused-fp8", _scenario(recipe("mbridge-26.06")),
                   params)
    assert not touches("grouped_gemm_efficiency.fused-fp8",
                       _scenario(recipe("mbridge-26.02")), params)


def test_an_architecture_s_fused_mlp_rate_overrides_the_shared_one_on_that_architecture():
    work = moe_blocks(DSV3, PLAN, recipe("mbridge-26.06"))["experts"].forward
    grouped = {"fp8": 0.44, "fused-fp8": 0.46}
    shared = replace(DEFAULT_PARAMS, grouped_gemm_efficiency=grouped)
    own = replace(DEFAULT_PARAMS, grouped_gemm_efficiency={
        **grouped, "fused-blackwell-ultra-fp8": 0.6})
    gb300, gb200 = gpu_spec("gb300"), gpu_spec("gb200")
    assert compute_time_s(work, gb300, own) < compute_time_s(work, gb300, shared)
    assert compute_time_s(work, gb200, own) == compute_time_s(work, gb200, shared)
    assert params_value(own, "grouped_gemm_efficiency.fused-blackwell-ultra-fp8") == 0.6
    assert params_value(own, "grouped_gemm_efficiency.fused-blackwell-fp8") == 0.46
    on_gb300 = _scenario(recipe("mbridge-26.06"))
    on_gb200 = replace(on_gb300, system=load_system("gb200-nvl72"))
    assert touches("grouped_gemm_efficiency.fused-blackwell-ultra-fp8", on_gb300, own)
    assert not touches("grouped_gemm_efficiency.fused-blackwell-ultra-fp8", on_gb200, own)
    assert not touches("grouped_gemm_efficiency.fused-fp8", on_gb300, own)
    assert touches("grouped_gemm_efficiency.fused-fp8", on_gb200, own)
    with pytest.raises(ValueError, match="fused-volta-fp8: not a key the cost model reads"):
        replace(DEFAULT_PARAMS, grouped_gemm_efficiency={"fused-volta-fp8": 0.5})


def _scenario(recipe_):
    return replace(default_scenario(), recipe=recipe_)


def test_expert_streaming_bytes_count_activation_and_quantisation_passes():
    h, f = DSV3.hidden_size, DSV3.moe_ffn_hidden_size
    bf16 = recipe_with(recipe("megatron-defaults"), precision="bf16")
    assert expert_streaming_bytes(DSV3, bf16) == (6 * f, 10 * f)
    fp8 = recipe_with(bf16, precision="mxfp8")
    assert expert_streaming_bytes(DSV3, fp8) == (6 * f + 4 * (h + f), 10 * f + 4 * (h + 2 * f))
    fused = recipe_with(fp8, fused_grouped_mlp=True)
    assert expert_streaming_bytes(DSV3, fused) == (4 * h, 4 * h)
    plain = replace(DSV3, swiglu=False)
    assert expert_streaming_bytes(plain, bf16) == (3 * f, 5 * f)


def test_streaming_bytes_run_in_series_with_the_gemms(toy_gpu, ideal_params):
    gemm = Work(flops=2e9, hbm_bytes=1e9, kernel_class=KernelClass.GEMM, precision="bf16",
                kernels=0, graphed=False)
    assert compute_time_s(gemm, toy_gpu, ideal_params) == pytest.approx(2e-3)
    with_streaming = replace(gemm, streaming_hbm_bytes=5e8)
    assert compute_time_s(with_streaming, toy_gpu, ideal_params) == pytest.approx(2.5e-3)


def test_expert_tasks_carry_their_streaming_bytes_per_padded_pair():
    capped = recipe_with(recipe("mbridge-26.06"), expert_capacity_factor=1.25)
    experts = moe_blocks(DSV3, PLAN, capped)["experts"]
    pairs = PLAN.mbs * PLAN.seq_len * DSV3.moe_router_topk * 1.25
    fwd, bwd = expert_streaming_bytes(DSV3, capped)
    assert experts.forward.streaming_hbm_bytes == pytest.approx(pairs * fwd)
    assert experts.backward.streaming_hbm_bytes == pytest.approx(pairs * bwd)


def test_rank_capacity_sizes_buffers_but_the_experts_compute_only_the_received_tokens():
    sync_free = recipe("mbridge-26.06")
    assert sync_free.rank_capacity_factor == 1.5 and sync_free.expert_capacity_factor is None
    padded = recipe_with(sync_free, rank_capacity_factor=None, expert_capacity_factor=1.5)
    dropless = recipe_with(sync_free, rank_capacity_factor=None)
    recipes = {"rank": sync_free, "padded": padded, "dropless": dropless}
    flops = {name: moe_blocks(DSV3, PLAN, r)["experts"].forward.flops
             for name, r in recipes.items()}
    assert flops["rank"] == flops["dropless"] == pytest.approx(flops["padded"] / 1.5)
    buffers = {name: buffer_bytes(DSV3, PLAN, r) for name, r in recipes.items()}
    assert buffers["rank"] == buffers["padded"] == pytest.approx(1.5 * buffers["dropless"])
    assert static_expert_shapes(sync_free) and static_expert_shapes(padded)
    assert not static_expert_shapes(dropless)


GPT_OSS = model_spec("gpt-oss-120b")
GPT_OSS_PLAN = ParallelPlan(num_gpus=64, ep=64, mbs=4, gbs=1280, seq_len=4096)


def test_gpt_oss_clamped_glu_and_expert_bias_move_more_bytes_unfused():
    bf16 = recipe_with(recipe("megatron-defaults"), precision="bf16")
    h, f = GPT_OSS.hidden_size, GPT_OSS.moe_ffn_hidden_size
    assert expert_streaming_bytes(GPT_OSS, bf16) == (22 * f + 8 * h, 30 * f + 4 * h)
    plain = replace(GPT_OSS, clamped_glu=False, linear_bias=False)
    assert expert_streaming_bytes(plain, bf16) == (6 * f, 10 * f)
    with_bias = moe_blocks(GPT_OSS, GPT_OSS_PLAN, bf16)["experts"].forward.kernels
    without = moe_blocks(replace(GPT_OSS, linear_bias=False), GPT_OSS_PLAN, bf16)["experts"]
    assert with_bias - without.forward.kernels == 2 * (128 // 64) + 1


def test_sliding_window_layers_run_at_the_window_efficiency():
    gpu = gpu_spec("gb200")
    blocks_by_layer = [attention_blocks(GPT_OSS, GPT_OSS_PLAN, recipe("megatron-defaults"),
                                        layer)["core_attn"] for layer in (0, 1)]
    window, full = (b.forward for b in blocks_by_layer)
    assert window.kernel_class == KernelClass.WINDOW_ATTENTION
    assert full.kernel_class == KernelClass.ATTENTION
    params = replace(DEFAULT_PARAMS, kernel_gap_s=0.0)
    table = dict(params.attention_efficiency)
    half = replace(params, attention_efficiency={**table,
                                                 "window-bf16": table["window-bf16"] / 2})
    assert compute_time_s(window, gpu, half) == pytest.approx(
        2 * compute_time_s(window, gpu, params))
    assert compute_time_s(full, gpu, half) == compute_time_s(full, gpu, params)
    long_window = attention_blocks(replace(GPT_OSS, sliding_window=8192), GPT_OSS_PLAN,
                                   recipe("megatron-defaults"), 0)["core_attn"].forward
    assert long_window.kernel_class == KernelClass.ATTENTION


@pytest.mark.parametrize("model_name, head_dim, gpu_name, precision, measured_ms", [
    ("deepseek-v3", 192, "gb200", "fp8", 0.696 + 2.549),
    ("deepseek-v3", 192, "gb300", "fp8", 0.531 + 2.293),
    ("deepseek-v3", 192, "gb200", "bf16", 1.004 + 3.354),
    ("deepseek-v3", 192, "gb300", "bf16", 0.815 + 3.107),
    ("llama3-70b", 128, "gb200", "fp8", 0.324 + 1.390),
    ("llama3-70b", 128, "gb300", "fp8", 0.235 + 1.256),
    ("llama3-70b", 128, "gb200", "bf16", 0.417 + 1.248),
    ("llama3-70b", 128, "gb300", "bf16", 0.316 + 1.129)])
def test_fused_attention_matches_cudnn_benchmark(model_name, head_dim, gpu_name, precision,
                                                 measured_ms):
    """cuDNN 9.27's attention benchmark (batch 2, 4,096 causal tokens, MXFP8 or BF16, forward
    + backward; NVIDIA/cudnn-frontend results/dsv3 and results/llama3.1, 2026-09-28): the
    matmuls at their efficiency plus the exponentials on the SFU give the measured time on
    both GPUs, so GB300's faster SFU shows where it should; DeepSeek-V3's heads (192 + 128) run
    at the general efficiency, Llama 3.1's (64 query and 8 key/value heads of dim 128) at the
    head-dim one, where MXFP8 attention is no faster than BF16."""
    plan = ParallelPlan(num_gpus=8, tp=1, pp=1, ep=8, mbs=2, gbs=16, seq_len=4096)
    recipe_ = recipe_with(recipe("megatron-defaults"), precision="mxfp8",
                          fp8_attention=precision == "fp8")
    core = attention_blocks(model_spec(model_name), plan, recipe_)["core_attn"]
    assert core.forward.head_dim == head_dim
    params = replace(DEFAULT_PARAMS, kernel_gap_s=0.0, graphed_kernel_gap_s=0.0)
    gpu = gpu_spec(gpu_name)
    seconds = compute_time_s(core.forward, gpu, params) + compute_time_s(core.backward, gpu,
                                                                         params)
    assert seconds * 1e3 == pytest.approx(measured_ms, rel=0.03)


def test_fp8_window_attention_runs_at_its_slow_measured_rate():
    """cuDNN's MXFP8 sliding-window backward is 4.5x slower than BF16's, so FP8 attention
    makes GPT-OSS's window layers slower, not faster: 2.27 / 0.67 ms on GB200 and 2.02 / 0.62
    on GB300 (same benchmark, results/gpt_oss)."""
    gpu = gpu_spec("gb200")
    window = {fp8: attention_blocks(GPT_OSS, GPT_OSS_PLAN,
                                    recipe_with(recipe("megatron-defaults"), precision="mxfp8",
                                                fp8_attention=fp8),
                                    0)["core_attn"] for fp8 in (False, True)}
    params = replace(DEFAULT_PARAMS, kernel_gap_s=0.0)
    seconds = {fp8: compute_time_s(w.forward, gpu, params) + compute_time_s(w.backward, gpu,
                                                                            params)
               for fp8, w in window.items()}
    assert window[True].forward.kernel_class == KernelClass.WINDOW_ATTENTION
    assert seconds[True] / seconds[False] == pytest.approx(3.3, rel=0.1)


def test_the_2606_01_dbias_regression_slows_only_biased_fused_experts():
    """cuDNN's dGLU kernel: 139.392 us without the bias gradient, 155.632 us with it as
    designed, 1362.768 us with it in 26.06.01's cudnn-frontend (cudnn-frontend PR 322)."""
    unfused = replace(recipe("mbridge-26.06"), fused_grouped_mlp=False)  # same GEMMs, no factor
    fused = recipe("mbridge-26.06")
    regressed = recipe("mbridge-26.06.01")
    assert regressed.fused_mlp_dbias_slowdown == pytest.approx(1362.8 / 155.6)
    gpt_oss = [moe_blocks(GPT_OSS, GPT_OSS_PLAN, r)["experts"] for r in (fused, regressed)]
    assert gpt_oss[0].forward == gpt_oss[1].forward
    # FC2's data gradient is h*f of the backward's 2*(h*f + h*2f) weights' worth: 1/6, with
    # the fused kernels' tile waste at GPT-OSS's widths (test below) on every share.
    kernel_flops = (moe_blocks(GPT_OSS, GPT_OSS_PLAN, unfused)["experts"].backward.flops
                    * fused_mlp_tile_factors(GPT_OSS)[1] / 6)
    assert gpt_oss[0].backward.flops - 5 * kernel_flops == pytest.approx(
        kernel_flops * 155.632 / 139.392)
    assert gpt_oss[1].backward.flops - 5 * kernel_flops == pytest.approx(
        kernel_flops * 1362.768 / 139.392, rel=1e-3)
    dsv3 = [moe_blocks(DSV3, PLAN, r)["experts"] for r in (fused, regressed)]
    assert dsv3[0] == dsv3[1]


def test_the_fused_mlp_runs_whole_256_wide_tiles():
    """cuDNN's fused MLP kernels run 256 x 256 tiles with a K step of 128: GPT-OSS's widths of
    2,880 (11.25 tiles; FC1's 5,760, 22.5) make them do more than the useful work, by hand:
    forward (2 * 5888/5760 * 2944/2880 + 3072/2880 * 2944/2880) / 3, backward likewise over
    the two data and two weight gradients. Widths that divide by the tiles (DeepSeek-V3's
    7,168 and 2,048, Qwen3's) cost nothing more, and only the fused path pays."""
    wide, k_wide = 3072 / 2880, 2944 / 2880
    fc1_wide = 5888 / 5760
    forward, backward = fused_mlp_tile_factors(GPT_OSS)
    assert forward == pytest.approx((2 * fc1_wide * k_wide + wide * k_wide) / 3)
    assert backward == pytest.approx((wide * k_wide + 2 * wide + wide * wide
                                      + 2 * fc1_wide * wide) / 6)
    for name in ("deepseek-v3", "qwen3-235b-a22b", "qwen3-30b-a3b"):
        assert fused_mlp_tile_factors(model_spec(name)) == (1.0, 1.0)
    fused = moe_blocks(GPT_OSS, GPT_OSS_PLAN, recipe("mbridge-26.06"))["experts"]
    unfused = moe_blocks(GPT_OSS, GPT_OSS_PLAN, replace(recipe("mbridge-26.06"),
                                                        fused_grouped_mlp=False))["experts"]
    assert fused.forward.flops == pytest.approx(unfused.forward.flops * forward)


def test_a_2606_01_row_gets_its_containers_recipe_by_name():
    row = {"name": "mb260601-gptoss120b-gb300-64", "model": "gpt-oss-120b", "gpu": "gb300",
           "release": "mbridge-26.06", "precision": "mxfp8", "recompute": "", "dispatcher": "",
           "cuda_graphs": "", "a2a_overlap": "", "fp8_attention": ""}
    assert row_recipe(row).fused_mlp_dbias_slowdown > 1
    assert row_recipe({**row, "name": "mb2606-gptoss120b-gb300-64"}).fused_mlp_dbias_slowdown == 1


def test_full_attention_takes_one_exponential_per_score_each_way():
    core = attention_blocks(DSV3, PLAN, recipe("megatron-defaults"))["core_attn"]
    tokens = PLAN.mbs * PLAN.seq_len
    scores = tokens * (PLAN.seq_len / 2) * DSV3.num_attention_heads  # causal: s/2 keys a query
    assert core.forward.exponentials == pytest.approx(scores)
    assert core.backward.exponentials == pytest.approx(scores)  # backward recomputes P
    assert core.backward.flops == pytest.approx(2.5 * core.forward.flops)
    window = attention_blocks(GPT_OSS, GPT_OSS_PLAN, recipe("megatron-defaults"), 0)["core_attn"]
    assert window.forward.exponentials == 0  # measured whole: the window efficiency has them


def test_exponentials_run_in_series_on_the_special_function_units(toy_gpu, ideal_params):
    plain = Work(flops=1e12, hbm_bytes=0.0, kernel_class=KernelClass.ATTENTION,
                 precision="bf16", kernels=0, graphed=False)
    slow_sfu = replace(toy_gpu, exp_per_s=1e10)
    assert compute_time_s(replace(plain, exponentials=5e9), slow_sfu, ideal_params) == \
        pytest.approx(1.0 + 0.5)
    assert compute_time_s(plain, slow_sfu, ideal_params) == pytest.approx(1.0)


def _attention_s(gpu, model, plan, layer=None, fp8=False):
    """Seconds of one micro batch's core attention, forward plus backward, on `gpu`."""
    recipe_ = recipe_with(recipe("megatron-defaults"), precision="mxfp8", fp8_attention=fp8)
    core = attention_blocks(model, plan, recipe_, layer)["core_attn"]
    return sum(compute_time_s(w, gpu_spec(gpu), DEFAULT_PARAMS)
               for w in (core.forward, core.backward))


def test_blackwell_ultra_softmax_speeds_small_heads_most():
    """Twice the SFU rate at the same tensor peak: attention speeds up on GB300 against GB200,
    more for GPT-OSS's 64-wide heads than for DeepSeek-V3's 192 + 128, and FP8 more than BF16."""
    def speedup(*args, **kwargs):
        return _attention_s("gb200", *args, **kwargs) / _attention_s("gb300", *args, **kwargs)
    dsv3, dsv3_fp8 = speedup(DSV3, PLAN), speedup(DSV3, PLAN, fp8=True)
    assert 1.0 < dsv3 < dsv3_fp8 < 1.5
    assert speedup(GPT_OSS, GPT_OSS_PLAN, 1) > dsv3
    assert gpu_spec("gb300").exp_per_s > 2 * gpu_spec("gb200").exp_per_s
    assert gpu_spec("b300").exp_per_s == gpu_spec("gb300").exp_per_s


def test_untuned_deepep_moves_tokens_at_the_guides_measured_rate(make_scenario):
    """Before ladder step 06 DeepEP is the untuned EP32 port (400 / 190 GB/s of 900, guide
    §2.2.1); after it the kernels reach the calibrated efficiency, and exposed EP time falls."""
    assert guide_step_recipe(5).deepep_nvlink_efficiency == pytest.approx(0.286, abs=1e-3)
    assert guide_step_recipe(6).deepep_nvlink_efficiency is None
    assert DEFAULT_PARAMS.comm("deepep", "nvlink") > 0.2
    graphed = recipe_with(recipe("modelzoo-2025"), cuda_graphs="full", rank_capacity_factor=1.0)
    plan = ParallelPlan(num_gpus=16, mbs=1, gbs=32, seq_len=4096, ep=8)
    scenarios = [replace(make_scenario(recipe_=recipe_with(
        graphed, deepep_nvlink_efficiency=efficiency), domain_size=72), plan=plan)
        for efficiency in (None, 0.1)]  # one rack-scale domain, as the guide's: deepep-nvlink
    tuned, untuned = (run_scenario(s).metrics.breakdown_s["exposed_ep"] for s in scenarios)
    assert untuned > 1.5 * tuned > 0
    assert touches("comm_efficiency.deepep-nvlink", scenarios[0], DEFAULT_PARAMS)
    assert not touches("comm_efficiency.deepep-nvlink", scenarios[1], DEFAULT_PARAMS)


@pytest.mark.parametrize("efficiency", [0.0, 1.5, -0.2])
def test_a_deepep_efficiency_outside_0_1_is_refused(efficiency):
    with pytest.raises(ValueError, match=f"deepep_nvlink_efficiency={efficiency}"):
        recipe_with(recipe("modelzoo-2025"), deepep_nvlink_efficiency=efficiency)


def test_a_slow_host_also_runs_schedule_nodes_slower():
    grace = host_params(DEFAULT_PARAMS, numa_bound=True, host_cpu="grace")
    assert grace.schedule_node_host_s == pytest.approx(
        DEFAULT_PARAMS.schedule_node_host_s * DEFAULT_PARAMS.grace_host_slowdown)


def test_gpt_oss_full_causal_fp8_attention_runs_at_the_head_dim_64_rate():
    """cuDNN's MXFP8 backward at head dim 64 does the whole causal work: a full layer's
    attention in MXFP8 is slower than in BF16, and takes the d64 key, which no other model
    touches."""
    gpt_oss, gpu = model_spec("gpt-oss-120b"), gpu_spec("gb300")
    plan = ParallelPlan(num_gpus=64, ep=16, mbs=4, gbs=1280, seq_len=4096)
    full = next(layer for layer in range(gpt_oss.num_layers) if not gpt_oss.is_window_layer(layer))
    mxfp8 = recipe_with(recipe("mbridge-26.08"), precision="mxfp8", fp8_attention=True)

    def attention_s(recipe_):
        core = attention_blocks(gpt_oss, plan, recipe_, full)["core_attn"]
        works = (core.forward, core.backward)
        return sum(compute_time_s(work, gpu, DEFAULT_PARAMS) for work in works)

    assert attention_s(mxfp8) > attention_s(recipe_with(mxfp8, fp8_attention=False))
    gb300 = default_scenario()
    scenario = replace(gb300, model=gpt_oss, plan=plan, recipe=mxfp8)
    assert touches("attention_efficiency.blackwell-ultra-fp8-d64", scenario, DEFAULT_PARAMS)
    assert not touches("attention_efficiency.blackwell-ultra-fp8-d64",
                       replace(gb300, recipe=mxfp8), DEFAULT_PARAMS)


def test_blackwell_ultra_bf16_gemms_are_fitted_apart_from_blackwell():
    """GB300 and B300 have GB200's and B200's BF16 tensor peak but their own BF16 GEMM share
    (gemm_efficiency.blackwell-ultra-bf16), fitted on their rows, as their FP8 GEMMs have."""
    assert {"gemm_efficiency.bf16", "gemm_efficiency.blackwell-ultra-bf16"} <= {
        parameter.key for parameter in DEFAULT_FIT}
    assert touches("gemm_efficiency.blackwell-ultra-bf16", default_scenario(), DEFAULT_PARAMS)
    params = params_with(params_with(DEFAULT_PARAMS, "gemm_efficiency.bf16", 0.4),
                         "gemm_efficiency.blackwell-ultra-bf16", 0.5)
    gemm = Work(flops=1e15, hbm_bytes=0.0, kernel_class=KernelClass.GEMM, precision="bf16",
                kernels=1, graphed=True)
    for blackwell, ultra in (("gb200", "gb300"), ("b200", "b300")):
        ratio = (compute_time_s(gemm, gpu_spec(blackwell), params)
                 / compute_time_s(gemm, gpu_spec(ultra), params))
        assert ratio == pytest.approx(0.5 / 0.4, rel=1e-4)


def test_the_output_layer_runs_at_its_measured_rate_on_blackwell_and_a_gemms_elsewhere():
    """The vocabulary projection (a plain cuBLAS BF16 matmul) has its own efficiency on
    Blackwell and Blackwell Ultra; on Hopper it runs at Hopper's BF16 GEMM rate (times
    compared at the roofline, where a math-bound kernel's time is its math alone)."""
    logits = head_blocks(DSV3, PLAN, recipe("mbridge-26.06"))["logits"].forward
    assert logits.kernel_class == KernelClass.LOGITS and logits.precision == "bf16"
    gemm = replace(logits, kernel_class=KernelClass.GEMM)
    roofline = replace(DEFAULT_PARAMS, roofline_overlap_exponent=math.inf)
    for name in ("gb200", "b300"):
        gpu = gpu_spec(name)
        measured = DEFAULT_PARAMS.gemm_efficiency[f"logits-{gpu.architecture}-bf16"]
        fitted = params_value(DEFAULT_PARAMS, f"gemm_efficiency.{gpu.architecture}-bf16")
        ratio = (compute_time_s(gemm, gpu, roofline) / compute_time_s(logits, gpu, roofline))
        assert ratio == pytest.approx(measured / fitted, rel=1e-3) and ratio > 1
    hopper = gpu_spec("h100")
    assert compute_time_s(logits, hopper, DEFAULT_PARAMS) == pytest.approx(
        compute_time_s(gemm, hopper, DEFAULT_PARAMS))
    assert touches("gemm_efficiency.logits-blackwell-ultra-bf16", default_scenario(),
                   DEFAULT_PARAMS)
    assert not touches("gemm_efficiency.logits-blackwell-bf16", default_scenario(),
                       DEFAULT_PARAMS)


def test_per_tensor_fp8_gemms_run_faster_than_mxfp8_ones_only_on_blackwell():
    """fp8-cs GEMMs (dense and grouped) run per_tensor_fp8_speedup times as fast as the MXFP8
    GEMMs whose rates Blackwell's FP8 keys hold; Hopper's FP8 rates are per-tensor already,
    and attention is not a GEMM of the recipe."""
    params = replace(DEFAULT_PARAMS, kernel_gap_s=0.0, graphed_kernel_gap_s=0.0,
                     per_tensor_fp8_speedup=1.25)

    def seconds(kernel_class, precision, gpu):
        work = Work(flops=1e12, hbm_bytes=0.0, kernel_class=kernel_class, precision=precision,
                    kernels=0, graphed=False)
        return compute_time_s(work, gpu_spec(gpu), params)

    for kernel_class in (KernelClass.GEMM, KernelClass.GROUPED_GEMM):
        for gpu in ("gb200", "gb300", "b200"):
            assert seconds(kernel_class, "mxfp8", gpu) == pytest.approx(
                1.25 * seconds(kernel_class, "fp8-cs", gpu))
        assert seconds(kernel_class, "fp8-cs", "h100") == pytest.approx(
            seconds(kernel_class, "fp8-blockwise", "h100"))
    assert seconds(KernelClass.GEMM, "fp8-blockwise", "gb200") == pytest.approx(
        seconds(KernelClass.GEMM, "mxfp8", "gb200"))
    assert seconds(KernelClass.ATTENTION, "fp8-cs", "gb200") == pytest.approx(
        seconds(KernelClass.ATTENTION, "mxfp8", "gb200"))
    per_tensor = _scenario(recipe_with(recipe("mbridge-26.06"), precision="fp8-cs"))
    assert touches("per_tensor_fp8_speedup", per_tensor, params)
    assert not touches("per_tensor_fp8_speedup", _scenario(recipe("mbridge-26.06")), params)
    on_h100 = replace(per_tensor, system=load_system("dgx-h100"))
    assert not touches("per_tensor_fp8_speedup", on_h100, params)
    with pytest.raises(ValueError, match="per_tensor_fp8_speedup=0.9: must be >= 1"):
        replace(DEFAULT_PARAMS, per_tensor_fp8_speedup=0.9)
