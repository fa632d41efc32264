"""Every catalog model runs on every catalog system at a sensible plan (simulator.planner)."""

import json

import pytest

from simulator.cli import main
from simulator.planner import recipe_for, sensible_plan
from simulator.scenario import Scenario, default_domain_size, run_scenario
from topologies.hardware import gpu_spec
from topologies.systems import SYSTEM_NAMES, load_system
from workloads.models import MODELS
from workloads.recipes import recipe


@pytest.mark.parametrize("system_name", SYSTEM_NAMES)
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_model_runs_on_system(model_name, system_name):
    system, model = load_system(system_name), MODELS[model_name]
    recipe_ = recipe_for(system, recipe("mbridge-26.06"))
    domain = default_domain_size(system)
    plan = sensible_plan(model, system, recipe_, domain_size=domain)
    result = run_scenario(Scenario(system=system, model=model, plan=plan, recipe=recipe_,
                                   domain_size=domain))
    metrics = result.metrics
    assert metrics.step_time_s > 0 and 0 < metrics.mfu < 1
    assert result.memory.total_bytes <= gpu_spec(system.gpu).hbm_capacity_bytes
    assert sum(metrics.breakdown_s.values()) == pytest.approx(metrics.step_time_s, rel=1e-6)


def test_hopper_runs_fp8_with_per_tensor_scaling():
    assert recipe_for(load_system("dgx-h100"), recipe("mbridge-26.06")).precision == "fp8-cs"
    assert recipe_for(load_system("gb300-nvl72"), recipe("mbridge-26.06")).precision == "mxfp8"


def test_auto_plan_flag_picks_a_plan_that_fits(capsys):
    assert main(["run", "--model", "llama3-70b", "--system", "dgx-h100", "--auto-plan",
                 "--json"]) == 0
    assert '"model": "llama3-70b"' in capsys.readouterr().out


def test_no_plan_fits_gets_one_line_error(one_line_error):
    error = one_line_error(["run", "--model", "kimi-k2", "--system", "dgx-h100",
                            "--precision", "fp8-cs", "--auto-plan", "--gpus", "8", "--tp", "2"])
    assert "no plan on 8 h100 GPUs fits in memory" in error and ", tp=2" in error


def _auto_plan(capsys, *flags: str) -> dict:
    assert main(["run", "--system", "dgx-h100", "--auto-plan", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)["scenario"]


def test_auto_plan_keeps_the_plan_flags_given_and_chooses_the_rest(capsys):
    # TP8 on 16 GPUs is the smallest plan; with --tp 4 it takes a second stage instead.
    assert _auto_plan(capsys, "--model", "llama3-70b")["tp"] == 8
    kept = _auto_plan(capsys, "--model", "llama3-70b", "--tp", "4", "--set", "gbs=64")
    assert (kept["tp"], kept["pp"], kept["gbs"]) == (4, 2, 64)


def test_auto_plan_fits_the_recipe_as_set_changes_it(capsys):
    # Full recompute keeps Llama 3 8B's activations at MBS 8 inside one GPU: no TP needed.
    assert _auto_plan(capsys, "--model", "llama3-8b", "--mbs", "8")["tp"] == 2
    assert _auto_plan(capsys, "--model", "llama3-8b", "--mbs", "8",
                      "--set", "recompute_modules=full")["tp"] == 1


def test_auto_plan_gives_the_all_to_all_overlap_virtual_stages(capsys):
    overlapped = _auto_plan(capsys)
    assert overlapped["pp"] > 1 and overlapped["vpp"] == 2
    assert _auto_plan(capsys, "--set", "a2a_overlap=false")["vpp"] == 1


def test_auto_plan_gives_each_dp_rank_whole_local_batches(capsys):
    """AutoModel runs the pipeline once per local batch of 8 sequences: the planner rounds its
    batch of 2 pp sequences per DP rank up to whole local batches, the degrees unchanged."""
    plan = _auto_plan(capsys, "--recipe", "automodel-2026")
    whole = _auto_plan(capsys, "--recipe", "automodel-2026", "--set", "local_batch_size=0")
    degrees = ("tp", "pp", "vpp", "ep", "dp")
    assert [plan[k] for k in degrees] == [whole[k] for k in degrees]
    assert whole["pp"] == 2 and whole["gbs"] // whole["dp"] == 4
    assert plan["gbs"] // plan["dp"] == 8
