"""Optimisation ladders in `moesim validate`: each step's change against the measured one, its
sign, and the whole climb."""

from __future__ import annotations

import pytest

from reports.validation_table import format_validation
from simulator.ladders import ladders
from simulator.validation import RowResult


def _row(name, measured, predicted, status="ok", tokens=False):
    return RowResult(name=name, gpu="gb200", model="deepseek-v3", status=status,
                     reason="" if status == "ok" else "boom",
                     predicted_tokens_per_s_per_gpu=predicted * 10 if tokens else None,
                     predicted_tflops_per_gpu=predicted,
                     measured_tokens_per_s_per_gpu=measured * 10 if tokens else None,
                     measured_tflops_per_gpu=measured,
                     error_pct=100 * (predicted / measured - 1))


def _summary(rows):
    return {"n": len(rows), "n_failed": sum(r.status != "ok" for r in rows),
            "median_abs_error_pct": 0.0, "mean_abs_error_pct": 0.0, "max_abs_error_pct": 0.0,
            "by_gpu": {}, "by_model": {}, "ladders": ladders(rows)}


def test_steps_changes_signs_and_climb():
    rows = [_row("ladder-x-02-c", 150, 120), _row("ladder-x-00-a", 100, 100),
            _row("ladder-x-01-b", 120, 90), _row("other-row", 1, 1)]
    ladder = ladders(rows)["x"]
    assert [s["step"] for s in ladder["steps"]] == [0, 1, 2]
    first, second, third = ladder["steps"]
    assert first["measured_change_pct"] is None and first["same_sign"] is None
    assert second["measured_change_pct"] == pytest.approx(20.0)
    assert second["predicted_change_pct"] == pytest.approx(-10.0)
    assert second["same_sign"] is False and third["same_sign"] is True
    assert (ladder["steps_with_measured_sign"], ladder["steps_judged"]) == (1, 2)
    assert ladder["measured_climb"] == pytest.approx(1.5)
    assert ladder["predicted_climb"] == pytest.approx(1.2)
    assert ladder["climb_error_pct"] == pytest.approx(-20.0)


def test_no_change_predicted_is_not_the_measured_sign():
    ladder = ladders([_row("ladder-x-00-a", 100, 100), _row("ladder-x-01-b", 101, 100)])["x"]
    assert ladder["steps"][1]["same_sign"] is False


def test_ladders_are_kept_apart_and_a_lone_row_is_no_ladder():
    rows = [_row("ladder-x-00-a", 100, 100), _row("ladder-x-01-b", 110, 105),
            _row("ladder-y-00-a", 10, 10), _row("ladder-y-01-b", 20, 30),
            _row("ladder-z-00-a", 1, 1)]
    found = ladders(rows)
    assert sorted(found) == ["x", "y"]
    assert found["y"]["climb_error_pct"] == pytest.approx(50.0)


def test_a_failed_step_makes_the_ladder_incomplete_and_says_which():
    rows = [_row("ladder-x-00-a", 100, 100), _row("ladder-x-01-b", 110, 105, status="failed")]
    ladder = ladders(rows)["x"]
    assert ladder["status"] == "incomplete" and "ladder-x-01-b" in ladder["reason"]
    assert "ladder x: 2 steps, no comparable value for ladder-x-01-b" in format_validation(
        [], _summary(rows))


def test_tokens_are_compared_when_every_step_measured_them():
    rows = [_row("ladder-x-00-a", 100, 100, tokens=True),
            _row("ladder-x-01-b", 120, 130, tokens=True)]
    assert ladders(rows)["x"]["steps"][1]["measured"] == pytest.approx(1200)


def test_the_report_prints_each_step_and_flags_a_wrong_sign():
    rows = [_row("ladder-x-00-a", 100, 100), _row("ladder-x-01-b", 120, 90)]
    text = format_validation([], _summary(rows))
    assert "ladder x: 2 steps, 0 of 1 changes with the measured sign" in text
    assert "(-25.0 %)" in text and "WRONG" in text


def test_validate_reports_a_ladder_of_measured_rows(tmp_path, capsys):
    import json
    from pathlib import Path

    from simulator.cli import main
    header, first = (Path(__file__).parent / "data" / "validate_three.csv").read_text(
        ).splitlines()[:2]
    name = first.split(",")[0]
    steps = [first.replace(name, "ladder-fix-00-bf16", 1),
             first.replace(name, "ladder-fix-01-fp8", 1).replace(",bf16,", ",fp8-cs,", 1)]
    path = tmp_path / "ladder.csv"
    path.write_text("\n".join([header, *steps]) + "\n")
    assert main(["validate", str(path), "--json"]) == 0
    ladder = json.loads(capsys.readouterr().out)["summary"]["ladders"]["fix"]
    assert ladder["status"] == "ok" and [s["step"] for s in ladder["steps"]] == [0, 1]
    step = ladder["steps"][1]
    assert step["predicted_change_pct"] > 0  # FP8 GEMMs on H100 are faster than BF16
    assert step["same_sign"] == (step["measured_change_pct"] > 0)
