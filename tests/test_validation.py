"""moesim validate on a three-row fixture (made-up measurements, not published rows)."""

import json
import signal
from pathlib import Path

import pandas as pd
import pytest

import simulator.validation as validation
from reports.validation_table import REASON_COLUMN_CHARS
from simulator.cli import main
from simulator.scenario import run_scenario
from simulator.validation import (read_measurements, row_recipe, row_scenario, summarize,
                                  validate_rows)
from workloads.flops import reported_flops_per_token
from workloads.model_files import load_model

FIXTURE = Path(__file__).parent / "data" / "validate_three.csv"


@pytest.fixture(scope="module")
def results():
    return validate_rows(read_measurements(FIXTURE))


def test_errors_are_taken_on_tokens_where_measured_else_on_tflops(results):
    rows = read_measurements(FIXTURE)
    on_tokens, on_tflops, failed = results
    predicted = run_scenario(row_scenario(rows[0])).metrics
    assert on_tokens.predicted_tokens_per_s_per_gpu == pytest.approx(
        predicted.tokens_per_s_per_gpu)
    assert on_tokens.error_pct == pytest.approx(
        100 * (predicted.tokens_per_s_per_gpu / 10000 - 1))
    assert on_tflops.error_pct == pytest.approx(
        100 * (on_tflops.predicted_tflops_per_gpu / 400 - 1))
    assert failed.status == "failed" and "x999" in failed.reason


def test_parallel_jobs_give_the_same_results(results):
    assert validate_rows(read_measurements(FIXTURE), jobs=2) == results


def test_a_dask_cluster_gives_the_same_results(results, tmp_path, monkeypatch, capsys):
    """`--scheduler`: the rows run on the cluster's workers, whose results equal the local
    ones, a row naming a model file (read here, where the scenario is built) and the row that
    cannot run included."""
    from distributed import LocalCluster

    from simulator.dask_cluster import dask_client

    monkeypatch.chdir(tmp_path)
    (tmp_path / "half.yaml").write_text("extends: llama3-8b\nname: llama3-8b-half\n"
                                        "num_layers: 16\n")
    rows = read_measurements(FIXTURE)
    half = {**rows[0], "name": "fixture-half", "model": "half.yaml"}
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster:
        assert main(["validate", str(FIXTURE), "--json",
                     "--scheduler", cluster.scheduler_address]) == 0
        with dask_client(cluster.scheduler_address) as client:
            on_dask = validate_rows([*rows, half], client=client)
    assert on_dask[:3] == results
    assert on_dask[3] == validate_rows([half])[0] and on_dask[3].status == "ok"
    assert [r["error_pct"] for r in json.loads(capsys.readouterr().out)["rows"]] == [
        r.error_pct for r in results]


def test_rows_that_moesim_simulates_alike_share_one_simulation(results, monkeypatch):
    tokens, tflops, failed = read_measurements(FIXTURE)
    rows = [tokens, dict(tokens, name="again", measured_tokens_per_s_per_gpu="9000"),
            dict(tokens, name="tp2", tp="2"), failed, dict(failed, name="failed-again")]
    simulated = []
    steady_state = validation.run_steady_state
    monkeypatch.setattr(validation, "run_steady_state",
                        lambda scenario: simulated.append(scenario) or steady_state(scenario))
    first, again, tp2, *failures = validate_rows(rows)
    assert len(simulated) == 2
    assert again.predicted_tokens_per_s_per_gpu == first.predicted_tokens_per_s_per_gpu
    assert (first.error_pct, again.error_pct) == pytest.approx(
        (100 * (first.predicted_tokens_per_s_per_gpu / 10000 - 1),
         100 * (first.predicted_tokens_per_s_per_gpu / 9000 - 1)))
    assert tp2.predicted_tokens_per_s_per_gpu != first.predicted_tokens_per_s_per_gpu
    assert [(r.name, r.status) for r in failures] == [
        (failed["name"], "failed"), ("failed-again", "failed")]
    assert validate_rows(rows, jobs=2) == [first, again, tp2, *failures]


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def test_workers_ended_by_the_pool_die_quietly_under_a_parents_stop_handler(results, capfd):
    """`moesim calibrate` turns SIGTERM into KeyboardInterrupt; the workers it forks must not
    inherit that, or each pool's end (which sends them SIGTERM) prints their tracebacks."""
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        for _ in range(3):
            assert validate_rows(read_measurements(FIXTURE), jobs=2) == results
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert "Traceback" not in capfd.readouterr().err


def test_summary_counts_failures_and_groups(results):
    summary = summarize(results)
    assert (summary["n"], summary["n_failed"]) == (3, 1)
    errors = sorted(abs(r.error_pct) for r in results[:2])
    assert summary["max_abs_error_pct"] == pytest.approx(errors[-1])
    assert summary["median_abs_error_pct"] == pytest.approx(sum(errors) / 2)
    assert set(summary["by_gpu"]) == {"h100"} and set(summary["by_model"]) == {"llama3-8b"}


def test_summary_groups_by_any_column_with_the_signed_bias(results):
    rows = read_measurements(FIXTURE)
    summary = summarize(results, rows, by=("num_gpus", "precision"))
    on_tokens, on_tflops, _ = results
    assert summary["mean_error_pct"] == pytest.approx(
        (on_tokens.error_pct + on_tflops.error_pct) / 2)
    assert list(summary["by_num_gpus"]) == ["8", "16"]  # by value; the failed row not counted
    assert summary["by_num_gpus"]["8"]["n"] == 1
    assert summary["by_num_gpus"]["8"]["mean_error_pct"] == pytest.approx(on_tokens.error_pct)
    assert summary["by_precision"]["fp8-cs"]["mean_error_pct"] == pytest.approx(
        on_tflops.error_pct)


def test_validate_by_prints_a_line_per_value_and_refuses_unknown_columns(capsys):
    assert main(["validate", str(FIXTURE), "--by", "tp,pp", "--by", "routing"]) == 0
    out = capsys.readouterr().out
    assert all(label in out for label in ("tp=1", "tp=2", "pp=1", "routing=(empty)", "bias %"))
    assert main(["validate", str(FIXTURE), "--by", "colour"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--by 'colour'" in err and "release" in err


def test_the_table_shortens_a_failed_rows_reason_and_prints_it_whole_below(results, capsys):
    reason = results[2].reason
    assert main(["validate", str(FIXTURE)]) == 0
    lines = capsys.readouterr().out.splitlines()
    in_table = next(line for line in lines if line.startswith("fixture-llama8b-x999-8"))
    assert len(reason) > REASON_COLUMN_CHARS and in_table.endswith("...")
    assert reason not in in_table and f"  fixture-llama8b-x999-8: {reason}" in lines


def test_validate_command_json_and_plot(tmp_path, capsys):
    plot = tmp_path / "validation.png"
    assert main(["validate", str(FIXTURE), "--json", "--plot", str(plot)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert set(document) == {"rows", "summary"}
    keys = {"name", "status", "reason", "predicted_tokens_per_s_per_gpu",
            "predicted_tflops_per_gpu", "measured_tokens_per_s_per_gpu",
            "measured_tflops_per_gpu", "error_pct"}
    assert all(keys <= set(row) for row in document["rows"])
    assert {"n", "n_failed", "median_abs_error_pct", "mean_abs_error_pct",
            "max_abs_error_pct", "mean_error_pct"} <= set(document["summary"])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_row_that_ran_carries_its_step_and_where_the_time_went(results):
    """The predicted step's breakdown adds up to the step, and the step to the throughput (the
    global batch's tokens over the GPUs and the step); a failed row has neither."""
    rows = read_measurements(FIXTURE)
    for row, result in zip(rows, results):
        if result.status != "ok":
            assert result.predicted_step_time_s is None and result.predicted_breakdown_s is None
            continue
        step_s = result.predicted_step_time_s
        assert sum(result.predicted_breakdown_s.values()) == pytest.approx(step_s, rel=1e-6)
        tokens = int(row["gbs"]) * int(row["seq_len"]) / int(row["num_gpus"])
        assert result.predicted_tokens_per_s_per_gpu == pytest.approx(tokens / step_s)


@pytest.mark.parametrize("name, magic", [("validation.svg", b"<?xml"), ("validation.PDF", b"%PDF")])
def test_the_plot_takes_the_format_its_extension_names(tmp_path, capsys, name, magic):
    plot = tmp_path / name
    assert main(["validate", str(FIXTURE), "--json", "--plot", str(plot)]) == 0
    assert plot.read_bytes().startswith(magic)


def test_validation_figure_has_the_points_and_the_band(results):
    from dataclasses import asdict

    from reports.validation_plot import validation_figure
    figure = validation_figure([asdict(r) for r in results], "fixture")
    axes = figure.axes[0]
    assert axes.get_xscale() == "log" and axes.get_yscale() == "log"
    offsets = [len(c.get_offsets()) for c in axes.collections if hasattr(c, "get_offsets")]
    assert sum(offsets) >= 2


def test_the_figure_names_the_rows_missed_by_more_than_15_percent(results):
    from dataclasses import asdict

    from reports.validation_plot import validation_figure
    rows = [asdict(r) for r in results if r.status == "ok"]
    off = dict(rows[0], name="far-off", predicted_tokens_per_s_per_gpu=(
        1.2 * rows[0]["measured_tokens_per_s_per_gpu"]))
    near = dict(rows[0], name="near", predicted_tokens_per_s_per_gpu=(
        1.1 * rows[0]["measured_tokens_per_s_per_gpu"]))
    figure = validation_figure([off, near], "fixture")
    assert [text.get_text() for text in figure.axes[0].texts] == ["far-off"]


def _first_row_with(column: str, value: str) -> str:
    """The fixture's text with `column` of its first row set to `value`."""
    import csv
    import io

    lines = FIXTURE.read_text().splitlines()
    header, first = lines[0].split(","), next(csv.reader([lines[1]]))
    first[header.index(column)] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(first)
    return "\n".join([lines[0], out.getvalue(), *lines[2:]]) + "\n"


def _without_columns(*columns: str) -> str:
    """The fixture's text without `columns`."""
    frame = pd.read_csv(FIXTURE, dtype=str, keep_default_na=False)
    return frame.drop(columns=list(columns)).to_csv(index=False)


def test_a_csv_may_leave_out_the_flags_the_formula_and_one_measurement(results, tmp_path):
    """The columns a CSV may leave out read as empty: the release's default flags, the model's
    own MTP depth, no FSDP, Megatron's FLOPs count for a row that measured tokens/s."""
    short_text = _without_columns(
        "fsdp", "mtp_layers", "recompute", "dispatcher", "cuda_graphs", "a2a_overlap",
        "fp8_attention", "routing", "measured_tflops_per_gpu", "flops_formula", "source_id",
        "source")
    path = tmp_path / "short.csv"
    path.write_text("\n".join(short_text.splitlines()[:2]) + "\n")
    row = read_measurements(path)[0]
    assert (row["fsdp"], row["flops_formula"]) == ("0", "megatron-causal")
    assert row_scenario(row) == row_scenario(read_measurements(FIXTURE)[0])
    short = validate_rows([row])[0]
    assert short.predicted_tokens_per_s_per_gpu == results[0].predicted_tokens_per_s_per_gpu
    assert short.predicted_tflops_per_gpu == pytest.approx(results[0].predicted_tflops_per_gpu)


@pytest.mark.parametrize("text, words", [
    ("name,model\nx,y\n", ["missing column"]),
    (_without_columns("measured_tokens_per_s_per_gpu", "measured_tflops_per_gpu"),
     ["missing column(s) measured_tokens_per_s_per_gpu or measured_tflops_per_gpu"]),
    (_first_row_with("mtp_layers", "one"), ["line 2", "mtp_layers='one'", "or empty"]),
    (FIXTURE.read_text().replace("400,megatron-causal", "400,", 1),
     ["line 3", "flops_formula is empty", "TFLOP/s alone", "llama3"]),
    (FIXTURE.read_text().replace(",8,bf16,1,1,1", ",eight,bf16,1,1,1", 1), ["num_gpus", "eight"]),
    (FIXTURE.read_text() + FIXTURE.read_text().splitlines()[1] + "\n",
     ["line 5", "fixture-llama8b-h100-8-tokens", "line 2", "unique"]),
    (FIXTURE.read_text().replace(",10000,,megatron", ",0,,megatron", 1),
     ["line 2", "measured_tokens_per_s_per_gpu='0'", "positive number"]),
    (FIXTURE.read_text().replace(",10000,,megatron", ",-5,,megatron", 1),
     ["line 2", "measured_tokens_per_s_per_gpu='-5'", "positive number"]),
    (FIXTURE.read_text().replace(",10000,,megatron", ",fast,,megatron", 1),
     ["line 2", "measured_tokens_per_s_per_gpu='fast'", "positive number"]),
    (FIXTURE.read_text().replace(",10000,,megatron", ",,,megatron", 1),
     ["line 2", "needs measured_tokens_per_s_per_gpu or measured_tflops_per_gpu"]),
    (_first_row_with("fsdp", "2"), ["line 2", "fsdp='2'", "'0', '1'"]),
    (_first_row_with("a2a_overlap", "yes"), ["line 2", "a2a_overlap='yes'", "'1'"]),
    (_first_row_with("routing", "weird"), ["line 2", "routing='weird'", "'tokendrop'"]),
    (_first_row_with("name", ""), ["line 2", "name is empty"]),
    ("", ["bad.csv", "cannot read as CSV"]),
    ("a,b\n1,2\n3,4,5,6\n", ["bad.csv", "cannot read as CSV", "Expected 2 fields"]),
    (FIXTURE.read_text().splitlines()[0] + "\n", ["bad.csv", "no rows under the header"]),
])
def test_malformed_csv_gets_one_line_error(tmp_path, capsys, text, words):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(w in err for w in words)


def test_a_row_runs_on_the_system_its_system_column_names(tmp_path, monkeypatch):
    """An empty or missing `system` keeps the GPU's usual system; a catalog name or a .yaml
    file (a path from the current folder, as --system takes it) replaces it, if its GPU is
    the row's."""
    monkeypatch.chdir(tmp_path)
    lines = FIXTURE.read_text().splitlines()
    (tmp_path / "systems").mkdir()
    (tmp_path / "systems" / "slow-ib.yaml").write_text(
        "extends: dgx-h100\nname: dgx-h100-slow-ib\nnic: {extends: connectx-7, "
        "bandwidth_bytes_per_s: 2.5e10}\n")
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([lines[0] + ",system",
                               lines[1] + ",",
                               lines[1].replace("-tokens,", "-file,", 1) + ",systems/slow-ib.yaml",
                               lines[1].replace("-tokens,", "-b200,", 1) + ",dgx-b200"]) + "\n")
    usual, custom, other_gpu = read_measurements(path)
    assert row_scenario(usual).system.name == "dgx-h100"
    assert row_scenario(custom).system.name == "dgx-h100-slow-ib"
    with pytest.raises(ValueError, match="system='dgx-b200' has gpu 'b200', not the row's "
                                         "gpu='h100'"):
        row_scenario(other_gpu)
    failed = [r for r in validate_rows([usual, custom, other_gpu]) if r.status == "failed"]
    assert [r.name for r in failed] == ["fixture-llama8b-h100-8-b200"]


def test_a_row_may_name_a_model_file_and_a_recipe_file(tmp_path, monkeypatch):
    """`model` and `release` take a model file and a recipe file (paths from the current
    folder, as --model and --recipe take them). A recipe file is taken as written, without the
    release's presets (the catalog release gives Llama TP comm overlap); the row's explicit
    flags still go on top. A file that is not there, or a release that is neither, fails its
    row with the path or the column's name."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "half.yaml").write_text("extends: llama3-8b\nname: llama3-8b-half\n"
                                        "num_layers: 16\n")
    (tmp_path / "stack.yaml").write_text("extends: mbridge-26.02\nname: my-stack\n"
                                         "cuda_graphs: partial\n")
    row = {**read_measurements(FIXTURE)[1], "fp8_attention": "1"}
    catalog = row_scenario(row)
    files = row_scenario({**row, "model": "half.yaml", "release": "stack.yaml"})
    assert (files.model.name, files.model.num_layers) == ("llama3-8b-half", 16)
    assert catalog.model.num_layers == 32
    assert (files.recipe.name, files.recipe.cuda_graphs) == ("my-stack", "partial")
    assert catalog.recipe.tp_comm_overlap and not files.recipe.tp_comm_overlap
    assert files.recipe.fp8_attention
    missing = {**row, "name": "fixture-missing", "model": "models/none.yaml"}
    unknown = {**row, "name": "fixture-unknown", "release": "mbridge-99.01"}
    missed, unknown_release = validate_rows([missing, unknown])
    assert missed.status == "failed" and "models/none.yaml" in missed.reason
    assert unknown_release.reason.startswith("release='mbridge-99.01': unknown recipe; known: ")
    assert unknown_release.reason.endswith("(or a path to a .yaml recipe file)")


def test_a_row_reads_its_model_file_once(tmp_path, monkeypatch):
    """Building a row's scenario reads its model file once: the release's presets (keyed by
    the model's name) take the model already read."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "half.yaml").write_text("extends: llama3-8b\nname: llama3-8b-half\n"
                                        "num_layers: 16\n")
    reads: list[str] = []

    def counted(name: str):
        reads.append(name)
        return load_model(name)

    monkeypatch.setattr(validation, "load_model", counted)
    row_scenario({**read_measurements(FIXTURE)[1], "model": "half.yaml"})
    assert reads == ["half.yaml"]


def test_a_dualpipe_row_runs_as_dualpipev_with_two_stages_per_rank():
    """DeepSeek's DualPipe rows count no virtual stages (vpp = 1) though each rank runs two;
    moesim runs them as DualPipeV with vpp = 2 on the same ranks. Other rows keep their vpp."""
    row = read_measurements(FIXTURE)[0]
    plain = row_scenario({**row, "pp": "2"})
    dualpipe = row_scenario({**row, "pp": "2", "release": "deepseek-2024", "precision": "bf16",
                             "dispatcher": "alltoall"})
    assert (plain.plan.vpp, plain.recipe.pipeline_schedule) == (1, "1f1b")
    assert (dualpipe.plan.vpp, dualpipe.recipe.pipeline_schedule) == (2, "dualpipev")


def test_with_no_row_run_the_statistics_are_null_and_the_json_is_strict(tmp_path, capsys):
    """No NaN in the JSON (strict parsers reject it), "-" in the table."""
    path = tmp_path / "failing.csv"
    lines = FIXTURE.read_text().splitlines()
    path.write_text("\n".join([lines[0]] + [line.replace("llama3-8b", "no-such-model")
                                            for line in lines[1:]]) + "\n")
    assert main(["validate", str(path), "--json"]) == 0

    def refuse(constant):
        raise ValueError(f"{constant} in the JSON")
    summary = json.loads(capsys.readouterr().out, parse_constant=refuse)["summary"]
    assert summary["n"] == summary["n_failed"] == 3
    assert summary["median_abs_error_pct"] is None and summary["max_abs_error_pct"] is None
    assert main(["validate", str(path), "--plot", str(tmp_path / "v.png")]) == 0
    table = capsys.readouterr().out
    assert "nan" not in table and "3 rows, 3 failed" in table


def test_an_unknown_dispatcher_is_a_failed_row_with_its_reason(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text(_first_row_with("dispatcher", "carrier-pigeon"))
    first = validate_rows(read_measurements(path))[0]
    assert first.status == "failed"
    assert "dispatcher='carrier-pigeon'" in first.reason and "hybridep" in first.reason


def test_a_row_counted_with_metas_formula_runs_and_is_compared_on_it(results, tmp_path):
    """The second fixture row measured TFLOP/s only; counted as the Llama 3 paper counts."""
    path = tmp_path / "rows.csv"
    path.write_text(FIXTURE.read_text().replace("400,megatron-causal", "400,llama3"))
    meta = validate_rows(read_measurements(path))[1]
    megatron = results[1]
    assert meta.status == "ok" and meta.measured_tflops_per_gpu == 400
    model = load_model("llama3-8b")
    ratio = (reported_flops_per_token(model, 4096, "llama3")
             / reported_flops_per_token(model, 4096, "megatron-causal"))
    assert meta.predicted_tflops_per_gpu == pytest.approx(megatron.predicted_tflops_per_gpu
                                                          * ratio)


def test_a_rows_recompute_turns_off_the_overlap_megatron_refuses_beside_it():
    """A 26.06 DeepSeek-V3 row that recomputes whole layers and says nothing of the all-to-all
    overlap ran without it (its release's default); one that says it ran with it is refused."""
    row = {**read_measurements(FIXTURE)[0], "model": "deepseek-v3", "gpu": "gb300",
           "release": "mbridge-26.06", "precision": "mxfp8", "recompute": "full"}
    assert not row_recipe(row).a2a_overlap and row_recipe({**row, "recompute": ""}).a2a_overlap
    with pytest.raises(ValueError, match="forbids full recompute"):
        row_recipe({**row, "a2a_overlap": "1"})


def _run_row(capsys, name: str, *flags: str) -> dict:
    assert main(["run", "--row", f"{FIXTURE}:{name}", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("index", [0, 1])
def test_run_from_a_row_predicts_what_validate_does(results, capsys, index):
    """`moesim run --row FILE:NAME` runs the row's scenario and sets it against the row's
    measurement as `validate` does (tokens/s where measured, else TFLOP/s)."""
    row = results[index]
    document = _run_row(capsys, row.name)
    measured = document["measured_row"]
    assert document["tokens_per_s_per_gpu"] == pytest.approx(row.predicted_tokens_per_s_per_gpu)
    assert measured["error_pct"] == pytest.approx(row.error_pct)
    assert measured["predicted_tflops_per_gpu"] == pytest.approx(row.predicted_tflops_per_gpu)
    assert (measured["measured_tokens_per_s_per_gpu"], measured["measured_tflops_per_gpu"]) == (
        row.measured_tokens_per_s_per_gpu, row.measured_tflops_per_gpu)
    assert measured["source"] == read_measurements(FIXTURE)[index]["source"]


def test_a_what_if_on_a_row_is_set_against_the_rows_measurement(results, capsys):
    row = results[0]
    slower = _run_row(capsys, row.name, "--set", "calibration.gemm_efficiency.hopper-bf16=0.3")
    assert slower["tokens_per_s_per_gpu"] < row.predicted_tokens_per_s_per_gpu
    assert slower["measured_row"]["error_pct"] == pytest.approx(
        100 * (slower["tokens_per_s_per_gpu"] / 10000 - 1))
    assert main(["run", "--row", f"{FIXTURE}:{row.name}"]) == 0
    measured = next(line for line in capsys.readouterr().out.splitlines()
                    if line.lstrip().startswith("measured"))
    assert f"(row {row.name}; this run" in measured


@pytest.mark.parametrize("spec, words", [
    ("{fixture}:no-such-row", ["no row named 'no-such-row'", "3 rows"]),
    ("{fixture}", ["FILE.csv:NAME"]),
    ("missing.csv:fixture-llama8b-h100-8-tokens", ["missing.csv", "cannot read"]),
    ("{fixture}:fixture-llama8b-x999-8", ["x999"]),
])
def test_a_bad_row_gets_one_line_error(one_line_error, spec, words):
    line = one_line_error(["run", "--row", spec.format(fixture=FIXTURE)])
    for word in words:
        assert word in line


def test_a_row_and_a_scenario_file_together_are_refused(capsys, tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("model: llama3-8b\n")
    assert main(["run", str(scenario), "--row", f"{FIXTURE}:fixture-llama8b-h100-8-tokens"]) == 2
    assert "not both" in capsys.readouterr().err


def test_validate_only_runs_the_rows_that_match_each_selection(results, capsys):
    assert main(["validate", str(FIXTURE), "--json", "--only", "gpu=h100,b200",
                 "--only", "precision=bf16"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in document["rows"]] == [results[0].name]
    assert document["rows"][0]["error_pct"] == pytest.approx(results[0].error_pct)
    assert document["summary"]["n"] == 1


def test_validate_set_gives_every_row_the_what_if_that_run_row_gives_one(results, capsys):
    """`validate --set calibration.KEY=VALUE` changes each row's prediction as `run --row
    NAME --set` does, and leaves the rows the parameter does not touch alone."""
    setting = "calibration.gemm_efficiency.hopper-bf16=0.3"
    assert main(["validate", str(FIXTURE), "--json", "--only", "gpu=h100", "--set", setting,
                 "--set", "calibration.memory_efficiency=0.7"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [row["name"] for row in rows] == [r.name for r in results[:2]]
    for row in rows:
        one = _run_row(capsys, row["name"], "--set", setting,
                       "--set", "calibration.memory_efficiency=0.7")
        assert one["measured_row"]["error_pct"] == pytest.approx(row["error_pct"])
        before = next(r for r in results if r.name == row["name"])
        assert row["error_pct"] < before.error_pct


def test_validate_names_a_set_key_that_no_row_reads(capsys):
    """The two Hopper rows read Hopper's BF16 rate, none reads Blackwell Ultra's."""
    assert main(["validate", str(FIXTURE), "--json", "--only", "gpu=h100",
                 "--set", "calibration.gemm_efficiency.hopper-bf16=0.5",
                 "--set", "calibration.gemm_efficiency.blackwell-ultra-fp8=0.5"]) == 0
    err = capsys.readouterr().err
    assert ("--set calibration.gemm_efficiency.blackwell-ultra-fp8 changes nothing in any row"
            in err)
    assert "hopper-bf16" not in err


@pytest.mark.parametrize("setting, words", [
    ("a2a_overlap=false", ["--set a2a_overlap", "calibration.FIELD[.KEY] only", "run --row"]),
    ("calibration.memory_efficiency=fast", ["calibration.memory_efficiency='fast'", "number"]),
    ("calibration.gemm_efficiency.hoper-bf16=0.5", ["hoper-bf16", "not a key"]),
    ("calibration.memory_efficiency", ["expected key=value"]),
    ("calibration.roofline_overlap_exponent=0.5", ["roofline_overlap_exponent=0.5", ">= 1"]),
])
def test_a_bad_validate_setting_gets_one_line_error(one_line_error, setting, words):
    line = one_line_error(["validate", str(FIXTURE), "--set", setting])
    for word in words:
        assert word in line


@pytest.mark.parametrize("selection, words", [
    ("gpu=b200", ["--only 'gpu=b200'", "matches none of the rows left (3 rows)"]),
    ("colour=red", ["--only 'colour=red'", "COLUMN=VALUE", "gpu"]),
    ("gpu=", ["COLUMN=VALUE"]),
])
def test_a_selection_that_runs_nothing_gets_one_line_error(one_line_error, selection, words):
    line = one_line_error(["validate", str(FIXTURE), "--only", selection])
    for word in words:
        assert word in line


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_a_bad_scheduler_is_one_line_before_any_work_and_nothing_is_written(
        one_line_error, tmp_path, command):
    figure, fit = tmp_path / "v.png", tmp_path / "fit.yaml"
    outputs = ["--plot", str(figure)] if command == "validate" else ["-o", str(fit)]
    line = one_line_error([command, str(FIXTURE), *outputs, "--scheduler", "nowhere"])
    assert "scheduler 'nowhere'" in line and "port" in line, line
    assert not figure.exists() and not fit.exists()


def test_a_report_of_a_row_carries_its_measurement(results, capsys, tmp_path):
    row = results[0]
    out = tmp_path / "report"
    assert main(["report", "--row", f"{FIXTURE}:{row.name}", "--out", str(out)]) == 0
    markdown = (out / "report.md").read_text()
    assert f"(row {row.name}; this run" in markdown and f"{row.error_pct:+.1f} %" in markdown


def test_compare_recipes_puts_each_release_on_the_models_preset_as_run_does(capsys, tmp_path):
    """Each point of `compare --recipes` is the release as `run --recipe` builds it for the
    model and GPU (workloads.model_presets), not the release's DeepSeek-V3 recipe."""
    name = "fixture-llama8b-h100-8-tokens"
    assert main(["compare", "--row", f"{FIXTURE}:{name}", "--recipes",
                 "mbridge-26.02,mbridge-25.11", "--json", "--out", str(tmp_path / "compare")]) == 0
    points = {p["point"]: p["tokens_per_s_per_gpu"] for p in json.loads(capsys.readouterr().out)}
    for release in ("mbridge-26.02", "mbridge-25.11"):
        run = _run_row(capsys, name, "--recipe", release)
        assert points[release] == pytest.approx(run["tokens_per_s_per_gpu"])
