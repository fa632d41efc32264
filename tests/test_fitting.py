"""Calibration recovers known parameters from measurements that moesim itself generated."""

import csv
import hashlib
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.calibration import (DEFAULT_PARAMS, SHIPPED_CALIBRATION, calibration_values,
                                   load_calibration, params_value, params_with)
from simulator.fitting import DEFAULT_FIT, FitParameter, Loss, fit
from simulator.validation import read_measurements, validate_rows

FIXTURE = Path(__file__).parent / "data" / "validate_three.csv"
TRUE = {"gemm_efficiency.hopper-bf16": 0.55, "gemm_efficiency.hopper-fp8": 0.45}


def _write_start(path: Path, parameters: dict[str, float],
                 fixed: dict[str, float] | None = None) -> None:
    """A start file for `moesim calibrate --start`: each value under `parameters` or `fixed`."""
    document = {"parameters": {key: {"value": value} for key, value in parameters.items()}}
    if fixed:
        document["fixed"] = {key: {"value": value} for key, value in fixed.items()}
    path.write_text(yaml.safe_dump(document))


def _synthetic_rows(tmp_path: Path) -> list[dict]:
    """Rows of the fixture's plans whose 'measured' throughput is moesim's own at TRUE."""
    rows = read_measurements(FIXTURE)[:2]
    variants = [dict(rows[0]), dict(rows[0], precision="fp8-cs", name="fp8"),
                dict(rows[1]), dict(rows[1], precision="bf16", name="bf16-tp2")]
    truth = DEFAULT_PARAMS
    for key, value in TRUE.items():
        truth = params_with(truth, key, value)
    return _measured_as_predicted(variants, truth, tmp_path / "synthetic.csv")


def _measured_as_predicted(variants: list[dict], truth, path: Path,
                           factors: tuple[float, ...] = ()) -> list[dict]:
    """`variants` 'measured' at moesim's own tokens/s under `truth` (times `factors`, row by
    row, where given), written to `path` and read back."""
    results = validate_rows(variants, truth)
    for row, result, factor in zip(variants, results, factors or (1.0,) * len(variants)):
        row["measured_tokens_per_s_per_gpu"] = str(factor * result.predicted_tokens_per_s_per_gpu)
        row["measured_tflops_per_gpu"] = ""
    with path.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(variants[0]))
        writer.writeheader()
        writer.writerows(variants)
    return read_measurements(path)


def test_fit_recovers_known_gemm_efficiencies(tmp_path):
    parameters = tuple(FitParameter(key=key, lower=0.2, upper=0.95, meaning="test")
                       for key in TRUE)
    result = fit(_synthetic_rows(tmp_path), parameters, max_evaluations=40)
    for key, value in TRUE.items():
        assert result.values[key] == pytest.approx(value, rel=0.01)
        assert params_value(result.params, key) == pytest.approx(value, rel=0.01)
    assert result.final_rms_log_error < 1e-3 < result.initial_rms_log_error
    assert (result.rows_used, result.rows_failed) == (4, 0)


def _rows_with_an_outlier(tmp_path: Path) -> list[dict]:
    """Three BF16 rows 'measured' at moesim's own throughput with Hopper BF16 GEMMs at 0.55, but
    the third measured 1.5x faster: a row with a mechanism the model lacks."""
    row = read_measurements(FIXTURE)[0]
    variants = [dict(row), dict(row, tp="2", num_gpus="16", name="tp2"),
                dict(row, mbs="2", gbs="128", name="mbs2")]
    truth = params_with(DEFAULT_PARAMS, "gemm_efficiency.hopper-bf16", 0.55)
    return _measured_as_predicted(variants, truth, tmp_path / "outlier.csv", (1, 1, 1.5))


def test_the_soft_l1_loss_keeps_one_outlier_from_pulling_the_fit(tmp_path):
    rows = _rows_with_an_outlier(tmp_path)
    parameter = (FitParameter(key="gemm_efficiency.hopper-bf16", lower=0.2, upper=0.95,
                              meaning="test"),)
    off = {name: abs(math.log(fit(rows, parameter, max_evaluations=20, loss=Loss(name=name))
                              .values["gemm_efficiency.hopper-bf16"] / 0.55))
           for name in ("linear", "soft_l1")}
    assert off["soft_l1"] < off["linear"] / 2


def test_the_soft_l1_loss_is_quadratic_below_its_scale_and_linear_above():
    loss, errors = Loss(scale=0.1), np.array([0.001, 1.0, 2.0])
    costs = loss.costs(errors)
    assert costs[0] == pytest.approx(0.001 ** 2, rel=1e-3)
    assert costs[2] - costs[1] == pytest.approx(2 * 0.1 * 1.0, rel=0.02)
    assert loss.weights(errors)[0] == pytest.approx(1.0, rel=1e-3)
    linear = Loss(name="linear")
    assert linear.objective(errors) == pytest.approx(math.sqrt(np.mean(errors ** 2)))


@pytest.mark.parametrize("scale", ["0", "-0.1", "nan"])
def test_a_bad_loss_scale_gets_one_line_error(tmp_path, one_line_error, scale):
    assert "loss scale" in one_line_error(["calibrate", str(FIXTURE), "-o",
                                           str(tmp_path / "c.yaml"), "--loss-scale", scale])
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize("flag", ["--jobs", "--max-evaluations"])
def test_a_count_below_one_is_named_with_its_value(tmp_path, one_line_error, flag):
    line = one_line_error(["calibrate", str(FIXTURE), "-o", str(tmp_path / "c.yaml"), flag, "0"])
    assert f"{flag}=0: must be >= 1" in line
    assert not (tmp_path / "c.yaml").exists()


def test_an_unknown_loss_is_refused_by_name(tmp_path, capsys):
    from simulator.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["calibrate", str(FIXTURE), "-o", str(tmp_path / "c.yaml"), "--loss", "cauchy"])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--loss" in error and "'cauchy'" in error


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="lower=0.9 must be < upper=0.5"):
        FitParameter(key="host_launch_s", lower=0.9, upper=0.5, meaning="test")


def test_calibrate_command_writes_a_file_that_run_and_validate_load(tmp_path, capsys):
    from simulator.cli import main
    from simulator.calibration import load_calibration

    rows_csv = tmp_path / "rows.csv"
    rows_csv.write_text("\n".join(FIXTURE.read_text().splitlines()[:3]) + "\n")
    out = tmp_path / "calibration.yaml"
    assert main(["calibrate", str(rows_csv), "-o", str(out), "--max-evaluations", "3",
                 "--parameters", "gemm_efficiency.hopper-bf16,gemm_efficiency.hopper-fp8"]) == 0
    text = out.read_text()
    for word in ("command:", "data_sha256:", "rms_log_error:", "meaning:", "bounds:",
                 "name: soft_l1", "objective:"):
        assert word in text
    params = load_calibration(out)
    assert 0.3 <= params_value(params, "gemm_efficiency.hopper-bf16") <= 0.95
    assert main(["validate", str(rows_csv), "--calibration", str(out)]) == 0
    capsys.readouterr()
    assert main(["run", "--gbs", "256", "--calibration", str(out)]) == 0


def test_the_printed_fit_keeps_small_values_significant(tmp_path, capsys):
    from simulator.cli import main

    rows_csv = tmp_path / "rows.csv"
    rows_csv.write_text("\n".join(FIXTURE.read_text().splitlines()[:2]) + "\n")
    assert main(["calibrate", str(rows_csv), "-o", str(tmp_path / "c.yaml"),
                 "--max-evaluations", "1", "--parameters", "host_launch_s"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("host_launch_s"))
    written = yaml.safe_load((tmp_path / "c.yaml").read_text())
    assert float(line.split()[1]) == pytest.approx(
        written["parameters"]["host_launch_s"]["value"], rel=1e-2)


def test_rerun_reproduces_a_fit_from_the_file_it_wrote(tmp_path, capsys):
    from simulator.cli import main

    _synthetic_rows(tmp_path)
    start = tmp_path / "start.yaml"
    _write_start(start, {key: value * 1.1 for key, value in TRUE.items()})
    first, again = tmp_path / "first.yaml", tmp_path / "again.yaml"
    common = [str(tmp_path / "synthetic.csv"), "--max-evaluations", "4"]
    assert main(["calibrate", *common, "-o", str(first), "--start", str(start),
                 "--parameters", ",".join(TRUE), "--loss", "linear"]) == 0
    assert main(["calibrate", *common, "-o", str(again), "--rerun", str(first)]) == 0
    assert "note:" not in capsys.readouterr().err
    documents = [yaml.safe_load(path.read_text()) for path in (first, again)]
    assert [d["loss"] for d in documents] == [{"name": "linear", "scale": 0.1}] * 2
    fitted, rerun = (d["parameters"] for d in documents)
    assert list(rerun) == list(TRUE)
    for key in TRUE:
        assert rerun[key]["start"] == pytest.approx(fitted[key]["start"])
        assert rerun[key]["value"] == pytest.approx(fitted[key]["value"])
    assert main(["calibrate", *common, "-o", str(again), "--rerun", str(first),
                 "--start", str(start)]) == 2
    assert "leave out --start" in capsys.readouterr().err


def test_a_rerun_on_other_data_or_rows_says_so(tmp_path, capsys):
    from simulator.cli import main

    _synthetic_rows(tmp_path)
    first, again = tmp_path / "first.yaml", tmp_path / "again.yaml"
    assert main(["calibrate", str(tmp_path / "synthetic.csv"), "-o", str(first),
                 "--max-evaluations", "1", "--parameters", "gemm_efficiency.hopper-bf16"]) == 0
    changed = tmp_path / "changed.csv"
    changed.write_text((tmp_path / "synthetic.csv").read_text() + "\n")
    capsys.readouterr()
    assert main(["calibrate", str(changed), "-o", str(again), "--max-evaluations", "1",
                 "--rerun", str(first), "--only", "precision=bf16"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "note:" in line]
    assert len(notes) == 2 and "another SHA-256" in notes[0]
    assert "it fitted 4 rows, this fit 2" in notes[1] and "--parameters" in notes[1]


@pytest.mark.parametrize("text, words", [
    ("parameters: 3\n", ["parameters", "mapping"]),
    ("parameters:\n  host_launch_s: {value: fast}\n", ["host_launch_s", "fast"]),
    ("parameters:\n  no_such: {value: 1}\n", ["no_such", "known"]),
    ("parameters:\n  gemm_efficiency.blackwel-fp8: {value: 0.5}\n",
     ["gemm_efficiency.blackwel-fp8", "not a key the cost model reads", "blackwell-ultra"]),
    (": : :\n", ["cannot read"]),
])
def test_bad_calibration_file_gets_one_line_error(tmp_path, one_line_error, text, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    line = one_line_error(["run", "--calibration", str(path)])
    assert all(w in line for w in words)


def test_a_held_out_row_is_left_out_of_the_fit_and_predicted(tmp_path, capsys):
    from simulator.cli import main

    _synthetic_rows(tmp_path)
    out = tmp_path / "calibration.yaml"
    assert main(["calibrate", str(tmp_path / "synthetic.csv"), "-o", str(out),
                 "--max-evaluations", "30", "--parameters", ",".join(TRUE),
                 "--hold-out", "name=bf16-tp2", "--by", "tp"]) == 0
    printed = capsys.readouterr().out
    fitted, held = printed.split("held out (name=bf16-tp2)")
    assert "over 3 rows" in fitted and "bf16-tp2" not in fitted
    assert "tp=1" in fitted and "tp=2" in held  # --by groups both tables
    row = next(line for line in held.splitlines() if line.startswith("bf16-tp2"))
    assert abs(float(row.split()[-1])) < 1.0


def test_only_fits_the_rows_it_names_and_holds_out_among_them(tmp_path, capsys):
    from simulator.cli import main

    _synthetic_rows(tmp_path)
    out = tmp_path / "calibration.yaml"
    assert main(["calibrate", str(tmp_path / "synthetic.csv"), "-o", str(out),
                 "--max-evaluations", "3", "--parameters", "gemm_efficiency.hopper-bf16",
                 "--only", "precision=bf16", "--hold-out", "tp=2"]) == 0
    fitted, held = capsys.readouterr().out.split("held out (tp=2)")
    assert "over 1 row (0 failed)" in fitted and "\nfp8 " not in fitted
    assert [line.split()[0] for line in held.splitlines() if " ok " in line] == ["bf16-tp2"]
    assert yaml.safe_load(out.read_text())["rows_used"] == 1


@pytest.mark.parametrize("selection, words", [
    ("gpu", "COLUMN=VALUE"), ("colour=red", "column of the CSV"),
    ("gpu=h100,x999", "some rows in and some out"), ("gpu=a100", "matches 0 of 3")])
def test_a_bad_hold_out_gets_one_line_error(tmp_path, one_line_error, selection, words):
    assert words in one_line_error(["calibrate", str(FIXTURE), "-o", str(tmp_path / "c.yaml"),
                                    "--hold-out", selection])


def test_calibrate_refuses_an_unknown_by_column_before_fitting(tmp_path, one_line_error):
    out = tmp_path / "c.yaml"
    error = one_line_error(["calibrate", str(FIXTURE), "-o", str(out), "--by", "colour"])
    assert "--by 'colour'" in error
    assert not out.exists()


def test_a_fit_started_from_a_file_records_its_start_and_begins_there(tmp_path, capsys):
    """The start file holds the synthetic rows' truth (TRUE on the shipped values), so the fit's
    first evaluation finds them at their measurements."""
    from simulator.cli import main

    _synthetic_rows(tmp_path)
    start = tmp_path / "start.yaml"
    shipped = calibration_values(SHIPPED_CALIBRATION)
    _write_start(start, TRUE, {key: value for key, value in shipped.items() if key not in TRUE})
    out = tmp_path / "calibration.yaml"
    assert main(["calibrate", str(tmp_path / "synthetic.csv"), "-o", str(out),
                 "--max-evaluations", "3", "--parameters", ",".join(TRUE),
                 "--start", str(start)]) == 0
    capsys.readouterr()
    written = yaml.safe_load(out.read_text())
    assert written["rms_log_error"]["initial"] < 1e-3
    for key, value in TRUE.items():
        assert written["parameters"][key]["start"] == pytest.approx(value)
    assert main(["calibrate", str(tmp_path / "synthetic.csv"), "-o", str(out),
                 "--start", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_a_start_value_out_of_bounds_is_named_and_the_fit_begins_at_the_bound(tmp_path, capsys):
    from simulator.cli import main

    start, out = tmp_path / "start.yaml", tmp_path / "fit.yaml"
    _write_start(start, {"host_launch_s": 5.0})
    assert main(["calibrate", str(FIXTURE), "-o", str(out), "--max-evaluations", "1",
                 "--parameters", "host_launch_s", "--start", str(start)]) == 0
    upper = next(p.upper for p in DEFAULT_FIT if p.key == "host_launch_s")
    assert (f"moesim: note: --start {start}: host_launch_s=5 lies outside its bounds "
            f"{next(p.lower for p in DEFAULT_FIT if p.key == 'host_launch_s'):g} .. {upper:g}; "
            f"the fit starts at {upper:g}") in capsys.readouterr().err
    assert yaml.safe_load(out.read_text())["parameters"]["host_launch_s"]["start"] == upper


def test_a_partial_refit_carries_the_start_files_other_values(tmp_path, capsys):
    from simulator.cli import main

    _synthetic_rows(tmp_path)
    first, *others = TRUE
    start = tmp_path / "start.yaml"
    _write_start(start, TRUE, {"host_launch_s": 2.0e-05})
    out, again = tmp_path / "partial.yaml", tmp_path / "again.yaml"
    common = [str(tmp_path / "synthetic.csv"), "--max-evaluations", "2"]
    assert main(["calibrate", *common, "-o", str(out), "--parameters", first,
                 "--start", str(start)]) == 0
    written = yaml.safe_load(out.read_text())
    assert list(written["parameters"]) == [first]
    held = {key: entry["value"] for key, entry in written["fixed"].items()}
    assert held == {**{key: TRUE[key] for key in others}, "host_launch_s": 2e-5}
    assert "x86 host" in written["fixed"]["host_launch_s"]["meaning"]
    loaded = load_calibration(out)
    for key in others:
        assert params_value(loaded, key) == pytest.approx(TRUE[key])
    assert loaded.host_launch_s == pytest.approx(2e-5)
    assert main(["calibrate", *common, "-o", str(again), "--rerun", str(out)]) == 0
    capsys.readouterr()
    assert yaml.safe_load(again.read_text())["fixed"] == written["fixed"]
    out.write_text("parameters: {}\nfixed: {host_launch_s: {value: fast}}\n")
    with pytest.raises(ValueError, match="'fixed' must be a mapping of key -> {value: number}"):
        load_calibration(out)
    out.write_text("parameters: {host_launch_s: 2.0e-5}\n")
    with pytest.raises(ValueError, match="parameters.host_launch_s=2e-05 must be a mapping with "
                                         "a number under 'value'"):
        load_calibration(out)


def test_first_principles_keys_start_there_and_are_held_there_unless_fitted(tmp_path, capsys):
    """A blind leave-one-out: --first-principles undoes the --start file's values for those
    keys only; the one fitted starts at its first-principles value, the one not fitted is
    held at its first-principles value under `fixed`, and the rest keep the start file's."""
    from simulator.calibration import FIRST_PRINCIPLES
    from simulator.cli import main

    _synthetic_rows(tmp_path)
    first, other = TRUE
    start = tmp_path / "start.yaml"
    _write_start(start, TRUE, {"host_launch_s": 2.0e-05})
    out = tmp_path / "blind.yaml"
    assert main(["calibrate", str(tmp_path / "synthetic.csv"), "-o", str(out),
                 "--max-evaluations", "2", "--parameters", first, "--start", str(start),
                 "--first-principles", f"{first},host_launch_s"]) == 0
    capsys.readouterr()
    written = yaml.safe_load(out.read_text())
    assert written["parameters"][first]["start"] == pytest.approx(
        params_value(FIRST_PRINCIPLES, first))
    assert written["parameters"][first]["start"] != pytest.approx(TRUE[first])
    held = {key: entry["value"] for key, entry in written["fixed"].items()}
    assert held == {other: TRUE[other], "host_launch_s": FIRST_PRINCIPLES.host_launch_s}


@pytest.mark.parametrize("extra, words", [
    (["--first-principles", "speed_of_light"], "--first-principles 'speed_of_light': known"),
    (["--rerun", "x.yaml", "--first-principles", "host_launch_s"], "leave out --start")])
def test_a_bad_first_principles_option_gets_one_line_error(tmp_path, one_line_error, extra,
                                                           words):
    assert words in one_line_error(["calibrate", str(FIXTURE), "-o", str(tmp_path / "c.yaml"),
                                    *extra])


def test_calibrate_reports_every_evaluation_as_it_goes(tmp_path, capsys):
    from simulator.cli import main

    _synthetic_rows(tmp_path)
    assert main(["calibrate", str(tmp_path / "synthetic.csv"), "-o", str(tmp_path / "c.yaml"),
                 "--max-evaluations", "6", "--parameters", ",".join(TRUE)]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines()
             if line.startswith("evaluation ")]
    assert [int(line.split()[1]) for line in lines] == list(range(1, 7))
    elapsed_s = [int(line.split()[2].lstrip("(")) for line in lines]
    assert elapsed_s == sorted(elapsed_s) and all(line.split()[3] == "s):" for line in lines)
    assert lines[0].endswith("(start)") and "Jacobian column 2 of 2" in lines[3]
    assert all(line.endswith(("(step kept)", "(step rejected)")) for line in lines[4:])


def _interrupt_at(marker: str, after: int = 1):
    """A progress callback that raises KeyboardInterrupt at its `after`-th message holding
    `marker` (Ctrl-C, or SIGTERM in the CLI, arriving then)."""
    seen = []

    def progress(evaluation: int, message: str) -> None:
        seen.append(message)
        if sum(marker in m for m in seen) == after:
            raise KeyboardInterrupt
    return progress


def test_an_interrupted_fit_ends_at_the_best_values_so_far(tmp_path):
    rows = _synthetic_rows(tmp_path)
    parameters = tuple(FitParameter(key=key, lower=0.2, upper=0.95, meaning="test")
                       for key in TRUE)
    whole = fit(rows, parameters, max_evaluations=5)
    assert not whole.stopped and whole.final_objective < whole.initial_objective
    first = fit(rows, parameters, max_evaluations=40, progress=_interrupt_at("(step", 2))
    assert first.stopped and first.evaluations == 6
    assert first.values == whole.values and first.final_objective == whole.final_objective
    assert [r.name for r in first.final_rows] == [r["name"] for r in rows]
    with pytest.raises(KeyboardInterrupt):
        fit(rows, parameters, progress=_interrupt_at("Jacobian"))


def test_a_step_re_simulates_only_the_rows_a_fitted_parameter_touches(tmp_path, monkeypatch):
    """Hopper FP8 GEMMs cannot touch the two BF16 rows: the steps run the two FP8 rows."""
    import simulator.fitting as fitting

    rows = _synthetic_rows(tmp_path)
    sizes = []

    def counting(subset, params, jobs=1, client=None):
        sizes.append(len(subset))
        return validate_rows(subset, params, jobs, client=client)
    monkeypatch.setattr(fitting, "validate_rows", counting)
    parameter = (FitParameter(key="gemm_efficiency.hopper-fp8", lower=0.2, upper=0.95,
                              meaning="test"),)
    result = fit(rows, parameter, max_evaluations=5)
    assert sizes[:3] == [4, 4, 2] and set(sizes[3:]) == {2}
    assert result.final_objective < result.initial_objective
    assert [r.name for r in result.final_rows] == [r["name"] for r in rows]


def test_calibrate_stopped_before_its_first_step_writes_nothing(tmp_path, capsys, monkeypatch):
    import simulator.cli as cli

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "fit", stopped)
    _synthetic_rows(tmp_path)
    output = tmp_path / "c.yaml"
    assert cli.main(["calibrate", str(tmp_path / "synthetic.csv"), "-o", str(output)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("moesim: error: calibrate: stopped before its first step")
    assert "\n" not in error and not output.exists()


def test_a_head_dim_key_starts_from_the_value_the_cost_model_falls_back_to():
    table = {"bf16": 0.5, "fp8": 0.45, "blackwell-fp8": 0.4}
    params = replace(DEFAULT_PARAMS, attention_efficiency=table)
    assert params_value(params, "attention_efficiency.blackwell-fp8-d96") == 0.4
    assert params_value(params, "attention_efficiency.hopper-fp8-d96") == 0.45
    assert params_value(params, "attention_efficiency.hopper-bf16") == 0.5


@pytest.mark.parametrize("extra, words", [
    (["--parameters", "host_launch_s,grace_host_slowdown,host_launch_s"],
     "host_launch_s named more than once"),
    (["--parameters", "host_launch_s", "--hold-out", "gpu=h100"],
     "1 row to fit, none ran (first failure: gpu='x999'")])
def test_a_fit_with_nothing_to_fit_gets_one_line_error_and_no_file(
        tmp_path, one_line_error, extra, words):
    """A parameter named twice would give the Jacobian two equal columns; holding out the
    fixture's two runnable rows leaves only its unknown-GPU row, and a file fitted to no row
    would load as if it were a fit."""
    out = tmp_path / "c.yaml"
    assert words in one_line_error(["calibrate", str(FIXTURE), "-o", str(out),
                                    "--max-evaluations", "2", *extra])
    assert not out.exists()


def test_a_fused_mlp_rate_per_architecture_is_fitted_on_request(tmp_path):
    """The fused MLP's rate per architecture is outside the default set (the shipped rows do
    not support a difference); named, it is fitted and written with its meaning."""
    from simulator.cli import main

    rows_csv = tmp_path / "rows.csv"
    rows_csv.write_text("\n".join(FIXTURE.read_text().splitlines()[:2]) + "\n")
    own = "grouped_gemm_efficiency.fused-blackwell-ultra-fp8"
    assert own not in {p.key for p in DEFAULT_FIT}
    assert main(["calibrate", str(rows_csv), "-o", str(tmp_path / "c.yaml"),
                 "--max-evaluations", "1", "--parameters", own]) == 0
    written = yaml.safe_load((tmp_path / "c.yaml").read_text())
    assert written["parameters"][own]["meaning"].endswith("on Blackwell Ultra")


def test_the_roofline_s_overlap_is_fitted_from_within_its_bounds(tmp_path):
    """In the default set; it starts from the roofline (inf) brought inside its bounds, and the
    file written loads with a finite exponent."""
    from simulator.calibration import FIRST_PRINCIPLES, load_calibration
    from simulator.cli import main

    rows_csv = tmp_path / "rows.csv"
    rows_csv.write_text("\n".join(FIXTURE.read_text().splitlines()[:2]) + "\n")
    key = "roofline_overlap_exponent"
    assert key in {p.key for p in DEFAULT_FIT}
    assert FIRST_PRINCIPLES.roofline_overlap_exponent == float("inf")
    out = tmp_path / "c.yaml"
    assert main(["calibrate", str(rows_csv), "-o", str(out), "--max-evaluations", "1",
                 "--parameters", key]) == 0
    loaded = load_calibration(out, FIRST_PRINCIPLES)
    assert 1.0 <= loaded.roofline_overlap_exponent <= 8.0


def test_calibration_file_records_the_hash_of_each_file_its_rows_name(tmp_path, monkeypatch):
    """A row's model, recipe and system files are inputs of the fit as the CSV is: the file
    names each (not the catalog names) with its SHA-256, null for one that cannot be read,
    each as the fit began (a file edited while the fit runs is not the one it fitted)."""
    import simulator.cli
    from simulator.cli import main

    monkeypatch.chdir(tmp_path)
    model, data = tmp_path / "half.yaml", tmp_path / "rows.csv"
    model.write_text("extends: llama3-8b\nname: llama3-8b-half\nnum_layers: 16\n")
    header, row = FIXTURE.read_text().splitlines()[:2]
    data.write_text("\n".join([
        header + ",system", row + ",dgx-h100",
        row.replace("-tokens,llama3-8b,", "-half,half.yaml,", 1) + ",",
        row.replace("-tokens,llama3-8b,", "-gone,gone.yaml,", 1) + ","]) + "\n")
    began = {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in (model, data)}

    def fit_while_edited(*args, **kwargs):
        result = fit(*args, **kwargs)
        for path in (model, data):
            path.write_text(path.read_text() + "\n")
        return result

    monkeypatch.setattr(simulator.cli, "fit", fit_while_edited)
    assert main(["calibrate", "rows.csv", "-o", "fit.yaml", "--max-evaluations", "1",
                 "--parameters", "host_launch_s"]) == 0
    recorded = yaml.safe_load((tmp_path / "fit.yaml").read_text())
    assert recorded["files_sha256"] == {"half.yaml": began[model], "gone.yaml": None}
    assert recorded["data_sha256"] == began[data]
    assert began[data] != hashlib.sha256(data.read_bytes()).hexdigest()


def test_a_fit_on_a_dask_cluster_equals_the_local_fit():
    """`calibrate --scheduler`: the same rows, the same simulations, the same fit."""
    from distributed import LocalCluster

    from simulator.dask_cluster import dask_client

    rows = read_measurements(FIXTURE)[:2]
    parameters = tuple(p for p in DEFAULT_FIT if p.key == "gemm_efficiency.hopper-bf16")
    assert len(parameters) == 1
    local = fit(rows, parameters, max_evaluations=4)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster:
        with dask_client(cluster.scheduler_address) as client:
            on_dask = fit(rows, parameters, max_evaluations=4, client=client)
    assert on_dask.values == local.values and on_dask.evaluations == local.evaluations
    assert on_dask.final_objective == local.final_objective
