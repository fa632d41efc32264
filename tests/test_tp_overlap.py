"""TP comm overlap (--tp-comm-overlap, TE userbuffers): the sequence-parallel all-gathers and
reduce-scatters run beside the GEMMs they feed or drain, in TP chunks (a reduce-scatter's last
chunk after its GEMM), not before or after them; Megatron-Bridge's and NeMo's Llama recipes turn
it on except in NVFP4."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest

from simulator.scenario import run_scenario
from workloads.megatron_args import parse_megatron_args
from workloads.model_presets import model_preset
from workloads.recipes import recipe, recipe_with

TP2 = {"tp": 2, "pp": 1, "ep": 8}
BASE = recipe_with(recipe("mbridge-26.02"), cuda_graphs="full")  # not host-bound


def _tp_seconds(result):
    return result.metrics.breakdown_s.get("exposed_tp", 0.0)


def _long_sequences(make_scenario, recipe_):
    """The small MoE at 4,096 tokens a sequence: GEMMs long enough to hide a collective."""
    scenario = make_scenario(recipe_=recipe_, **TP2)
    return run_scenario(replace(scenario, plan=replace(scenario.plan, seq_len=4096)))


def test_overlapped_tp_collectives_start_with_their_gemms_and_hide_under_them(make_scenario):
    plain = _long_sequences(make_scenario, BASE)
    overlapped = _long_sequences(make_scenario, recipe_with(BASE, tp_comm_overlap=True))
    assert 0 < _tp_seconds(overlapped) < _tp_seconds(plain)
    assert overlapped.metrics.step_time_s < plain.metrics.step_time_s
    spans = defaultdict(dict)
    for record in overlapped.trace.records:
        spans[(record.rank, record.microbatch, record.chunk)][record.name.split("/", 1)[1]] = \
            (record.start_s, record.end_s)
    gathers = tails = 0
    for names in spans.values():
        for name, (start_s, _) in names.items():
            if name.endswith(".attn.ag"):
                gemm_start_s, _ = names[name.replace(".attn.ag", ".attn_proj")]
                assert start_s == pytest.approx(gemm_start_s, abs=1e-5)
                gathers += 1
            if name.endswith(".mlp.rs.last"):
                _, gemm_end_s = names[name.replace(".mlp.rs.last", ".mlp")]
                assert start_s >= gemm_end_s - 1e-12
                tails += 1
    assert gathers > 0 and tails > 0


def test_without_tp_the_overlap_changes_nothing(run_small):
    tp1 = {"tp": 1, "pp": 1, "ep": 8}
    plain = run_small(recipe_=BASE, **tp1)
    overlapped = run_small(recipe_=recipe_with(BASE, tp_comm_overlap=True), **tp1)
    assert overlapped.metrics.step_time_s == plain.metrics.step_time_s
    assert len(overlapped.trace.records) == len(plain.trace.records)


def test_a_folded_run_with_tp_overlap_equals_the_unfolded_run(run_small):
    overlapped = recipe_with(BASE, tp_comm_overlap=True)
    folded = run_small(folded=True, recipe_=overlapped, **TP2)
    unfolded = run_small(folded=False, recipe_=overlapped, **TP2)
    assert folded.metrics.step_time_s == pytest.approx(unfolded.metrics.step_time_s, rel=1e-3)


@pytest.mark.parametrize("release, precision, expected", [
    ("mbridge-26.06", "fp8-cs", True),
    ("mbridge-26.02", "mxfp8", True),
    ("mbridge-25.09", "bf16", True),
    ("nemo-25.02", "fp8-cs", True),
    ("mbridge-26.06", "nvfp4", False),
])
def test_llama_presets_overlap_tp_except_in_nvfp4(release, precision, expected):
    assert model_preset(release, "llama3.1-405b", "gb300", precision)["tp_comm_overlap"] \
        is expected
    assert "tp_comm_overlap" not in model_preset(release, "qwen3-235b-a22b", "gb300", precision)


def test_the_megatron_flag_turns_it_on():
    on = parse_megatron_args("--tensor-model-parallel-size 2 --tp-comm-overlap")
    assert on.recipe_fields["tp_comm_overlap"] is True
    assert "tp_comm_overlap" not in parse_megatron_args(
        "--tensor-model-parallel-size 2").recipe_fields
