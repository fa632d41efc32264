"""The text report of `moesim validate`: one line per row, then the error statistics."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from reports.tables import counted, format_table

# The row table's reason column; `_failed_block` prints each failed row's reason whole.
REASON_COLUMN_CHARS = 60


def _row_line(row: Mapping[str, Any]) -> dict[str, Any]:
    on_tokens = row["measured_tokens_per_s_per_gpu"] is not None
    return {"row": row["name"], "status": row["status"],
            "on": "tokens/s" if on_tokens else "TFLOP/s",
            "predicted": (row["predicted_tokens_per_s_per_gpu"] if on_tokens
                          else row["predicted_tflops_per_gpu"]),
            "measured": (row["measured_tokens_per_s_per_gpu"] if on_tokens
                         else row["measured_tflops_per_gpu"]),
            "error %": row["error_pct"], "reason": _shortened(row["reason"])}


def _shortened(reason: str) -> str:
    if len(reason) <= REASON_COLUMN_CHARS:
        return reason
    return reason[:REASON_COLUMN_CHARS - 3] + "..."


def _failed_block(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each failed row with its whole reason, which the row table shortens."""
    failed = [r for r in rows if r["status"] != "ok"]
    return ["failed rows:", *(f"  {r['name']}: {r['reason']}" for r in failed)] if failed else []


def _stat_line(group: str, n: int, stats: Mapping[str, Any]) -> dict[str, Any]:
    return {"group": group, "n": n, "median |err| %": stats["median_abs_error_pct"],
            "mean |err| %": stats["mean_abs_error_pct"],
            "max |err| %": stats["max_abs_error_pct"], "bias %": stats.get("mean_error_pct")}


def _stat_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The overall line, then per GPU and per model (bare values), then per value of each
    `--by` column ("COLUMN=VALUE")."""
    lines = [_stat_line("all", summary["n"] - summary["n_failed"], summary)]
    for key in ("by_gpu", "by_model"):
        lines += [_stat_line(group, stats["n"], stats) for group, stats in summary[key].items()]
    for key in [k for k in summary if k.startswith("by_") and k not in ("by_gpu", "by_model")]:
        column = key.removeprefix("by_")
        lines += [_stat_line(f"{column}={group or '(empty)'}", stats["n"], stats)
                  for group, stats in summary[key].items()]
    return lines


def _ladder_block(name: str, ladder: Mapping[str, Any]) -> list[str]:
    if ladder["status"] != "ok":
        return [f"ladder {name}: {ladder['n']} steps, {ladder['reason']}"]
    head = (f"ladder {name}: {ladder['n']} steps, {ladder['steps_with_measured_sign']} of "
            f"{ladder['steps_judged']} changes with the measured sign; climb "
            f"x{ladder['predicted_climb']:.3f} predicted, x{ladder['measured_climb']:.3f} "
            f"measured ({ladder['climb_error_pct']:+.1f} %)")
    lines = [{"step": f"{s['step']:02d}", "row": s["name"], "measured": s["measured"],
              "predicted": s["predicted"],
              "measured change %": s["measured_change_pct"],
              "predicted change %": s["predicted_change_pct"],
              "sign": "" if s["same_sign"] is None else ("ok" if s["same_sign"] else "WRONG")}
             for s in ladder["steps"]]
    return [head, format_table(lines)]


def _repeats_block(found: Mapping[str, Any]) -> list[str]:
    head = (f"repeats, rows that moesim simulates alike: {counted(found['n_groups'], 'group')} "
            f"of {counted(found['n_rows'], 'row')}, measured {found['median_spread_pct']:.1f} % "
            f"apart at the median and {found['max_spread_pct']:.1f} % at most\n(one prediction "
            f"per group misses one of its rows by at least the floor)")
    lines = [{"rows": ", ".join(g["rows"]), "on": g["on"],
              "spread %": g["spread_pct"], "floor %": g["floor_pct"],
              "error % (moesim)": ("" if g["error_range_pct"] is None else
                                   "{:+.1f} .. {:+.1f}".format(*g["error_range_pct"]))}
             for g in found["groups"]]
    return [head, format_table(lines)]


def _gpu_pairs_block(found: Mapping[str, Any]) -> list[str]:
    head = (f"GPU pairs, one workload measured on two GPUs: {counted(found['n_pairs'], 'pair')}"
            f"; the faster GPU's lead predicted "
            f"within {found['median_abs_error_pct']:.1f} % at the median and "
            f"{found['max_abs_error_pct']:.1f} % at most ({found['mean_error_pct']:+.1f} % on "
            f"average); the measured faster GPU predicted faster in {found['same_faster']} of "
            f"{found['n_pairs']}\n(lead = faster / slower as measured; error < 0: moesim puts "
            f"the two closer than they measured)")
    digest = [{"faster/slower": gpus, "pairs": d["n"], "median error %": d["median_error_pct"],
               "error % range": f"{d['min_error_pct']:+.1f} .. {d['max_error_pct']:+.1f}"}
              for gpus, d in found["by_gpus"].items()]
    lines = [{"faster": p["faster"], "slower": p["slower"], "rows": " / ".join(p["rows"]),
              "on": p["on"], "measured lead": f"x{p['measured_lead']:.3f}",
              "predicted lead": f"x{p['predicted_lead']:.3f}", "error %": p["lead_error_pct"]}
             for p in found["pairs"]]
    return [head, format_table(digest), "", format_table(lines)]


def format_validation(rows: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> str:
    """Every row, the counts and the error statistics; then each optimisation ladder
    (`summary["ladders"]`, simulator.ladders) with its steps and climb, the groups of
    repeated measurements (`summary["repeats"]`, simulator.repeats) and the pairs of rows
    that ran one workload on two GPUs (`summary["gpu_pairs"]`, simulator.gpu_pairs)."""
    blocks = [format_table([_row_line(r) for r in rows]), "",
              f"{counted(summary['n'], 'row')}, {summary['n_failed']} failed",
              *_failed_block(rows), "",
              format_table(_stat_rows(summary))]
    for name, ladder in summary.get("ladders", {}).items():
        blocks += ["", *_ladder_block(name, ladder)]
    if summary.get("repeats", {}).get("n_groups"):
        blocks += ["", *_repeats_block(summary["repeats"])]
    if summary.get("gpu_pairs", {}).get("n_pairs"):
        blocks += ["", *_gpu_pairs_block(summary["gpu_pairs"])]
    return "\n".join(blocks)
