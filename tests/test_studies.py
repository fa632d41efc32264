"""Studies (simulator.studies) and their commands: compare systems or recipes, scale, the
published per-system plans, the tidy table, the CLI's flags over the published plans."""

import json
from dataclasses import replace

import pytest

import simulator.studies as studies
from simulator.cli import main
from simulator.scenario import default_scenario
from simulator.studies import (PUBLISHED_PLANS, compare_recipes, compare_systems,
                               published_scenario, scale)
from topologies.systems import load_system
from workloads.parallelism import pipeline_layout
from workloads.recipes import recipe

SMALL = ["--model", "qwen3-30b-a3b", "--gpus", "32", "--pp", "2", "--vpp", "1", "--ep", "8",
         "--gbs", "32", "--seq", "512"]
INPUT_COLUMNS = {"point", "system", "gpu", "model", "recipe", "num_gpus", "tp", "pp", "vpp",
                 "ep", "etp", "cp", "dp", "mbs", "gbs", "seq_len", "recipe_cuda_graphs"}
OUTPUT_COLUMNS = {"step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu",
                  "breakdown_compute_s", "breakdown_pipeline_bubble_s", "breakdown_exposed_ep_s"}


def _breakdown_sum(row) -> float:
    return sum(value for key, value in row.items() if key.startswith("breakdown_"))


# --- the published plans ------------------------------------------------------------------

def test_gb200_gets_its_published_plan_and_recipe_changes():
    base = default_scenario()
    gb200 = published_scenario(studies.on_system(base, load_system("gb200-nvl72")))
    plan = gb200.plan
    assert (plan.tp, plan.pp, plan.vpp, plan.ep, plan.mbs, plan.gbs) == (1, 4, 4, 64, 1, 4096)
    assert gb200.recipe.recompute_modules == ("mla_up_proj",)
    assert gb200.recipe.fp8_attention is False and gb200.recipe.name == "mbridge-26.06"
    assert gb200.domain_size == 64 and gb200.model.mtp_layers == 1


def test_the_default_scenario_is_its_own_published_plan():
    base = default_scenario()
    again = published_scenario(base)
    assert again.recipe == base.recipe and again.model == base.model
    assert pipeline_layout(again.plan, again.model) == pipeline_layout(base.plan, base.model)


def test_published_25_11_runs_vpp4_without_mtp():
    scenario = published_scenario(replace(default_scenario(), recipe=recipe("mbridge-25.11")))
    assert (scenario.plan.pp, scenario.plan.vpp, scenario.model.mtp_layers) == (2, 4, 0)


def test_unpublished_combinations_are_left_alone(make_scenario):
    scenario = make_scenario(pp=2, ep=8)
    assert published_scenario(scenario) is scenario
    assert all(key[0] == "deepseek-v3" for key in PUBLISHED_PLANS)


# --- the studies on a small scenario ------------------------------------------------------

def test_compare_systems_is_one_tidy_row_per_system(make_scenario):
    systems = [load_system("gb200-nvl72"), load_system("gb300-nvl72")]
    frame = compare_systems(make_scenario(pp=2, ep=8), systems)
    assert list(frame["point"]) == ["gb200-nvl72", "gb300-nvl72"]
    assert list(frame["gpu"]) == ["gb200", "gb300"]
    assert INPUT_COLUMNS | OUTPUT_COLUMNS <= set(frame.columns)
    for row in frame.to_dict(orient="records"):
        assert _breakdown_sum(row) == pytest.approx(row["step_time_s"], rel=1e-6)
        assert row["tokens_per_s_per_gpu"] == pytest.approx(
            row["gbs"] * row["seq_len"] / (row["step_time_s"] * row["num_gpus"]))


def test_compare_applies_adjust_after_the_published_plan(make_scenario):
    def adjust(scenario):
        return replace(scenario, plan=replace(scenario.plan, gbs=64))
    frame = compare_systems(make_scenario(pp=2, ep=8), [load_system("gb300-nvl72")],
                            adjust=adjust)
    assert list(frame["gbs"]) == [64]


def test_compare_recipes_changes_only_the_recipe(make_scenario):
    frame = compare_recipes(make_scenario(pp=2, ep=8),
                            [recipe("mbridge-26.02"), recipe("mbridge-26.06")])
    assert list(frame["recipe"]) == ["mbridge-26.02", "mbridge-26.06"]
    assert list(frame["recipe_cuda_graphs"]) == ["none", "full"]
    assert frame["num_gpus"].nunique() == 1 and frame["system"].nunique() == 1


def test_weak_scaling_keeps_the_batch_per_dp_rank(make_scenario):
    frame = scale(make_scenario(pp=2, ep=8), [16, 32], weak=True)
    assert list(frame["num_gpus"]) == [16, 32] and list(frame["gbs"]) == [32, 64]
    assert frame["num_microbatches"].nunique() == 1
    assert frame["scaling_efficiency"].iloc[0] == 1.0
    assert frame["scaling_efficiency"].iloc[1] == pytest.approx(
        frame["tokens_per_s_per_gpu"].iloc[1] / frame["tokens_per_s_per_gpu"].iloc[0])
    assert set(frame["scaling"]) == {"weak"}
    wait = frame["breakdown_gpu_variation_s"] / frame["step_time_s"]
    assert wait.iloc[1] > wait.iloc[0] > 0  # the slowest of more GPUs is slower


def test_strong_scaling_keeps_the_global_batch(make_scenario):
    frame = scale(make_scenario(pp=2, ep=8), [16, 32], weak=False)
    assert list(frame["gbs"]) == [32, 32]
    assert list(frame["num_microbatches"]) == [4, 2]


def test_study_errors_name_the_point(make_scenario):
    with pytest.raises(ValueError, match="study point '24'"):
        scale(make_scenario(pp=2, ep=8), [16, 24])
    with pytest.raises(ValueError, match="listed twice"):
        compare_systems(make_scenario(), [load_system("gb300-nvl72")] * 2)
    with pytest.raises(ValueError, match="no points"):
        studies.compare({})


# --- the commands ---------------------------------------------------------------------------

@pytest.fixture
def captured(monkeypatch):
    """The scenarios a study command would run, without running them."""
    seen = {}

    def capture(points):
        seen.update(points)
        raise ValueError("captured")
    monkeypatch.setattr(studies, "compare", capture)
    return seen


def test_compare_systems_defaults_to_the_published_story(captured, capsys):
    assert main(["compare", "--systems", "gb200-nvl72,gb300-nvl72"]) == 2
    gb200, gb300 = captured["gb200-nvl72"], captured["gb300-nvl72"]
    assert (gb200.plan.pp, gb200.plan.vpp, gb200.plan.ep) == (4, 4, 64)
    assert gb200.recipe.recompute_modules == ("mla_up_proj",)
    assert (gb300.plan.pp, gb300.plan.vpp, gb300.plan.ep) == (2, 8, 32)
    assert gb300.recipe == default_scenario().recipe


def test_explicit_flags_win_over_the_published_plan(captured, capsys):
    assert main(["compare", "--systems", "gb200-nvl72", "--vpp", "2",
                 "--set", "fp8_attention=true"]) == 2
    gb200 = captured["gb200-nvl72"]
    assert (gb200.plan.pp, gb200.plan.vpp) == (4, 2) and gb200.recipe.fp8_attention


def test_same_recipe_runs_one_scenario_everywhere(captured, capsys):
    assert main(["compare", "--systems", "gb200-nvl72", "--same-recipe"]) == 2
    gb200 = captured["gb200-nvl72"]
    assert gb200.plan == default_scenario().plan and gb200.recipe == default_scenario().recipe


def test_compare_recipes_defaults_to_each_release_plan(captured, capsys):
    assert main(["compare", "--recipes", "mbridge-25.11,mbridge-26.06"]) == 2
    assert captured["mbridge-25.11"].plan.vpp == 4
    assert captured["mbridge-25.11"].model.mtp_layers == 0
    assert captured["mbridge-26.06"].plan.vpp == 8


def test_compare_command_writes_csv_and_charts(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", "--systems", "gb200-nvl72,gb300-nvl72", *SMALL, "--json",
                 "--out", str(out)]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["point"] for r in records] == ["gb200-nvl72", "gb300-nvl72"]
    assert all(r["model"] == "qwen3-30b-a3b" and r["num_gpus"] == 32 for r in records)
    assert sorted(p.name for p in out.iterdir()) == ["breakdown.png", "compare.csv",
                                                     "tflops_per_gpu.png"]


def test_scale_command_prints_efficiency(tmp_path, capsys):
    out = tmp_path / "scale"
    assert main(["scale", *SMALL[:2], *SMALL[4:], "--gpus", "32,64", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "efficiency %" in text and "where the step time goes" in text
    assert {p.name for p in out.iterdir()} == {"scale.csv", "scaling.png", "breakdown.png"}


@pytest.mark.parametrize("argv, message", [
    (["compare", "--systems", "no-such-rack"], "no-such-rack"),
    (["compare", "--systems", "gb200-nvl72", "--system", "gb300-nvl72"], "--system"),
    (["compare", "--recipes", "mbridge-26.06", "--recipe", "mbridge-26.06"], "--recipe"),
    (["scale", "--gpus", "32,abc"], "--gpus 'abc'"),
    (["scale", "--gpus", ","], "--gpus"),
])
def test_bad_study_input_is_one_line_and_writes_nothing(tmp_path, one_line_error, argv, message):
    out = tmp_path / "out"
    assert message in one_line_error([*argv, "--out", str(out)])
    assert not out.exists()
