"""The result document of one run: the stable keys that `moesim run --json` prints.

Keys: step_time_s, tokens_per_s_per_gpu, tflops_per_gpu, mfu, model_flops_per_token,
breakdown_s (seconds per category, adding up to the step time), memory_bytes_per_gpu
(weights, gradients, optimizer, activations, buffers, reserve, total), peak_tflops_per_gpu,
and scenario (system, gpu, model, num_gpus, domain_size, the plan's degrees and batch, the
layout, every recipe field, failed_trays and the asymmetric what-ifs: straggler_gpu,
straggler_slowdown, degraded_link, degraded_link_bandwidth_fraction).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from topologies.systems import system_gpu
from workloads.parallelism import pipeline_runs, stage_of

from simulator.costs import peak_key
from simulator.scenario import WHAT_IF_FIELDS, Result, Scenario


def scenario_document(scenario: Scenario) -> dict[str, Any]:
    plan, gpu = scenario.plan, system_gpu(scenario.system)
    document: dict[str, Any] = {
        "system": scenario.system.name, "gpu": gpu.name, "model": scenario.model.name,
        "num_gpus": plan.num_gpus,
        "domain_size": scenario.nvlink_domain_gpus,
        "hbm_capacity_gib": gpu.hbm_capacity_bytes / 2**30,
        "mtp_layers": scenario.model.mtp_layers,
    }
    for key in ("tp", "pp", "vpp", "ep", "etp", "cp", "dp", "expert_dp", "mbs", "gbs", "seq_len",
                "num_microbatches", "dp_sharding", "layout"):
        document[key] = getattr(plan, key)
    document["pipeline_runs"] = pipeline_runs(plan, scenario.recipe.local_batch_size)
    recipe = asdict(scenario.recipe)
    recipe["recompute_modules"] = list(recipe["recompute_modules"])
    document["recipe"] = recipe
    document["failed_trays"] = scenario.failed_trays
    for key in WHAT_IF_FIELDS:
        document[key] = getattr(scenario, key)
    return document


def result_document(result: Result) -> dict[str, Any]:
    metrics = result.metrics
    gpu = system_gpu(result.scenario.system)
    return {
        "step_time_s": metrics.step_time_s,
        "tokens_per_s_per_gpu": metrics.tokens_per_s_per_gpu,
        "tflops_per_gpu": metrics.tflops_per_gpu,
        "mfu": metrics.mfu,
        "model_flops_per_token": result.model_flops_per_token,
        "peak_tflops_per_gpu": gpu.peak(peak_key(result.scenario.recipe.precision)) / 1e12,
        "breakdown_s": dict(metrics.breakdown_s),
        "memory_bytes_per_gpu": result.memory.as_dict(),
        "scenario": scenario_document(result.scenario),
    }


def trace_rows(result: Result) -> list[dict[str, Any]]:
    """The trace records as plain dicts, for reports.chrome_trace."""
    return [asdict(record) for record in result.trace.records]


def pipeline_rows(result: Result) -> list[dict[str, Any]]:
    """The trace records of the simulated ranks of one pipeline (the first simulated rank's),
    each with its pipeline `stage`, for reports.gantt."""
    plan = result.scenario.plan
    position = min(result.trace.simulated_ranks) % plan.ranks_per_stage
    return [{**asdict(record), "stage": stage_of(plan, record.rank)}
            for record in result.trace.records
            if record.rank % plan.ranks_per_stage == position]
