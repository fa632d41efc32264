"""Per-model presets of the Megatron-Bridge performance scripts (workloads.model_presets), as a
validated row gets them, and the memory effects they bring (activation offload; dense state
sharded over data x context parallelism)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from simulator.memory import estimate_memory
from simulator.validation import row_recipe
from workloads.model_presets import model_preset
from workloads.models import model_spec
from workloads.parallelism import ParallelPlan
from workloads.recipes import recipe, recipe_with

ROW = {"name": "r", "recompute": "", "dispatcher": "", "cuda_graphs": "", "a2a_overlap": "",
       "fp8_attention": ""}


def _row(model: str, gpu: str, release: str, precision: str, **flags: str) -> dict[str, str]:
    return {**ROW, "model": model, "gpu": gpu, "release": release, "precision": precision,
            **flags}


def test_deepseek_rows_keep_the_release_recipe():
    assert model_preset("mbridge-26.06", "deepseek-v3", "gb300", "mxfp8") == {}
    assert row_recipe(_row("deepseek-v3", "gb300", "mbridge-26.06", "mxfp8")) == recipe_with(
        recipe("mbridge-26.06"), precision="mxfp8")


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "gpt-oss-120b"])
def test_other_models_drop_the_dsv3_expert_rank_capacity_without_full_graphs(model):
    preset = model_preset("mbridge-26.06", model, "b300", "bf16")
    assert recipe("mbridge-26.06").rank_capacity_factor == 1.5
    assert preset["rank_capacity_factor"] is None and preset["cuda_graphs"] != "full"


def test_qwen3_on_nvl72_runs_hybridep_with_scoped_graphs_and_no_a2a_overlap():
    qwen = row_recipe(_row("qwen3-30b-a3b", "gb300", "mbridge-26.04", "mxfp8"))
    assert (qwen.dispatcher, qwen.dispatcher_sms, qwen.cuda_graphs) == ("hybridep", 32, "partial")
    assert not qwen.a2a_overlap and not qwen.fp8_attention and qwen.recompute_modules == ()
    assert qwen.rank_capacity_factor is None and not qwen.fused_grouped_mlp


@pytest.mark.parametrize("release", ["mbridge-26.06", "mbridge-26.08"])
def test_qwen3_mxfp8_takes_the_full_iteration_stack_from_26_06_on_nvl72_and_30b_on_b300(release):
    qwen = row_recipe(_row("qwen3-235b-a22b", "gb200", release, "mxfp8"))
    assert (qwen.dispatcher, qwen.cuda_graphs, qwen.a2a_overlap) == ("hybridep", "full", True)
    assert qwen.fp8_attention and qwen.fused_grouped_mlp and qwen.rank_capacity_factor == 1.5
    small_on_b300 = row_recipe(_row("qwen3-30b-a3b", "b300", release, "mxfp8"))
    assert small_on_b300 == qwen
    large_on_b300 = row_recipe(_row("qwen3-235b-a22b", "b300", release, "mxfp8"))
    assert large_on_b300.cuda_graphs == "none" and not large_on_b300.fused_grouped_mlp
    earlier = row_recipe(_row("qwen3-30b-a3b", "b300", "mbridge-26.04", "mxfp8"))
    assert earlier.cuda_graphs == "partial" and not earlier.a2a_overlap


def test_deepseek_on_hgx_nodes_keeps_the_unfused_experts_in_26_06():
    assert not row_recipe(_row("deepseek-v3", "b300", "mbridge-26.06", "mxfp8")).fused_grouped_mlp
    assert row_recipe(_row("deepseek-v3", "gb200", "mbridge-26.06", "mxfp8")).fused_grouped_mlp


@pytest.mark.parametrize(("gpu", "release", "fused"), [
    ("gb300", "mbridge-26.06", True), ("gb200", "mbridge-26.02", True),
    ("b300", "mbridge-26.06", False), ("b200", "mbridge-26.02", False),
    ("gb300", "mbridge-25.11", False), ("b200", "mbridge-25.09", False)])
def test_deepseek_keeps_the_cudnn_norm_fusion_only_on_nvl72_from_26_02(gpu, release, fused):
    assert row_recipe(_row("deepseek-v3", gpu, release, "mxfp8")).norm_quant_fusion is fused


def test_gpt_oss_switches_to_the_v2_preset_with_mxfp8_from_26_06():
    bf16 = row_recipe(_row("gpt-oss-120b", "gb200", "mbridge-26.04", "bf16"))
    assert bf16.dispatcher == "alltoall" and bf16.recompute_modules == ("layernorm", "moe_act")
    mx = row_recipe(_row("gpt-oss-120b", "gb300", "mbridge-26.08", "mxfp8"))
    assert (mx.dispatcher, mx.cuda_graphs, mx.a2a_overlap) == ("hybridep", "full", True)
    assert mx.rank_capacity_factor == 1.5 and mx.expert_capacity_factor is None


def test_a_rows_own_flags_override_the_preset():
    qwen = row_recipe(_row("qwen3-235b-a22b", "gb200", "mbridge-26.02", "mxfp8",
                           dispatcher="deepep", cuda_graphs="none"))
    assert (qwen.dispatcher, qwen.cuda_graphs) == ("deepep", "none")


def test_llama_fsdp_presets_offload_activations_and_it_shows_in_memory():
    llama = model_spec("llama3-70b")
    plan = ParallelPlan(num_gpus=64, gbs=256, mbs=2, seq_len=8192, dp_sharding="fsdp")
    offloaded = row_recipe(_row("llama3-70b", "gb200", "mbridge-26.02", "fp8-cs"))
    assert offloaded.activation_offload_layers == 40
    kept = replace(offloaded, activation_offload_layers=0)
    on_gpu = estimate_memory(llama, plan, offloaded, 0).activations_bytes
    assert on_gpu == pytest.approx(
        estimate_memory(llama, plan, kept, 0).activations_bytes * (80 - 40) / 80)


def test_dense_optimizer_state_is_sharded_over_data_and_context_parallelism():
    llama = model_spec("llama3-8b")
    base = recipe("megatron-defaults")
    without_cp = estimate_memory(llama, ParallelPlan(num_gpus=4, gbs=8, seq_len=8192), base, 0)
    with_cp = estimate_memory(llama, ParallelPlan(num_gpus=8, cp=2, gbs=8, seq_len=8192),
                              base, 0)
    assert with_cp.optimizer_bytes == pytest.approx(without_cp.optimizer_bytes / 2)


def test_a_negative_offload_gets_a_one_line_error():
    with pytest.raises(ValueError, match="activation_offload_layers=-1: must be a whole number"):
        recipe_with(recipe("megatron-defaults"), activation_offload_layers=-1)


def test_run_puts_another_model_on_its_preset_and_says_so(capsys):
    from simulator.cli import main

    argv = ["run", "--model", "qwen3-30b-a3b", "--gpus", "8", "--pp", "1", "--vpp", "1",
            "--ep", "8", "--gbs", "64", "--mbs", "8", "--mtp", "0", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    recipe_fields = json.loads(captured.out)["scenario"]["recipe"]
    assert (recipe_fields["cuda_graphs"], recipe_fields["a2a_overlap"]) == ("full", True)
    assert recipe_fields["fp8_attention"] is True
    assert "mbridge-26.06 preset for qwen3-30b-a3b on gb300" in captured.err
    assert main([*argv, "--set", "a2a_overlap=false"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario"]["recipe"]["a2a_overlap"] is False
    assert main([*argv, "--recipe", "mbridge-26.04"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario"]["recipe"]["cuda_graphs"] == "partial"


def test_token_drop_rows_pad_experts_to_capacity_one_and_skip_the_host_sync():
    dropped = row_recipe(_row("deepseek-v3", "gb200", "mbridge-25.09", "fp8-cs",
                              routing="tokendrop"))
    assert dropped.expert_capacity_factor == 1.0 and dropped.dispatcher == "alltoall"
    assert dropped.recompute_modules == ("mla_up_proj",) and not dropped.a2a_overlap
    balanced = row_recipe(_row("deepseek-v3", "gb200", "mbridge-25.09", "fp8-cs",
                               routing="balanced"))
    assert balanced.expert_capacity_factor is None

    from workloads.step import StepSpec, build_step

    plan = ParallelPlan(num_gpus=8, ep=8, gbs=16, seq_len=4096)
    model = model_spec("qwen3-30b-a3b")
    syncs = {capacity: sum(task.host_sync for task in build_step(StepSpec(
        model=model, plan=plan, recipe=recipe_with(
            dropped, expert_capacity_factor=capacity))).tasks) for capacity in (None, 1.0)}
    assert syncs[None] > 0 and syncs[1.0] == 0


def test_deepseek_25_11_presets_follow_each_gpus_base_config():
    gb300 = row_recipe(_row("deepseek-v3", "gb300", "mbridge-25.11", "mxfp8"))
    assert gb300.recompute_modules == () and gb300.cuda_graphs == "partial"
    gb200 = row_recipe(_row("deepseek-v3", "gb200", "mbridge-25.11", "mxfp8"))
    assert gb200.recompute_modules == ("mla_up_proj",) and gb200.dispatcher == "hybridep"
    b200 = row_recipe(_row("deepseek-v3", "b200", "mbridge-25.11", "mxfp8"))
    assert (b200.dispatcher, b200.cuda_graphs) == ("alltoall", "none")
