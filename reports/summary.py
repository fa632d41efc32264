"""The text summary of one simulated step, from the result document that `--json` prints:
the scenario (and its asymmetric what-ifs, when any is set), throughput, where the step time
goes (the mean over GPUs) and memory per GPU."""

from __future__ import annotations

from typing import Any, Mapping

GIB = 2**30
BREAKDOWN_ORDER = ("compute", "recompute", "moe_overhead", "elementwise", "optimizer", "launch",
                   "exposed_ep", "exposed_tp", "exposed_cp", "exposed_pp", "exposed_dp",
                   "pipeline_bubble", "gpu_variation")
BREAKDOWN_LABELS = {
    "compute": "compute (model GEMMs, attention)", "recompute": "recompute",
    "moe_overhead": "router, permute, unpermute", "optimizer": "optimizer step",
    "elementwise": "norms, quantisation, embedding, loss",
    "launch": "host launch (CPU-bound)", "exposed_ep": "exposed EP all-to-all",
    "exposed_tp": "exposed TP collectives", "exposed_cp": "exposed CP ring exchange",
    "exposed_pp": "exposed PP send/recv",
    "exposed_dp": "exposed DP reduce/gather", "pipeline_bubble": "pipeline bubble",
    "gpu_variation": "waiting for the slowest GPU",
}


def _plan_line(s: Mapping[str, Any]) -> str:
    schedule = s["recipe"]["pipeline_schedule"]
    return (f"TP{s['tp']} PP{s['pp']} VPP{s['vpp']} EP{s['ep']} ETP{s['etp']} CP{s['cp']} "
            f"DP{s['dp']} (expert DP {s['expert_dp']}), MBS {s['mbs']}, GBS {s['gbs']}, "
            f"seq {s['seq_len']}, {s['num_microbatches']} micro batches per DP rank"
            + _runs(s) + ("" if schedule == "1f1b" else f", {schedule} schedule"))


def _runs(s: Mapping[str, Any]) -> str:
    """The pipeline schedules of a step that runs one per local batch (older results: one)."""
    runs = s.get("pipeline_runs", 1)
    return "" if runs == 1 else f" in {runs} pipeline schedules of {s['num_microbatches'] // runs}"


def _schedule_lines(s: Mapping[str, Any]) -> list[str]:
    """A warning when the plan runs the 1F1B all-to-all overlap on a pipeline without virtual
    stages, which Megatron-Core refuses (moesim runs it, each rank's pair waiting on the next
    rank's)."""
    recipe = s["recipe"]
    if not (recipe["a2a_overlap"] and recipe["pipeline_schedule"] == "1f1b"
            and s["pp"] > 1 and s["vpp"] == 1):
        return []
    return ["note: Megatron-Core refuses the all-to-all overlap with pp > 1 and vpp = 1; here "
            "each rank's forward-backward pair waits on the next rank's (set vpp > 1 or "
            "a2a_overlap=false)"]


def _what_if_lines(s: Mapping[str, Any]) -> list[str]:
    """A line naming the what-ifs the scenario sets (failed trays, straggler, degraded link),
    or none."""
    parts = []
    if s.get("failed_trays"):
        parts.append(f"{s['failed_trays']} failed NVLink switch trays in the first domain")
    if s.get("straggler_gpu") is not None:
        parts.append(f"straggler GPU {s['straggler_gpu']} (compute takes "
                     f"{s['straggler_slowdown']:g}x as long)")
    if s.get("degraded_link") is not None:
        parts.append(f"degraded link {s['degraded_link']} (keeps "
                     f"{100 * s['degraded_link_bandwidth_fraction']:g} % of its bandwidth)")
    return [f"what-ifs: {'; '.join(parts)}"] if parts else []


def run_title(result: Mapping[str, Any]) -> str:
    """One line naming the run: model, GPUs, system, recipe."""
    s = result["scenario"]
    return (f"{s['model']} on {s['num_gpus']} x {s['gpu']} ({s['system']}), "
            f"recipe {s['recipe']['name']}")


def _breakdown_lines(breakdown: Mapping[str, float], step_s: float) -> list[str]:
    keys = [k for k in BREAKDOWN_ORDER if k in breakdown] + sorted(
        k for k in breakdown if k not in BREAKDOWN_ORDER)
    return [f"  {BREAKDOWN_LABELS.get(k, k):<40}{breakdown[k]:9.3f} s "
            f"{100 * breakdown[k] / step_s:6.1f} %" for k in keys]


def _measured_row_lines(row: Mapping[str, Any] | None) -> list[str]:
    """The measured row the run started from (`run --row`) and this run's signed error."""
    if row is None:
        return []
    label, name = f"  {'measured':<40}", row["name"]
    if row["measured_tokens_per_s_per_gpu"] is not None:
        return [f"{label}{row['measured_tokens_per_s_per_gpu']:9,.0f}   tokens/s/GPU "
                f"(row {name}; this run {row['error_pct']:+.1f} %)"]
    return [f"{label}{row['measured_tflops_per_gpu']:9,.0f}   TFLOP/s/GPU, {row['flops_formula']} "
            f"(row {name}; this run {row['predicted_tflops_per_gpu']:,.0f}, "
            f"{row['error_pct']:+.1f} %)"]


def format_summary(result: Mapping[str, Any]) -> str:
    """A few aligned lines: scenario (and what-ifs), throughput, breakdown, memory."""
    s = result["scenario"]
    memory = result["memory_bytes_per_gpu"]
    lines = [
        f"moesim: {s['model']} on {s['num_gpus']} x {s['gpu']} ({s['system']}, "
        f"{s['domain_size']} GPUs per NVLink domain), recipe {s['recipe']['name']}",
        f"plan: {_plan_line(s)}",
        *_schedule_lines(s),
        *_what_if_lines(s),
        f"  {'step time':<40}{result['step_time_s']:9.3f} s",
        f"  {'tokens/s/GPU':<40}{result['tokens_per_s_per_gpu']:9,.0f}",
        f"  {'model TFLOP/s/GPU':<40}{result['tflops_per_gpu']:9,.0f}   "
        f"({result['model_flops_per_token'] / 1e9:.1f} GFLOP/token, Megatron counting)",
        f"  {'MFU':<40}{100 * result['mfu']:9.1f} %   of the dense "
        f"{s['recipe']['precision']} peak ({result['peak_tflops_per_gpu']:,.0f} TFLOP/s)",
        *_measured_row_lines(result.get("measured_row")),
        "where the step time goes (mean over GPUs):",
        *_breakdown_lines(result["breakdown_s"], result["step_time_s"]),
        "memory per GPU (most loaded stage): " + ", ".join(
            f"{k} {v / GIB:.1f}" for k, v in memory.items() if k != "total")
        + f" = {memory['total'] / GIB:.1f} GiB of {s['hbm_capacity_gib']:.0f} GiB usable",
    ]
    return "\n".join(lines)
