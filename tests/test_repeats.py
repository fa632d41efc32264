"""Repeated measurements in `moesim validate`: rows that moesim simulates alike, grouped, with
their measured spread and the floor it sets on any one prediction's error."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from reports.validation_table import format_validation
from simulator.cli import main
from simulator.repeats import repeats
from simulator.validation import RowResult

FIXTURE = Path(__file__).parent / "data" / "validate_three.csv"


def _base_row() -> dict[str, str]:
    return next(csv.DictReader(io.StringIO(FIXTURE.read_text())))


def _row(name: str, **changes: str) -> dict[str, str]:
    return {**_base_row(), "name": name, **changes}


def _result(row: dict[str, str], status: str = "ok") -> RowResult:
    tokens = float(row["measured_tokens_per_s_per_gpu"] or 0) or None
    tflops = float(row["measured_tflops_per_gpu"] or 0) or None
    return RowResult(name=row["name"], gpu=row["gpu"], model=row["model"], status=status,
                     reason="" if status == "ok" else "boom",
                     predicted_tokens_per_s_per_gpu=None, predicted_tflops_per_gpu=None,
                     measured_tokens_per_s_per_gpu=tokens, measured_tflops_per_gpu=tflops,
                     error_pct=0.0 if status == "ok" else None)


def test_rows_alike_under_other_release_names_are_one_group():
    rows = [_row("a", release="mbridge-26.02", measured_tokens_per_s_per_gpu="10000"),
            _row("b", release="mbridge-26.04", measured_tokens_per_s_per_gpu="10500"),
            _row("other-plan", gbs="128", measured_tokens_per_s_per_gpu="9000"),
            _row("on-tflops", measured_tokens_per_s_per_gpu="", measured_tflops_per_gpu="300"),
            _row("failed", measured_tokens_per_s_per_gpu="20000")]
    results = [_result(r) for r in rows[:-1]] + [_result(rows[-1], status="failed")]
    found = repeats(rows, results)
    assert (found["n_groups"], found["n_rows"]) == (1, 2)
    group = found["groups"][0]
    assert group["rows"] == ["a", "b"] and group["on"] == "tokens/s"
    assert group["spread_pct"] == pytest.approx(5.0)
    assert group["floor_pct"] == pytest.approx(100 * 500 / 20500)
    assert found["median_spread_pct"] == found["max_spread_pct"] == pytest.approx(5.0)
    assert group["error_range_pct"] == [0.0, 0.0] and group["predicted"] is None


def test_the_floor_is_the_least_largest_error_of_one_prediction():
    rows = [_row("low", measured_tokens_per_s_per_gpu="100"),
            _row("high", release="mbridge-26.04", measured_tokens_per_s_per_gpu="150")]
    group = repeats(rows, [_result(r) for r in rows])["groups"][0]
    best = 2 * 150 * 100 / 250
    assert max(abs(best / 100 - 1), abs(best / 150 - 1)) == pytest.approx(
        group["floor_pct"] / 100)
    for prediction in (best * 0.99, best * 1.01):
        assert max(abs(prediction / 100 - 1), abs(prediction / 150 - 1)) > (
            group["floor_pct"] / 100)


def test_no_repeats_no_block():
    rows = [_row("a"), _row("b", gbs="128")]
    found = repeats(rows, [_result(r) for r in rows])
    assert found == {"n_groups": 0, "n_rows": 0, "median_spread_pct": None,
                     "max_spread_pct": None, "groups": []}
    summary = {"n": 2, "n_failed": 0, "median_abs_error_pct": 0.0, "mean_abs_error_pct": 0.0,
               "max_abs_error_pct": 0.0, "by_gpu": {}, "by_model": {}, "repeats": found}
    assert "repeats" not in format_validation([], summary)


def test_validate_reports_repeats(tmp_path, capsys):
    text = FIXTURE.read_text().splitlines()
    header, first = text[0], text[1]
    repeat = first.replace("fixture-llama8b-h100-8-tokens", "fixture-again", 1).replace(
        "mbridge-26.02", "mbridge-26.04", 1).replace(",10000,", ",11000,", 1)
    path = tmp_path / "repeats.csv"
    path.write_text("\n".join([header, first, repeat]) + "\n")
    assert main(["validate", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    rows = document["rows"]
    assert rows[0]["predicted_tokens_per_s_per_gpu"] == rows[1]["predicted_tokens_per_s_per_gpu"]
    found = document["summary"]["repeats"]
    assert found["n_groups"] == 1
    assert found["groups"][0]["rows"] == ["fixture-llama8b-h100-8-tokens", "fixture-again"]
    group = found["groups"][0]
    assert group["spread_pct"] == pytest.approx(10.0)
    assert group["predicted"] == rows[0]["predicted_tokens_per_s_per_gpu"]
    assert group["error_range_pct"] == sorted(r["error_pct"] for r in rows)
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "repeats, rows that moesim simulates alike: 1 group of 2 rows" in out
    assert "fixture-llama8b-h100-8-tokens, fixture-again" in out
    low, high = group["error_range_pct"]
    assert f"{low:+.1f} .. {high:+.1f}" in out
