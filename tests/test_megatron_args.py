"""Megatron command lines as scenarios: the 26.06 DeepSeek-V3 GB300 line equals the default
scenario; unmapped flags are listed, never dropped; bad values are one-line errors; Megatron's
defaults apply to a complete line and only named fields change on a line of changes."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.scenario import Scenario, default_scenario
from simulator.scenario_files import scenario_from_megatron_args
from workloads.megatron_args import parse_megatron_args, read_megatron_args
from workloads.models import model_spec
from workloads.parallelism import ParallelPlan
from workloads.recipes import recipe

DATA = Path(__file__).parent / "data" / "megatron"
DSV3_LINE = (DATA / "dsv3-gb300-26.06.txt").read_text(encoding="utf-8")
LLAMA_LINE = """torchrun --nproc-per-node 8 --nnodes 1 pretrain_gpt.py --num-layers 32
    --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8
    --kv-channels 128 --ffn-hidden-size 14336 --swiglu --untie-embeddings-and-output-weights
    --disable-bias-linear --vocab-size 128256 --seq-length 8192 --micro-batch-size 1
    --global-batch-size 128 --tensor-model-parallel-size 2 --bf16 --use-distributed-optimizer"""


@pytest.fixture(scope="module")
def other_base() -> Scenario:
    """A base unlike the default, so everything the DSv3 line sets must come from the line."""
    plan = ParallelPlan(num_gpus=8, tp=2, gbs=16, seq_len=1024)
    return replace(default_scenario(), model=model_spec("llama3-8b"), plan=plan,
                   recipe=recipe("mbridge-25.11"))


def _differences(got: object, want: object) -> list[str]:
    return [f"{f.name}: {getattr(got, f.name)!r} != {getattr(want, f.name)!r}"
            for f in fields(got) if getattr(got, f.name) != getattr(want, f.name)]


def test_the_2606_dsv3_gb300_line_is_the_default_scenario(other_base: Scenario) -> None:
    scenario, ignored = scenario_from_megatron_args(DSV3_LINE, other_base)
    default = default_scenario()
    for part in ("model", "plan", "recipe"):
        assert _differences(getattr(scenario, part), getattr(default, part)) == [], part
    # Equal to catalog entries but for nothing: the names are the catalog's.
    assert (scenario.model, scenario.plan, scenario.recipe) == \
        (default.model, default.plan, default.recipe)
    assert scenario.system == other_base.system and scenario.params == other_base.params
    for modelled in ("--moe-router-fusion", "--moe-permute-fusion", "NVTE_NORM_FWD_USE_CUDNN"):
        assert not any(note.startswith(modelled) for note in ignored)
    assert "--kv-channels 128 (no effect with --multi-latent-attention)" in ignored


def test_unmapped_flags_are_listed_and_irrelevant_ones_apart() -> None:
    imported = parse_megatron_args(DSV3_LINE + " --made-up-flag 7 --log-timers-to-tensorboard")
    assert imported.complete and imported.num_gpus == 256
    assert "--made-up-flag 7" in imported.ignored
    assert "CUDA_DEVICE_MAX_CONNECTIONS=32" in imported.ignored
    for flag in ("--lr 1e-4", "--seed 1234", "--log-timers-to-tensorboard", "--mock-data",
                 "--tokenizer-model deepseek-ai/DeepSeek-V3", "pretrain_gpt.py"):
        assert any(entry.startswith(flag) or entry.endswith(flag)
                   for entry in imported.irrelevant), flag
    assert not set(imported.ignored) & set(imported.irrelevant)


@pytest.mark.parametrize("line, message", [
    ("--tensor-model-parallel-size abc", "--tensor-model-parallel-size='abc': must be an integer"),
    ("--tensor-model-parallel-size=-2", "--tensor-model-parallel-size='-2': must be an integer"),
    ("--micro-batch-size 1.5", "--micro-batch-size='1.5': must be an integer >= 1"),
    ("--moe-expert-capacity-factor -1", "must be a number > 0"),
    ("--fp8-recipe nope", "--fp8-recipe='nope': must be one of tensorwise"),
    ("--overlap-grad-reduce=maybe", "must be true or false"),
    ("--moe-layer-freq '([0]*3+[x]*58)'", "--moe-layer-freq="),
    ("model.tensor_model_parallel_size=two", "model.tensor_model_parallel_size='two'"),
    ("--pipeline-model-parallel-layout 'Et|X|L' --pipeline-model-parallel-size 2",
     "unknown symbol 'X'"),
    ("--nnodes 2 --nproc-per-node 4 --num-gpus 6", "disagrees with 2 nodes x 4"),
    ("--fp8-format e4m3 --fp4-format e2m1", "Megatron accepts only one"),
    ("--tensor-model-parallel-size 'unclosed", "cannot split the command line"),
])
def test_bad_values_are_one_line_errors_naming_the_flag(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")) as error:
        parse_megatron_args(line)
    assert "\n" not in str(error.value)


def test_a_complete_line_takes_megatrons_defaults_for_what_it_leaves_out() -> None:
    base = default_scenario()
    scenario, notes = scenario_from_megatron_args(LLAMA_LINE, base)
    assert scenario.model == model_spec("llama3-8b")        # named after the catalog entry
    plan, r = scenario.plan, scenario.recipe
    assert (plan.num_gpus, plan.tp, plan.etp, plan.pp, plan.vpp, plan.layout) == \
        (8, 2, 1, 1, 1, None)                  # etp defaults to tp, but 1 without experts
    assert (plan.gbs, plan.seq_len) == (128, 8192)
    assert (r.precision, r.dispatcher, r.cuda_graphs) == ("bf16", "allgather", "none")
    assert not (r.a2a_overlap or r.overlap_grad_reduce or r.overlap_param_gather)
    assert (r.grad_reduce_dtype_bytes, r.optimizer_state_bytes_per_param) == (4, 12.0)
    assert r.name == "megatron-args" and notes == ()


def test_a_complete_line_without_vocab_or_global_batch_notes_what_it_assumed() -> None:
    line = LLAMA_LINE.replace("--vocab-size 128256", "").replace("--global-batch-size 128", "")
    scenario, notes = scenario_from_megatron_args(line.replace("--bf16", ""), default_scenario())
    assert scenario.model.vocab_size == 129280                    # the base model's, noted
    assert scenario.plan.gbs == 1 * 8 // 2                        # mbs x dp
    assert any(note.startswith("vocab_size=129280 kept") for note in notes)
    assert any("FP32 training is not modelled" in note for note in notes)


def test_a_line_of_changes_changes_only_what_it_names() -> None:
    base = default_scenario()
    line = ("model.mtp_num_layers=0 ddp.overlap_param_gather=false "
            "model.recompute_granularity=selective model.recompute_modules=[mla_up_proj,moe_act] "
            "model.moe_hybridep_num_sms=24 NCCL_NVLS_ENABLE=1")
    scenario, ignored = scenario_from_megatron_args(line, base)
    assert scenario.model == replace(base.model, mtp_layers=0, name="megatron-args")
    assert scenario.plan.layout is None                          # layers changed: default split
    assert replace(scenario.recipe, name=base.recipe.name) == replace(
        base.recipe, overlap_param_gather=False, recompute_modules=("mla_up_proj", "moe_act"),
        nccl_nvls=True)
    # The SM count needs its dispatcher on the same line: listed, not applied.
    assert ignored == ("model.moe_hybridep_num_sms=24 (needs --moe-token-dispatcher-type flex)",)


@pytest.mark.parametrize("line, vpp", [
    ("--pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2", 2),
    ("--pipeline-model-parallel-size 4 --virtual-pipeline-model-parallel-size 3", 3),
    ("--num-layers 64 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 4",
     4),
    ("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Et*4|(t*4|)*14tmL'", 8),
])
def test_virtual_pipeline_size_comes_from_any_of_megatrons_three_forms(line: str,
                                                                       vpp: int) -> None:
    assert parse_megatron_args(line).plan_fields["vpp"] == vpp


@pytest.mark.parametrize("line, fields_", [
    ("--cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router",
     {"cuda_graphs": "partial"}),
    ("--cuda-graph-impl local --cuda-graph-scope full_iteration", {"cuda_graphs": "full"}),
    ("--enable-cuda-graph", {"cuda_graphs": "partial"}),
    ("--cuda-graph-impl none", {"cuda_graphs": "none"}),
    ("--moe-token-dispatcher-type flex --moe-enable-deepep",
     {"dispatcher": "deepep", "dispatcher_sms": 20}),
    ("--moe-token-dispatcher-type alltoall", {"dispatcher": "alltoall", "dispatcher_sms": 0}),
    ("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
     {"recompute_modules": ("full",)}),
    ("--recompute-activations", {"recompute_modules": ("core_attn",)}),
    ("--fp8-format hybrid --fp8-recipe tensorwise --bf16", {"precision": "fp8-cs"}),
    ("--fp8-format e4m3 --fp8-recipe blockwise", {"precision": "fp8-blockwise"}),
    ("--fp4-format e2m1", {"precision": "nvfp4"}),
    ("mixed_precision=bf16_with_mxfp8_mixed", {"precision": "mxfp8"}),
    ("--moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity",
     {"expert_capacity_factor": 1.25}),
    ("--moe-expert-rank-capacity-factor 1.5", {"rank_capacity_factor": 1.5}),
    ("--accumulate-allreduce-grads-in-fp32", {"grad_reduce_dtype_bytes": 4}),
    ("ddp.grad_reduce_in_fp32=false", {"grad_reduce_dtype_bytes": 2}),
    ("--use-precision-aware-optimizer --exp-avg-dtype fp8 --exp-avg-sq-dtype bf16",
     {"optimizer_state_bytes_per_param": 7.0}),
    ("--cpu-offloading --cpu-offloading-num-layers 40", {"activation_offload_layers": 40}),
])
def test_recipe_flags_follow_megatrons_rules(line: str, fields_: dict[str, object]) -> None:
    assert parse_megatron_args(line).recipe_fields == fields_


@pytest.mark.parametrize(("factor", "said"), [
    ("1.25", "no token is dropped under balanced routing"),
    ("0.8", "the 20% of tokens it would drop are not modelled"),
])
def test_a_capacity_factor_without_padding_is_dropless_and_says_why(factor: str,
                                                                    said: str) -> None:
    imported = parse_megatron_args(f"--moe-expert-capacity-factor {factor} "
                                   f"--moe-expert-rank-capacity-factor 1.5")
    assert imported.recipe_fields == {"expert_capacity_factor": None,
                                      "rank_capacity_factor": 1.5}
    assert any(said in note and "simulated as dropless" in note for note in imported.notes)


def test_padding_without_a_capacity_factor_is_listed_as_ignored() -> None:
    alone = parse_megatron_args("--moe-pad-expert-input-to-capacity")
    assert alone.recipe_fields == {} and alone.ignored == (
        "--moe-pad-expert-input-to-capacity (needs --moe-expert-capacity-factor)",)


def test_dependent_flags_without_their_primary_are_listed_with_the_reason() -> None:
    imported = parse_megatron_args("--recompute-modules mlp --exp-avg-dtype bf16 "
                                   "--fp8-recipe mxfp8 --cuda-graph-scope attn "
                                   "--cpu-offloading-num-layers 3")
    assert imported.recipe_fields == {}
    assert imported.ignored == (
        "--fp8-recipe mxfp8 (needs --fp8-format)",
        "--cuda-graph-scope attn (needs --cuda-graph-impl)",
        "--recompute-modules mlp (needs --recompute-granularity)",
        "--exp-avg-dtype bf16 (needs --use-precision-aware-optimizer)",
        "--cpu-offloading-num-layers 3 (needs --cpu-offloading)")


def test_fsdp_and_sharding_strategies() -> None:
    assert parse_megatron_args("--use-megatron-fsdp --data-parallel-sharding-strategy "
                               "optim_grads_params").plan_fields == {"dp_sharding": "fsdp"}
    assert parse_megatron_args("--use-distributed-optimizer").plan_fields == \
        {"dp_sharding": "distributed-optimizer"}
    plain = parse_megatron_args(LLAMA_LINE.replace("--use-distributed-optimizer", ""))
    assert plain.plan_fields["dp_sharding"] == "distributed-optimizer"
    assert any(note.startswith("plain DDP") for note in plain.notes)


def test_read_megatron_args_reads_at_files(tmp_path: Path) -> None:
    assert read_megatron_args("--bf16") == "--bf16"
    assert read_megatron_args(f"@{DATA / 'dsv3-gb300-26.06.txt'}") == DSV3_LINE
    with pytest.raises(ValueError, match="cannot read file") as error:
        read_megatron_args(f"@{tmp_path / 'missing.txt'}")
    assert "\n" not in str(error.value)


def test_an_invalid_combination_is_a_one_line_error_naming_the_field() -> None:
    with pytest.raises(ValueError, match="megatron args: ep=32: num_experts=120") as error:
        scenario_from_megatron_args("--num-experts 120", default_scenario())
    assert "\n" not in str(error.value)


FLAG_WORDS = st.sampled_from([
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--num-layers",
    "--moe-layer-freq", "--fp8-format", "--fp8-recipe", "--cuda-graph-impl", "--bf16",
    "--recompute-modules", "--recompute-granularity", "--moe-token-dispatcher-type",
    "--pipeline-model-parallel-layout", "--num-layers-per-virtual-pipeline-stage",
    "--moe-expert-capacity-factor", "--nnodes", "--exp-avg-dtype", "model.num_layers=",
    "NCCL_NVLS_ENABLE=", "--made-up", "-N", "\\\n", "#", "'", "\""])
VALUES = st.one_of(st.integers(-3, 70).map(str), st.sampled_from(
    ["abc", "1.5", "-1", "flex", "mxfp8", "full_iteration", "([0]*3+[1]*58)", "[1]*99999999",
     "Et*4|(t*4|)*14tmL", "t*999999999999", "none", "true", "e4m3", "", "$TP", "mla_up_proj"]),
    st.text(max_size=8))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(FLAG_WORDS, VALUES), max_size=12))
def test_random_command_lines_parse_or_fail_with_one_line(pairs: list[tuple[str, str]]) -> None:
    text = " ".join(flag + (value if flag.endswith("=") else f" {value}") for flag, value in pairs)
    try:
        imported = parse_megatron_args(text)
    except ValueError as error:
        assert "\n" not in str(error)
        return
    assert isinstance(imported.ignored, tuple) and isinstance(imported.irrelevant, tuple)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_random_text_parses_or_fails_with_one_line(text: str) -> None:
    try:
        parse_megatron_args(text)
    except ValueError as error:
        assert "\n" not in str(error)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(FLAG_WORDS, VALUES), max_size=6))
def test_random_lines_applied_give_a_scenario_or_one_line(pairs: list[tuple[str, str]]) -> None:
    text = " ".join(flag + (value if flag.endswith("=") else f" {value}") for flag, value in pairs)
    try:
        scenario, ignored = scenario_from_megatron_args(text, default_scenario())
    except ValueError as error:
        assert "\n" not in str(error)
        return
    assert isinstance(scenario, Scenario) and all("\n" not in line for line in ignored)
