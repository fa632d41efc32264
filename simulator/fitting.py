"""Fitting the global cost parameters to measured runs: bounded least squares on log error.

    minimise  sum_rows ( log(predicted_row(theta) / measured_row) )^2,   lower <= theta <= upper

Each parameter has a physical meaning and bounds (FitParameter); nothing is per model or per
row. Rows that cannot run are left out of the sum and counted. The Jacobian is estimated by
finite differences, so one evaluation re-simulates every row (use `jobs` to parallelise).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from scipy.optimize import least_squares

from simulator.calibration import DEFAULT_PARAMS, CostParams, params_value, params_with
from simulator.validation import RowResult, validate_rows


@dataclass(frozen=True, slots=True, kw_only=True)
class FitParameter:
    """One fitted parameter: a `params_with` key, its bounds and what it means."""

    key: str
    lower: float
    upper: float
    meaning: str

    def __post_init__(self) -> None:
        if not self.lower < self.upper:
            raise ValueError(f"fit parameter {self.key}: lower={self.lower} must be < "
                             f"upper={self.upper}")


GEMM = "share of the dense {} peak that large {} GEMMs reach on {}"
DEFAULT_FIT: tuple[FitParameter, ...] = (
    FitParameter(key="gemm_efficiency.hopper-fp8", lower=0.3, upper=0.95,
                 meaning=GEMM.format("FP8", "FP8", "Hopper")),
    FitParameter(key="gemm_efficiency.hopper-bf16", lower=0.3, upper=0.95,
                 meaning=GEMM.format("BF16", "BF16", "Hopper")),
    FitParameter(key="gemm_efficiency.blackwell-fp8", lower=0.3, upper=0.95,
                 meaning=GEMM.format("FP8", "FP8/MXFP8", "Blackwell")),
    FitParameter(key="gemm_efficiency.blackwell-ultra-fp8", lower=0.3, upper=0.95,
                 meaning=GEMM.format("FP8", "FP8/MXFP8", "Blackwell Ultra")),
    FitParameter(key="gemm_efficiency.bf16", lower=0.3, upper=0.95,
                 meaning=GEMM.format("BF16", "BF16", "Blackwell and Blackwell Ultra")),
    FitParameter(key="grouped_gemm_efficiency.fp8", lower=0.2, upper=0.95,
                 meaning="share of the dense FP8 peak that MoE grouped GEMMs reach"),
    FitParameter(key="attention_efficiency.bf16", lower=0.2, upper=0.9,
                 meaning="share of the dense BF16 peak that fused attention fwd+bwd reaches"),
    FitParameter(key="host_launch_s", lower=2e-6, upper=60e-6,
                 meaning="CPU seconds to launch one eager kernel (framework + driver)"),
    FitParameter(key="comm_efficiency.hybridep-nvlink", lower=0.2, upper=1.0,
                 meaning="share of NVLink line rate that HybridEP dispatch/combine reach"),
    FitParameter(key="comm_efficiency.deepep-nvlink", lower=0.1, upper=1.0,
                 meaning="share of NVLink line rate that DeepEP dispatch/combine reach"),
    FitParameter(key="comm_efficiency.deepep-network", lower=0.2, upper=1.0,
                 meaning="share of NIC line rate that DeepEP reaches across nodes"),
    FitParameter(key="comm_efficiency.nccl-network", lower=0.3, upper=1.0,
                 meaning="share of NIC line rate that NCCL collectives reach"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FitResult:
    params: CostParams
    values: dict[str, float]
    initial_rms_log_error: float
    final_rms_log_error: float
    rows_used: int
    rows_failed: int
    evaluations: int


def log_errors(results: list[RowResult]) -> np.ndarray:
    """log(predicted / measured) of every row that ran."""
    return np.array([math.log1p(r.error_pct / 100) for r in results
                     if r.status == "ok" and r.error_pct is not None])


def _with_values(base: CostParams, parameters: tuple[FitParameter, ...],
                 values: np.ndarray) -> CostParams:
    params = base
    for parameter, value in zip(parameters, values):
        params = params_with(params, parameter.key, float(value))
    return params


def fit(rows: list[dict[str, Any]], parameters: tuple[FitParameter, ...] = DEFAULT_FIT, *,
        base: CostParams = DEFAULT_PARAMS, jobs: int = 1, max_evaluations: int = 200,
        progress: Callable[[int, float], None] | None = None) -> FitResult:
    """Least-squares fit of `parameters` (starting from `base`) to the rows' measurements."""
    lower = np.array([p.lower for p in parameters])
    upper = np.array([p.upper for p in parameters])
    start = np.clip([params_value(base, p.key) for p in parameters], lower, upper)
    failed = sum(r.status != "ok" for r in validate_rows(rows, base, jobs))
    calls = [0]

    def residuals(values: np.ndarray) -> np.ndarray:
        errors = log_errors(validate_rows(rows, _with_values(base, parameters, values), jobs))
        calls[0] += 1
        if progress is not None:
            progress(calls[0], float(np.sqrt(np.mean(errors ** 2))))
        return errors

    initial = residuals(start)
    solution = least_squares(residuals, start, bounds=(lower, upper), diff_step=1e-2,
                             x_scale="jac", max_nfev=max_evaluations)
    final = residuals(solution.x)
    return FitResult(params=_with_values(base, parameters, solution.x),
                     values={p.key: float(v) for p, v in zip(parameters, solution.x)},
                     initial_rms_log_error=float(np.sqrt(np.mean(initial ** 2))),
                     final_rms_log_error=float(np.sqrt(np.mean(final ** 2))),
                     rows_used=len(final), rows_failed=failed, evaluations=calls[0])


def calibration_document(result: FitResult, parameters: tuple[FitParameter, ...],
                         data: str | Path, command: str) -> dict[str, Any]:
    """What the calibration file records: the command, the data and its hash, the fit."""
    return {
        "command": command, "data": Path(data).name,
        "data_sha256": hashlib.sha256(Path(data).read_bytes()).hexdigest(),
        "rows_used": result.rows_used, "rows_failed": result.rows_failed,
        "rms_log_error": {"initial": result.initial_rms_log_error,
                          "final": result.final_rms_log_error},
        "parameters": {p.key: {"value": result.values[p.key], "bounds": [p.lower, p.upper],
                               "meaning": p.meaning} for p in parameters},
    }
