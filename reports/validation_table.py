"""The text report of `moesim validate`: one line per row, then the error statistics."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from reports.tables import format_table


def _row_line(row: Mapping[str, Any]) -> dict[str, Any]:
    on_tokens = row["measured_tokens_per_s_per_gpu"] is not None
    return {"row": row["name"], "status": row["status"],
            "on": "tokens/s" if on_tokens else "TFLOP/s",
            "predicted": (row["predicted_tokens_per_s_per_gpu"] if on_tokens
                          else row["predicted_tflops_per_gpu"]),
            "measured": (row["measured_tokens_per_s_per_gpu"] if on_tokens
                         else row["measured_tflops_per_gpu"]),
            "error %": row["error_pct"], "reason": row["reason"][:80]}


def _stat_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    lines = [{"group": "all", "n": summary["n"] - summary["n_failed"],
              "median |err| %": summary["median_abs_error_pct"],
              "mean |err| %": summary["mean_abs_error_pct"],
              "max |err| %": summary["max_abs_error_pct"]}]
    for key in ("by_gpu", "by_model"):
        for group, stats in summary[key].items():
            lines.append({"group": group, "n": stats["n"],
                          "median |err| %": stats["median_abs_error_pct"],
                          "mean |err| %": stats["mean_abs_error_pct"],
                          "max |err| %": stats["max_abs_error_pct"]})
    return lines


def format_validation(rows: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> str:
    return "\n".join([
        format_table([_row_line(r) for r in rows]), "",
        f"{summary['n']} rows, {summary['n_failed']} failed", "",
        format_table(_stat_rows(summary))])
