"""GPU pairs in `moesim validate`: one workload measured on two GPUs, the faster GPU's lead
measured and predicted, and the error of the predicted lead."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from reports.validation_table import format_validation
from simulator.cli import main
from simulator.gpu_pairs import gpu_pairs
from simulator.validation import RowResult

FIXTURE = Path(__file__).parent / "data" / "validate_three.csv"


def _row(name: str, gpu: str, **changes: str) -> dict[str, str]:
    base = next(csv.DictReader(io.StringIO(FIXTURE.read_text())))
    return {**base, "name": name, "gpu": gpu, **changes}


def _result(row: dict[str, str], predicted: float, status: str = "ok") -> RowResult:
    """`predicted` on the metric the row measured (tokens/s, else TFLOP/s)."""
    tokens = float(row["measured_tokens_per_s_per_gpu"] or 0) or None
    tflops = float(row["measured_tflops_per_gpu"] or 0) or None
    return RowResult(name=row["name"], gpu=row["gpu"], model=row["model"], status=status,
                     reason="" if status == "ok" else "boom",
                     predicted_tokens_per_s_per_gpu=predicted if tokens else None,
                     predicted_tflops_per_gpu=None if tokens else predicted,
                     measured_tokens_per_s_per_gpu=tokens, measured_tflops_per_gpu=tflops,
                     error_pct=0.0)


def test_the_faster_gpus_lead_is_measured_and_predicted():
    rows = [_row("mb2606-a-gb200", "gb200", measured_tokens_per_s_per_gpu="1000"),
            _row("mb2606-a-gb300", "gb300", measured_tokens_per_s_per_gpu="1150")]
    found = gpu_pairs(rows, [_result(rows[0], 1000.0), _result(rows[1], 1050.0)])
    assert found["n_pairs"] == 1 and found["same_faster"] == 1
    pair = found["pairs"][0]
    assert (pair["faster"], pair["slower"]) == ("gb300", "gb200")
    assert pair["rows"] == ["mb2606-a-gb300", "mb2606-a-gb200"] and pair["on"] == "tokens/s"
    assert pair["measured_lead"] == pytest.approx(1.15)
    assert pair["predicted_lead"] == pytest.approx(1.05)
    assert pair["lead_error_pct"] == pytest.approx(100 * (1.05 / 1.15 - 1))
    assert found["median_abs_error_pct"] == pytest.approx(abs(pair["lead_error_pct"]))
    assert found["by_gpus"]["gb300/gb200"]["n"] == 1


def test_a_predicted_lead_for_the_other_gpu_is_counted():
    rows = [_row("mb2606-a-b300", "b300", measured_tokens_per_s_per_gpu="1000"),
            _row("mb2606-a-gb200", "gb200", measured_tokens_per_s_per_gpu="1100")]
    found = gpu_pairs(rows, [_result(rows[0], 1000.0), _result(rows[1], 950.0)])
    pair = found["pairs"][0]
    assert pair["faster"] == "gb200" and pair["predicted_lead"] == pytest.approx(0.95)
    assert found["same_faster"] == 0


def test_only_one_workload_on_two_gpus_makes_a_pair():
    """Another source or container, model, precision, GPU count or sequence length, the same
    GPU, a failed row or a row on another metric: no pair."""
    rows = [_row("mb2606-a-gb200", "gb200", measured_tokens_per_s_per_gpu="1000"),
            _row("mb2608-a-gb300", "gb300", measured_tokens_per_s_per_gpu="1100"),
            _row("mb2606-b-gb300", "gb300", model="llama3-70b",
                 measured_tokens_per_s_per_gpu="1100"),
            _row("mb2606-c-gb300", "gb300", precision="fp8-cs",
                 measured_tokens_per_s_per_gpu="1100"),
            _row("mb2606-d-gb300", "gb300", num_gpus="16", measured_tokens_per_s_per_gpu="1100"),
            _row("mb2606-e-gb300", "gb300", seq_len="8192", measured_tokens_per_s_per_gpu="1100"),
            _row("mb2606-f-gb200", "gb200", measured_tokens_per_s_per_gpu="1100"),
            _row("mb2606-g-gb300", "gb300", measured_tokens_per_s_per_gpu="",
                 measured_tflops_per_gpu="300")]
    results = [_result(r, 1000.0) for r in rows]
    failed = _row("mb2606-h-b200", "b200", measured_tokens_per_s_per_gpu="900")
    found = gpu_pairs(rows + [failed], results + [_result(failed, 900.0, status="failed")])
    assert found == {"n_pairs": 0, "median_abs_error_pct": None, "mean_abs_error_pct": None,
                     "max_abs_error_pct": None, "mean_error_pct": None, "same_faster": 0,
                     "by_gpus": {}, "pairs": []}
    summary = {"n": 9, "n_failed": 1, "median_abs_error_pct": 0.0, "mean_abs_error_pct": 0.0,
               "max_abs_error_pct": 0.0, "by_gpu": {}, "by_model": {}, "gpu_pairs": found}
    assert "GPU pairs" not in format_validation([], summary)


def test_rows_measured_in_tflops_pair_only_on_one_formula():
    rows = [_row("mb2606-a-gb200", "gb200", measured_tokens_per_s_per_gpu="",
                 measured_tflops_per_gpu="1000"),
            _row("mb2606-a-gb300", "gb300", measured_tokens_per_s_per_gpu="",
                 measured_tflops_per_gpu="1200"),
            _row("mb2606-a-b200", "b200", measured_tokens_per_s_per_gpu="",
                 measured_tflops_per_gpu="800", flops_formula="6nd")]
    found = gpu_pairs(rows, [_result(rows[0], 1000.0), _result(rows[1], 1100.0),
                             _result(rows[2], 800.0)])
    assert found["n_pairs"] == 1
    assert found["pairs"][0]["on"] == "TFLOP/s (megatron-causal)"
    assert found["pairs"][0]["lead_error_pct"] == pytest.approx(100 * (1.1 / 1.2 - 1))


def test_pairs_are_summarised_per_pair_of_gpus():
    rows = [_row(f"mb2606-{model}-{gpu}", gpu, model=model,
                 measured_tokens_per_s_per_gpu=measured)
            for model, gpu, measured in (("llama3-8b", "gb200", "1000"),
                                         ("llama3-8b", "gb300", "1200"),
                                         ("llama3-70b", "gb200", "100"),
                                         ("llama3-70b", "gb300", "110"))]
    predicted = {"llama3-8b-gb200": 1000.0, "llama3-8b-gb300": 1260.0,
                 "llama3-70b-gb200": 100.0, "llama3-70b-gb300": 104.5}
    found = gpu_pairs(rows, [_result(r, predicted[r["name"].removeprefix("mb2606-")])
                             for r in rows])
    digest = found["by_gpus"]["gb300/gb200"]
    assert digest["n"] == 2
    assert digest["min_error_pct"] == pytest.approx(-5.0)
    assert digest["max_error_pct"] == pytest.approx(5.0)
    assert digest["median_error_pct"] == pytest.approx(0.0, abs=1e-9)
    assert found["max_abs_error_pct"] == pytest.approx(5.0)
    assert [p["lead_error_pct"] for p in found["pairs"]] == pytest.approx([-5.0, 5.0])


def test_validate_reports_gpu_pairs(tmp_path, capsys):
    rows = [_row("fixture-llama8b-h100-8", "h100", measured_tokens_per_s_per_gpu="10000"),
            _row("fixture-llama8b-h200-8", "h200", measured_tokens_per_s_per_gpu="12000")]
    path = tmp_path / "pairs.csv"
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert main(["validate", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    found = document["summary"]["gpu_pairs"]
    assert found["n_pairs"] == 1
    pair = found["pairs"][0]
    assert (pair["faster"], pair["slower"]) == ("h200", "h100")
    assert pair["measured_lead"] == pytest.approx(1.2)
    predicted = {r["gpu"]: r["predicted_tokens_per_s_per_gpu"] for r in document["rows"]}
    assert pair["predicted_lead"] == pytest.approx(predicted["h200"] / predicted["h100"])
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "GPU pairs, one workload measured on two GPUs: 1 pair;" in out
    assert "fixture-llama8b-h200-8 / fixture-llama8b-h100-8" in out
    assert f"{pair['lead_error_pct']:+.1f} .. {pair['lead_error_pct']:+.1f}" in out


def test_the_figure_draws_the_pairs_beside_the_rows():
    """One point per pair on the second panel, the faster row named where the lead is
    missed by more than 10 %; without pairs, one panel."""
    from dataclasses import asdict

    from reports.validation_plot import validation_figure
    rows = [_row("mb2606-a-gb200", "gb200", measured_tokens_per_s_per_gpu="1000"),
            _row("mb2606-a-gb300", "gb300", measured_tokens_per_s_per_gpu="1150"),
            _row("mb2608-b-gb200", "gb200", measured_tokens_per_s_per_gpu="1000"),
            _row("mb2608-b-gb300", "gb300", measured_tokens_per_s_per_gpu="1500")]
    results = [_result(rows[0], 1000.0), _result(rows[1], 1100.0),
               _result(rows[2], 1000.0), _result(rows[3], 1200.0)]
    pairs = gpu_pairs(rows, results)["pairs"]
    records = [asdict(r) for r in results]
    figure = validation_figure(records, "fixture", pairs)
    assert len(figure.axes) == 2
    drawn = figure.axes[1]
    assert sum(len(c.get_offsets()) for c in drawn.collections
               if hasattr(c, "get_offsets")) >= len(pairs) == 2
    assert [text.get_text() for text in drawn.texts] == ["mb2608-b-gb300"]
    assert len(validation_figure(records, "fixture").axes) == 1
