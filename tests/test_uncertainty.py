"""The fitted values' standard errors and correlations (simulator.uncertainty), on linear
problems whose answer is known and on fits to rows moesim itself generated."""

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.calibration import DEFAULT_PARAMS, params_with
from simulator.fitting import FitParameter, Loss, fit
from simulator.uncertainty import (AT_A_BOUND, CORRELATED, NO_ROW, NOT_IDENTIFIABLE,
                                   NOT_MEASURED, TOO_FEW_ROWS, parameter_spread)
from simulator.validation import read_measurements
from test_fitting import FIXTURE, TRUE, _measured_as_predicted, _write_start

KEYS = ["a", "b", "c"]
LOWER, UPPER = np.zeros(3), np.ones(3)
MIDDLE = np.full(3, 0.5)
MEASURED = np.ones(3, dtype=bool)


def _linear_problem(seed: int = 0, rows: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(rows, 3)), rng.normal(scale=0.05, size=rows)


def test_standard_errors_are_those_of_ordinary_least_squares():
    jacobian, residual = _linear_problem()
    spread = parameter_spread(KEYS, jacobian, residual, np.ones(len(residual)), MIDDLE, LOWER,
                              UPPER, MEASURED)
    variance = residual @ residual / (len(residual) - 3)
    expected = np.sqrt(np.diag(variance * np.linalg.inv(jacobian.T @ jacobian)))
    assert [spread.std_errors[key] for key in KEYS] == pytest.approx(list(expected), rel=1e-9)
    assert spread.undetermined == {} and spread.correlations == ()


def test_row_weights_scale_both_the_scatter_and_the_jacobian():
    jacobian, residual = _linear_problem(1)
    weights = np.linspace(0.5, 1.0, len(residual))
    spread = parameter_spread(KEYS, jacobian, residual, weights, MIDDLE, LOWER, UPPER,
                              MEASURED)
    weighted = jacobian * weights[:, None]
    variance = (residual * weights) @ (residual * weights) / (len(residual) - 3)
    expected = np.sqrt(np.diag(variance * np.linalg.inv(weighted.T @ weighted)))
    assert [spread.std_errors[key] for key in KEYS] == pytest.approx(list(expected), rel=1e-9)


def test_two_parameters_that_move_rows_alike_are_reported_correlated():
    jacobian, residual = _linear_problem(2)
    jacobian[:, 1] = 2 * jacobian[:, 0] + 0.05 * jacobian[:, 1]
    spread = parameter_spread(KEYS, jacobian, residual, np.ones(len(residual)), MIDDLE, LOWER,
                              UPPER, MEASURED)
    assert [(a, b) for a, b, _ in spread.correlations] == [("a", "b")]
    assert spread.correlations[0][2] < -0.9


def test_a_combination_the_rows_cannot_split_has_no_finite_error():
    jacobian, residual = _linear_problem(3)
    jacobian[:, 1] = jacobian[:, 0]
    spread = parameter_spread(KEYS, jacobian, residual, np.ones(len(residual)), MIDDLE, LOWER,
                              UPPER, MEASURED)
    assert spread.std_errors["a"] == spread.std_errors["b"] == math.inf
    assert spread.undetermined == {"a": NOT_IDENTIFIABLE, "b": NOT_IDENTIFIABLE}
    assert math.isfinite(spread.std_errors["c"])


def test_parameters_without_an_error_say_why():
    jacobian, residual = _linear_problem(4)
    jacobian[:, 0] = 0.0
    at_bound = np.array([0.5, 1.0, 0.5])
    spread = parameter_spread(KEYS, jacobian, residual, np.ones(len(residual)), at_bound,
                              LOWER, UPPER, np.array([True, True, False]))
    assert spread.undetermined == {"a": NO_ROW, "b": AT_A_BOUND, "c": NOT_MEASURED}
    assert all(math.isnan(spread.std_errors[key]) for key in KEYS)
    few = parameter_spread(KEYS, *_linear_problem(5, rows=3), np.ones(3), MIDDLE, LOWER, UPPER,
                           MEASURED)
    assert few.undetermined == dict.fromkeys(KEYS, TOO_FEW_ROWS)


def _truth():
    params = DEFAULT_PARAMS
    for key, value in TRUE.items():
        params = params_with(params, key, value)
    return params


def _rows(tmp_path: Path, factors: tuple[float, ...]) -> list[dict]:
    """Six plans 'measured' at moesim's own throughput under TRUE, times `factors`."""
    one, two = read_measurements(FIXTURE)[:2]
    variants = [dict(one), dict(one, precision="fp8-cs", name="fp8"), dict(two),
                dict(two, precision="bf16", name="bf16-tp2"),
                dict(one, mbs="2", gbs="128", name="mbs2"),
                dict(two, mbs="2", gbs="128", name="fp8-mbs2")]
    return _measured_as_predicted(variants, _truth(), tmp_path / "rows.csv", factors)


GEMMS = tuple(FitParameter(key=key, lower=0.2, upper=0.95, meaning="test") for key in TRUE)
NOISE = (1.03, 0.98, 1.0, 0.97, 1.02, 1.01)
BF16 = "gemm_efficiency.hopper-bf16"


def test_a_fit_to_scattered_rows_brackets_the_truth(tmp_path):
    result = fit(_rows(tmp_path, NOISE), GEMMS, max_evaluations=10)
    assert result.final_objective < result.initial_objective / 2
    for key, value in TRUE.items():
        std = result.spread.std_errors[key]
        assert 0 < std < 0.05 * value
        assert abs(result.values[key] - value) < 3 * std


def test_twice_the_scatter_gives_twice_the_standard_error(tmp_path):
    wider = tuple(1 + 2 * (factor - 1) for factor in NOISE)
    spreads = [fit(_rows(tmp_path, factors), GEMMS, base=_truth(), max_evaluations=10,
                   steps=False, loss=Loss(name="linear")).spread for factors in (NOISE, wider)]
    for key in TRUE:
        assert spreads[1].std_errors[key] == pytest.approx(2 * spreads[0].std_errors[key],
                                                           rel=0.05)


def test_attention_and_gemms_on_the_same_rows_trade_against_each_other(tmp_path):
    attention = FitParameter(key="attention_efficiency.bf16", lower=0.2, upper=0.9,
                             meaning="test")
    rows = _rows(tmp_path, NOISE)
    alone = fit(rows, GEMMS, base=_truth(), max_evaluations=10, steps=False).spread
    both = fit(rows, (*GEMMS, attention), base=_truth(), max_evaluations=10,
               steps=False).spread
    assert any("attention_efficiency.bf16" in (a, b) and rho < -CORRELATED
               for a, b, rho in both.correlations)
    assert both.std_errors[BF16] > 3 * alone.std_errors[BF16]


def test_uncertainty_only_measures_the_start_and_moves_nothing(tmp_path, capsys):
    from simulator.cli import main

    _rows(tmp_path, NOISE)
    start = tmp_path / "start.yaml"
    _write_start(start, TRUE)
    out = tmp_path / "spread.yaml"
    assert main(["calibrate", str(tmp_path / "rows.csv"), "-o", str(out), "--start",
                 str(start), "--parameters", ",".join(TRUE), "--uncertainty-only",
                 "--max-evaluations", "10"]) == 0
    printed = capsys.readouterr().out
    written = yaml.safe_load(out.read_text())
    assert written["evaluations"] == 2 + len(TRUE)
    assert {key: written["parameters"][key]["rows"] for key in TRUE} == {
        "gemm_efficiency.hopper-bf16": 6, "gemm_efficiency.hopper-fp8": 3}
    for key, value in TRUE.items():
        entry = written["parameters"][key]
        assert entry["value"] == entry["start"] == pytest.approx(value)
        assert 0 < entry["std_error"] < 0.05 * value
        line = next(line for line in printed.splitlines() if line.startswith(key))
        assert f"{entry['std_error']:.2g} (" in line
    assert "correlated fitted values (|r| >= 0.8): none" in printed
