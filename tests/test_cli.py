"""The command line as a user runs it: the default study, flags, --set, --json, --trace, errors."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.cli_scenario import unused_calibration_settings
from simulator.scenario import default_scenario
from topologies.systems import load_system
from workloads.recipes import recipe_with

JSON_KEYS = {"step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu",
             "model_flops_per_token", "breakdown_s", "memory_bytes_per_gpu", "scenario"}


def _run_json(capsys, *args: str) -> dict:
    assert main(["run", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def default_result() -> dict:
    import io
    import contextlib
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["run", "--json"]) == 0
    return json.loads(out.getvalue())


def test_default_run_is_the_reference_scenario(default_result):
    s = default_result["scenario"]
    assert JSON_KEYS <= set(default_result)
    assert (s["model"], s["gpu"], s["num_gpus"]) == ("deepseek-v3", "gb300", 256)
    assert (s["tp"], s["pp"], s["vpp"], s["ep"], s["mbs"], s["gbs"], s["seq_len"]) == \
        (1, 2, 8, 32, 1, 4096, 4096)
    assert s["recipe"]["name"] == "mbridge-26.06" and s["recipe"]["precision"] == "mxfp8"
    assert default_result["model_flops_per_token"] == pytest.approx(2.59993e11, rel=1e-5)


def test_default_run_metrics_are_consistent(default_result):
    r = default_result
    step, gpus = r["step_time_s"], r["scenario"]["num_gpus"]
    assert r["tokens_per_s_per_gpu"] == pytest.approx(4096 * 4096 / (step * gpus))
    assert r["tflops_per_gpu"] == pytest.approx(
        r["tokens_per_s_per_gpu"] * r["model_flops_per_token"] / 1e12)
    assert r["mfu"] == pytest.approx(r["tflops_per_gpu"] / 5000)
    assert sum(r["breakdown_s"].values()) == pytest.approx(step, rel=1e-6)
    memory = r["memory_bytes_per_gpu"]
    assert memory["total"] == pytest.approx(sum(v for k, v in memory.items() if k != "total"))


def test_summary_names_the_headline_figures(capsys):
    assert main(["run", "--gbs", "256"]) == 0
    text = capsys.readouterr().out
    for label in ("step time", "tokens/s/GPU", "model TFLOP/s/GPU", "MFU", "pipeline bubble",
                  "memory per GPU"):
        assert label in text


def test_flags_and_set_reach_the_scenario(capsys):
    r = _run_json(capsys, "--gbs", "256", "--set", "a2a_overlap=false",
                  "--set", "system.nic=connectx-7", "--set", "calibration.gemm_efficiency.fp8=0.5")
    assert r["scenario"]["gbs"] == 256
    assert r["scenario"]["recipe"]["a2a_overlap"] is False


def test_slower_gemms_slow_the_step(capsys):
    fast = _run_json(capsys, "--gbs", "256")["step_time_s"]
    slow = _run_json(capsys, "--gbs", "256",
                     "--set", "calibration.gemm_efficiency.blackwell-ultra-fp8=0.35")
    assert slow["step_time_s"] > fast


@pytest.mark.parametrize("args, words", [
    (["--tp", "3"], ["num_gpus=256", "tp*cp*pp"]),
    (["--ep", "48"], ["etp*ep*pp"]),
    (["--gpus", "384", "--ep", "48", "--gbs", "3072"], ["ep=48", "num_experts"]),
    (["--set", "precision=fp6"], ["precision", "fp6"]),
    (["--set", "nonsense=1"], ["nonsense", "known"]),
    (["--system", "no-such-system"], ["no-such-system"]),
    (["--pp", "1", "--vpp", "1", "--ep", "8"], ["memory", "GiB", "weights"]),
    (["--set", "calibration.gemm_efficiency.fp8=2"], ["gemm_efficiency", "(0, 1]"]),
    (["--set", "calibration.gemm_efficiency.blackwel-fp8=0.5"],
     ["gemm_efficiency.blackwel-fp8", "not a key the cost model reads", "PRECISION"]),
    (["--set", "calibration.comm_efficiency.hybridep-ib=0.5"],
     ["comm_efficiency.hybridep-ib", "ALGORITHM-(nvlink8|nvlink|network)"]),
])
def test_bad_input_gets_one_line_error(one_line_error, args, words):
    line = one_line_error(["run", *args])
    assert all(word in line for word in words)


def test_a_calibration_setting_that_no_kernel_reads_is_named(capsys):
    """Hopper's FP8 rate changes nothing on GB300; Blackwell Ultra's is read there."""
    assert main(["run", "--json", "--model", "llama3-8b", "--gbs", "256",
                 "--set", "calibration.gemm_efficiency.hopper-fp8=0.5",
                 "--set", "calibration.gemm_efficiency.blackwell-ultra-fp8=0.5"]) == 0
    err = capsys.readouterr().err
    assert "--set calibration.gemm_efficiency.hopper-fp8 changes nothing in this run" in err
    assert "blackwell-ultra-fp8" not in err


def test_the_rack_rate_on_an_8_gpu_baseboard_is_named_with_the_key_read_there():
    dgx = replace(default_scenario(), system=load_system("dgx-h100"), domain_size=None,
                  recipe=recipe_with(default_scenario().recipe, dispatcher="deepep"))
    settings = ["calibration.comm_efficiency.deepep-nvlink=0.9",
                "calibration.comm_efficiency.deepep-nvlink8 = 0.5", "pdl=true"]
    assert unused_calibration_settings(settings, [dgx]) == [
        "calibration.comm_efficiency.deepep-nvlink"]


def test_a_dense_model_runs_without_expert_parallelism_unless_asked(capsys, one_line_error):
    """The default study is EP32; --model llama3-8b takes ep = etp = 1, the only values a
    dense model allows, and an explicit --ep is still checked."""
    scenario = _run_json(capsys, "--model", "llama3-8b", "--gbs", "256")["scenario"]
    assert (scenario["ep"], scenario["etp"]) == (1, 1)
    assert "ep=8" in one_line_error(["run", "--model", "llama3-8b", "--ep", "8",
                                     "--recipe", "megatron-defaults"])


def test_hopper_runs_a_block_scaled_default_recipe_in_fp8_and_says_so(capsys):
    """The default study is MXFP8; on H100 (no MXFP8) it runs FP8 with per-tensor scaling
    unless --precision asks for something else (which an MXFP8 request then fails on)."""
    argv = ["run", "--system", "dgx-h100", "--model", "llama3-8b", "--gpus", "8", "--tp", "1",
            "--pp", "1", "--vpp", "1", "--ep", "1", "--etp", "1", "--gbs", "8", "--mtp", "0",
            "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["scenario"]["recipe"]["precision"] == "fp8-cs"
    assert "h100 has no mxfp8: precision=fp8-cs" in captured.err
    for asked in (["--precision", "mxfp8"], ["--set", "precision=nvfp4"]):
        assert main([*argv, *asked]) == 2
        captured = capsys.readouterr()
        error = captured.err.strip().splitlines()[-1]
        assert "Traceback" not in captured.err and captured.out == ""
        assert error.startswith("moesim: error: precision=") and "Hopper" in error


def test_trace_has_one_track_per_lane(tmp_path, capsys):
    path = tmp_path / "step.json"
    assert main(["run", "--gbs", "256", "--trace", str(path)]) == 0
    events = json.loads(path.read_text())["traceEvents"]
    tracks = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    assert {(0, "compute"), (0, "ep"), (0, "pp"), (0, "dp")} <= tracks
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 for e in spans)
    assert any("dispatch" in e["name"] for e in spans)


def test_trace_is_not_written_when_the_run_fails(tmp_path, capsys):
    path = tmp_path / "step.json"
    assert main(["run", "--tp", "3", "--trace", str(path)]) == 2
    assert not path.exists()


DATA = Path(__file__).parent / "data"


def test_megatron_args_import_equals_the_built_in_scenario(capsys, default_result):
    r = _run_json(capsys, "--megatron-args", f"@{DATA / 'megatron' / 'dsv3-gb300-26.06.txt'}")
    assert r == default_result


def test_unknown_megatron_flags_are_listed(capsys):
    assert main(["run", "--gbs", "256", "--megatron-args", "--frobnicate 3"]) == 0
    assert "--frobnicate 3" in capsys.readouterr().err


def test_scenario_file_and_model_config_reach_the_run(capsys):
    faster = _run_json(capsys, str(DATA / "scenarios" / "gb300-nvlink-3.6tbs.yaml"), "--gbs", "256")
    base = _run_json(capsys, "--gbs", "256")
    assert faster["tokens_per_s_per_gpu"] > base["tokens_per_s_per_gpu"]
    llama = _run_json(capsys, "--model", str(DATA / "hf" / "llama3-8b.json"), "--auto-plan")
    assert llama["scenario"]["model"] == "llama3-8b"


QWEN_16 = ("--model", "qwen3-30b-a3b", "--pp", "1", "--vpp", "1", "--gbs", "32", "--seq", "1024")


@pytest.mark.parametrize("args", [
    ["--gpus", "32", "--ep", "16", "--set", "gpus=16", "--set", "ep=8"],
    ["--gpus", "16", "--set", "ep=8"],
    ["--set", "gpus=16", "--set", "ep=8"],
], ids=["set-after-flags", "flag-and-set", "sets"])
def test_plan_flags_and_settings_apply_together(capsys, args):
    # Each alone would leave an invalid plan in between (16 GPUs, EP16 or EP32).
    r = _run_json(capsys, *QWEN_16, *args)
    assert (r["scenario"]["num_gpus"], r["scenario"]["ep"]) == (16, 8)
    assert r == _run_json(capsys, *QWEN_16, "--gpus", "16", "--ep", "8")


def test_a_layout_set_after_plan_flags_is_kept(capsys):
    layout = "Et*20|t*28L"
    r = _run_json(capsys, *QWEN_16, "--gpus", "16", "--ep", "8", "--pp", "2",
                  "--set", f"layout={layout}")
    assert r["scenario"]["layout"] == layout
    assert _run_json(capsys, *QWEN_16, "--gpus", "16", "--ep", "8",
                     "--pp", "2")["scenario"]["layout"] != layout


def test_the_summary_warns_of_an_overlap_megatron_would_refuse_and_names_the_schedule(capsys):
    """The default recipe overlaps the all-to-all; with pp > 1 and vpp = 1 Megatron-Core
    refuses that, and the summary says so; with vpp = 2, or as DualPipeV, it does not."""
    pipeline = ["run", *QWEN_16, "--gpus", "16", "--ep", "8", "--set", "pp=2"]
    assert main(pipeline) == 0
    assert "Megatron-Core refuses" in capsys.readouterr().out
    assert main([*pipeline, "--set", "vpp=2"]) == 0
    interleaved = capsys.readouterr().out
    assert "Megatron-Core refuses" not in interleaved and "schedule" not in interleaved
    assert main([*pipeline, "--set", "vpp=2", "--set", "pipeline_schedule=dualpipev",
                 "--set", "gbs=64"]) == 0
    dualpipe = capsys.readouterr().out
    assert "dualpipev schedule" in dualpipe and "Megatron-Core refuses" not in dualpipe


def test_the_summary_names_the_what_ifs_it_runs(capsys):
    small = ["run", *QWEN_16, "--gpus", "16", "--ep", "8", "--set", "domain_size=8"]
    assert main(small) == 0
    plain = capsys.readouterr().out
    assert "what-ifs" not in plain and "mean over GPUs" in plain
    assert main([*small, "--set", "straggler_gpu=5", "--set", "straggler_slowdown=1.5",
                 "--set", "degraded_link=nic:6",
                 "--set", "degraded_link_bandwidth_fraction=0.25"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "what-ifs" in line]
    assert len(lines) == 1
    assert "straggler GPU 5" in lines[0] and "1.5x" in lines[0]
    assert "nic:6" in lines[0] and "25 %" in lines[0]


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_written_files_get_the_mode_the_umask_gives(tmp_path, capsys, umask_027):
    trace = tmp_path / "step.json"
    assert main(["run", *QWEN_16, "--gpus", "16", "--ep", "8", "--trace", str(trace)]) == 0
    assert main(["report", *QWEN_16, "--gpus", "16", "--ep", "8",
                 "--out", str(tmp_path / "report")]) == 0
    written = [trace, *sorted((tmp_path / "report").iterdir())]
    assert {path.suffix for path in written} == {".json", ".html", ".md", ".png"}
    assert {path.stat().st_mode & 0o777 for path in written} == {0o640}


@pytest.mark.parametrize("args, work", [
    (["run", "--trace", "{missing}/step.json"], "cli.run_scenario"),
    (["run", "--gantt", "{folder}"], "cli.run_scenario"),
    (["validate", "{fixture}", "--plot", "{missing}/validation.png"], "cli.validate_rows"),
    (["validate", "{fixture}", "--plot", "{folder}/validation.txt"], "cli.validate_rows"),
    (["run", "--gantt", "{folder}/gantt"], "cli.run_scenario"),
    (["calibrate", "{fixture}", "-o", "{missing}/fit.yaml", "--parameters", "host_launch_s"],
     "cli.fit"),
    (["report", "--out", "{file}"], "cli_studies.run_scenario"),
    (["scale", "--gpus", "64,128", "--out", "{file}/inside"], "cli_studies.scale"),
    (["compare", "--systems", "gb200-nvl72,gb300-nvl72", "--out", "{file}"],
     "cli_studies.compare_systems"),
])
def test_an_output_that_cannot_be_written_is_refused_before_the_work(
        tmp_path, capsys, monkeypatch, args, work):
    """A 12-minute validation or an hour's fit must not end in "folder does not exist"."""
    import importlib

    module, function = work.split(".")

    def never(*args, **kwargs):
        raise AssertionError(f"{work} ran before the output was checked")
    monkeypatch.setattr(importlib.import_module(f"simulator.{module}"), function, never)
    fixture = DATA / "validate_three.csv"
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    filled = [a.format(missing=tmp_path / "missing", folder=tmp_path, fixture=fixture,
                       file=a_file) for a in args]
    assert main(filled) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("moesim: error: output")
    assert any(words in lines[0] for words in ("does not exist", "is a folder", "is a file",
                                               "is inside the file", "a figure is written as"))


def test_compare_puts_the_release_on_the_models_preset_for_each_system(capsys, tmp_path):
    """Each point of `compare --systems` is the release as `run --system` builds it for the
    model on that GPU (workloads.model_presets), not the base GPU's preset."""
    plan = ["--model", "qwen3-30b-a3b", "--gpus", "8", "--pp", "1", "--vpp", "1", "--ep", "8",
            "--mbs", "1", "--gbs", "16", "--mtp", "0"]
    assert main(["compare", *plan, "--systems", "gb200-nvl72,dgx-h100", "--same-recipe",
                 "--json", "--out", str(tmp_path / "same")]) == 0
    same = {p["point"]: p["tokens_per_s_per_gpu"] for p in json.loads(capsys.readouterr().out)}
    assert main(["compare", *plan, "--systems", "gb200-nvl72,dgx-h100", "--json",
                 "--out", str(tmp_path / "compare")]) == 0
    points = {p["point"]: p["tokens_per_s_per_gpu"] for p in json.loads(capsys.readouterr().out)}
    for system in ("gb200-nvl72", "dgx-h100"):
        run = _run_json(capsys, *plan, "--system", system)
        assert points[system] == pytest.approx(run["tokens_per_s_per_gpu"])
    assert same["dgx-h100"] != pytest.approx(points["dgx-h100"])


def test_a_run_without_figures_imports_neither_matplotlib_nor_scipy():
    """The figures and the fit's solver are imported where a command draws or fits: a second
    of imports that `moesim run` without --gantt does not pay."""
    fixture = DATA / "validate_three.csv"
    name = fixture.read_text().splitlines()[1].split(",")[0]
    code = ("import contextlib, io, sys\n"
            "from simulator.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['run', '--row', {f'{fixture}:{name}'!r}]) == 0\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'scipy'}))\n")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout
    assert loaded.strip() == "[]"
