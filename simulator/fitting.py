"""Fitting the global cost parameters to measured runs: bounded robust least squares on log
error.

    minimise  sum_rows rho( log(predicted_row(theta) / measured_row) ),   lower <= theta <= upper

with rho(r) = 2 s^2 (sqrt(1 + (r / s)^2) - 1) (Loss "soft_l1", scale s = 0.1 by default):
r^2 below the scale, growing like |r| above it, so the few rows that carry a mechanism the
model lacks weigh like a median's outliers rather than pulling a parameter that many rows
share; Loss "linear" is plain least squares, rho(r) = r^2. Each parameter has a physical
meaning and bounds (FitParameter); nothing is per model or per row. Rows that cannot run are
left out of the sum and counted.

Every residual is a whole simulation, so the solver spends them carefully: the Jacobian is
estimated once by forward differences on short steps (`short_row`: two micro batches per
stage), each column re-simulating only the rows the parameter can touch (`touches`: an
architecture's efficiency only that architecture's rows, a dispatcher's efficiency only rows
using it, ...), and then kept current by Broyden updates while damped Gauss-Newton steps
(bounded linear least squares, Levenberg-Marquardt damping, each row weighted by the loss at
its current error) walk downhill, each step judged on every row's whole step (re-simulating
only the rows some fitted parameter touches; the others keep their residual). An interrupt
(KeyboardInterrupt) during the steps ends the fit at the best values so far (`stopped`). The
Jacobian at the end, with the rows' errors left, gives each fitted value's standard error and
the pairs that trade against each other (simulator.uncertainty).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from topologies.systems import system_gpu
from workloads.blocks import fuses_grouped_mlp
from workloads.parallelism import ep_group, microbatches_per_run
from workloads.recipes import DISPATCHERS, host_runs_schedule_nodes

from reports.tables import counted
from simulator.calibration import (FIRST_PRINCIPLES, FUSED, NVLINK8, CostParams, comm_key,
                                   efficiency_key, nvlink_fabric, params_value, params_with)
from simulator.costs import peak_key, runs_per_tensor_fp8
from simulator.scenario import Scenario
from simulator.uncertainty import Spread, parameter_spread
from simulator.validation import RowResult, scenario_or_none, validate_rows


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

    def clipped(self, value: float) -> float:
        """`value` moved into the bounds, where a fit starting from it begins."""
        return min(max(value, self.lower), self.upper)


GEMM = "share of the dense {} peak that large {} GEMMs reach on {}"
FUSED_MLP = "share of the dense FP8 peak that TE's fused MXFP8 grouped MLP reaches on {}"
DEFAULT_FIT: tuple[FitParameter, ...] = (
    FitParameter(key="gemm_efficiency.hopper-fp8", lower=0.3, upper=0.95,
                 meaning=GEMM.format("FP8", "FP8", "Hopper")),
    FitParameter(key="gemm_efficiency.hopper-bf16", lower=0.3, upper=0.95,
                 meaning=GEMM.format("BF16", "BF16", "Hopper")),
    FitParameter(key="gemm_efficiency.blackwell-fp8", lower=0.3, upper=0.95,
                 meaning=GEMM.format("FP8", "FP8/MXFP8", "Blackwell")),
    FitParameter(key="gemm_efficiency.blackwell-ultra-fp8", lower=0.3, upper=0.95,
                 meaning=GEMM.format("FP8", "FP8/MXFP8", "Blackwell Ultra")),
    FitParameter(key="gemm_efficiency.blackwell-nvfp4", lower=0.1, upper=0.95,
                 meaning=GEMM.format("NVFP4", "NVFP4", "Blackwell")),
    FitParameter(key="gemm_efficiency.blackwell-ultra-nvfp4", lower=0.1, upper=0.95,
                 meaning=GEMM.format("NVFP4", "NVFP4", "Blackwell Ultra")),
    FitParameter(key="gemm_efficiency.bf16", lower=0.3, upper=0.95,
                 meaning=GEMM.format("BF16", "BF16", "Blackwell")),
    FitParameter(key="gemm_efficiency.blackwell-ultra-bf16", lower=0.3, upper=0.95,
                 meaning=GEMM.format("BF16", "BF16", "Blackwell Ultra")),
    FitParameter(key="grouped_gemm_efficiency.fp8", lower=0.2, upper=0.95,
                 meaning="share of the dense FP8 peak that MoE grouped GEMMs reach"),
    FitParameter(key="grouped_gemm_efficiency.fused-fp8", lower=0.2, upper=0.95,
                 meaning="share of the dense FP8 peak that TE's fused MXFP8 grouped MLP "
                         "reaches (every architecture without a rate of its own)"),
    FitParameter(key="attention_efficiency.bf16", lower=0.2, upper=0.9,
                 meaning="share of the dense BF16 peak that fused attention fwd+bwd reaches"),
    FitParameter(key="host_launch_s", lower=2e-6, upper=60e-6,
                 meaning="CPU seconds to launch one eager kernel from an x86 host "
                         "(framework + driver)"),
    FitParameter(key="schedule_node_host_s", lower=0.0, upper=500e-6,
                 meaning="CPU seconds an x86 host spends per layer phase of a unit run paired "
                         "in Megatron's combined 1F1B (events, stream switch, node autograd)"),
    FitParameter(key="comm_efficiency.hybridep-nvlink", lower=0.2, upper=1.0,
                 meaning="share of NVLink line rate that HybridEP dispatch/combine reach"),
    FitParameter(key="comm_efficiency.deepep-nvlink", lower=0.1, upper=1.0,
                 meaning="share of NVLink line rate that DeepEP dispatch/combine reach"),
    FitParameter(key="comm_efficiency.alltoall-nvlink", lower=0.1, upper=1.0,
                 meaning="share of NVLink line rate that NCCL's EP all-to-all reaches"),
    FitParameter(key="comm_efficiency.deepep-network", lower=0.2, upper=1.0,
                 meaning="share of NIC line rate that DeepEP reaches across nodes"),
    FitParameter(key="comm_efficiency.nccl-network", lower=0.3, upper=1.0,
                 meaning="share of NIC line rate that NCCL collectives reach"),
    FitParameter(key="unbound_host_slowdown", lower=1.0, upper=3.0,
                 meaning="times as long a kernel launch takes without NUMA binding"),
    FitParameter(key="grace_host_slowdown", lower=1.0, upper=4.0,
                 meaning="times as long a kernel launch takes on a Grace host as on x86"),
    FitParameter(key="unfused_permute_slowdown", lower=1.0, upper=10.0,
                 meaning="times as long MoE permute/unpermute take without TE's fused kernel"),
    FitParameter(key="memory_efficiency", lower=0.3, upper=0.95,
                 meaning="share of HBM bandwidth that memory-bound kernels (norms, "
                         "quantisation, activations, permutes, optimizer) reach"),
    FitParameter(key="roofline_overlap_exponent", lower=1.0, upper=8.0,
                 meaning="p of a kernel's time (math^p + memory^p)^(1/p): 1 = math and HBM "
                         "traffic in series, large = the roofline (the longer alone)"),
)

# Parameters `--parameters` can name beyond the default set: the fused grouped MLP's rate per
# GPU architecture (cuDNN's kernels run 1.15x as fast on Blackwell Ultra at the same peak; the
# shipped rows do not support a difference, docs/calibration-history.md), and DeepEP's rate
# inside an 8-GPU baseboard, measured (CostParams.comm_efficiency) and informed by a few rows.
OPTIONAL_FIT: tuple[FitParameter, ...] = (
    FitParameter(key="grouped_gemm_efficiency.fused-blackwell-fp8", lower=0.2, upper=0.95,
                 meaning=FUSED_MLP.format("Blackwell")),
    FitParameter(key="grouped_gemm_efficiency.fused-blackwell-ultra-fp8", lower=0.2, upper=0.95,
                 meaning=FUSED_MLP.format("Blackwell Ultra")),
    FitParameter(key="comm_efficiency.deepep-nvlink8", lower=0.1, upper=1.0,
                 meaning="share of NVLink line rate that DeepEP dispatch/combine reach inside "
                         "an NVLink domain of at most 8 GPUs"),
)


LOSSES = ("soft_l1", "linear")


@dataclass(frozen=True, slots=True, kw_only=True)
class Loss:
    """How the fit weighs a row's log error r: "soft_l1" costs 2 s^2 (sqrt(1 + (r/s)^2) - 1)
    (`scale` s, a log error: quadratic below it, linear above), "linear" costs r^2."""

    name: str = "soft_l1"
    scale: float = 0.1

    def __post_init__(self) -> None:
        if self.name not in LOSSES:
            raise ValueError(f"loss={self.name!r}: must be one of {', '.join(LOSSES)}")
        number = isinstance(self.scale, (int, float)) and not isinstance(self.scale, bool)
        if not (number and math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"loss scale={self.scale!r}: must be a log error > 0")

    def costs(self, errors: np.ndarray) -> np.ndarray:
        """Each row's cost at log error `errors`."""
        if self.name == "linear":
            return errors ** 2
        return 2 * self.scale ** 2 * (np.sqrt(1 + (errors / self.scale) ** 2) - 1)

    def weights(self, errors: np.ndarray) -> np.ndarray:
        """The square root of each row's d cost / d (r^2): the weight of its residual and
        Jacobian row in a Gauss-Newton step (iteratively reweighted least squares)."""
        if self.name == "linear":
            return np.ones_like(errors)
        return (1 + (errors / self.scale) ** 2) ** -0.25

    def objective(self, errors: np.ndarray) -> float:
        """The root of the mean cost: the rms log error for "linear"."""
        return float(np.sqrt(np.mean(self.costs(errors)))) if errors.size else math.nan


@dataclass(frozen=True, slots=True, kw_only=True)
class FitResult:
    params: CostParams
    values: dict[str, float]
    initial_rms_log_error: float
    final_rms_log_error: float
    rows_used: int
    rows_failed: int
    evaluations: int
    loss: Loss = Loss()
    initial_objective: float = math.nan
    final_objective: float = math.nan
    start_values: dict[str, float] = field(default_factory=dict)
    initial_rows: tuple[RowResult, ...] = ()
    final_rows: tuple[RowResult, ...] = ()
    stopped: bool = False
    spread: Spread = Spread()
    rows_touched: dict[str, int] = field(default_factory=dict)


def _with_values(base: CostParams, parameters: tuple[FitParameter, ...],
                 values: np.ndarray) -> CostParams:
    params = base
    for parameter, value in zip(parameters, values):
        params = params_with(params, parameter.key, float(value))
    return params


def touches(key: str, scenario: Scenario, params: CostParams) -> bool:
    """Whether cost parameter `key` can change `scenario`'s step under `params` (used to
    skip rows when differencing; when unsure, True)."""
    name, _, entry = key.partition(".")
    recipe, gpu = scenario.recipe, system_gpu(scenario.system)
    eager = recipe.cuda_graphs != "full"  # a full-iteration graph replays without the host
    if name == "host_launch_s":
        return eager
    if name == "unbound_host_slowdown":
        return eager and not recipe.host_numa_bound
    if name == "grace_host_slowdown":
        return eager and gpu.host_cpu == "grace"
    if name == "te_host_cleanup_speedup":
        return eager and recipe.te_host_cleanup
    if name == "per_tensor_fp8_speedup":
        return runs_per_tensor_fp8(recipe.precision, gpu)
    if name == "schedule_node_host_s":
        return host_runs_schedule_nodes(recipe) and scenario.model.is_moe
    if name == "unfused_permute_slowdown":
        return scenario.model.is_moe and not recipe.permute_fusion
    if name in ("comm_efficiency", "collective_overhead_s"):
        return _touches_comm(name, entry, scenario, params)
    if name in ("gemm_efficiency", "grouped_gemm_efficiency", "attention_efficiency"):
        return _touches_efficiency(name, entry, scenario, params)
    return True


def _touches_comm(name: str, entry: str, scenario: Scenario, params: CostParams) -> bool:
    """`touches` for a collective's efficiency or overhead (`name`) on a fabric, its `entry`
    ALGORITHM-FABRIC."""
    algorithm, _, fabric = entry.partition("-")
    recipe = scenario.recipe
    if (name == "comm_efficiency" and entry == "deepep-nvlink"
            and recipe.deepep_nvlink_efficiency is not None):
        return False
    if fabric == "network" and scenario.plan.num_gpus <= scenario.nvlink_domain_gpus:
        return False  # one NVLink domain holds the whole job: nothing crosses a NIC
    if fabric == "network" and algorithm in DISPATCHERS and not _ep_spans_domains(scenario):
        return False  # every expert-parallel group inside one NVLink domain
    read = nvlink_fabric(scenario.nvlink_domain_gpus)
    if name == "comm_efficiency" and fabric == NVLINK8 and read != NVLINK8:
        return False
    if (name == "comm_efficiency" and fabric == "nvlink" and read == NVLINK8
            and comm_key(params.comm_efficiency, algorithm, NVLINK8) != entry):
        return False
    return algorithm not in DISPATCHERS or (
        scenario.model.is_moe and recipe.dispatcher == algorithm)


def _touches_efficiency(name: str, entry: str, scenario: Scenario, params: CostParams) -> bool:
    """`touches` for a GEMM, grouped GEMM or attention efficiency (`name`), its `entry`
    [ARCHITECTURE-]PRECISION."""
    architecture, _, precision = entry.rpartition("-")
    recipe, gpu = scenario.recipe, system_gpu(scenario.system)
    fused = architecture.partition("-")[0] == FUSED
    if name == "grouped_gemm_efficiency" and not fused and (
            not scenario.model.is_moe or fuses_grouped_mlp(recipe)):
        return False  # no routed experts, or all of them in the fused MLP
    if fused:
        return (name == "grouped_gemm_efficiency" and scenario.model.is_moe
                and fuses_grouped_mlp(recipe)
                and entry == efficiency_key(params.grouped_gemm_efficiency,
                                            f"{FUSED}-{gpu.architecture}", precision))
    if architecture == "window":
        return name == "attention_efficiency" and scenario.model.sliding_window is not None
    if name == "attention_efficiency":
        return entry == efficiency_key(params.attention_efficiency, gpu.architecture,
                                       "fp8" if recipe.fp8_attention else "bf16",
                                       scenario.model.query_key_head_dim)
    if architecture.startswith("logits-"):
        return architecture.removeprefix("logits-") == gpu.architecture
    if precision != "bf16" and peak_key(recipe.precision) != precision:
        return False
    if architecture:
        return gpu.architecture == architecture
    return f"{gpu.architecture}-{precision}" not in getattr(params, name)


def _ep_spans_domains(scenario: Scenario) -> bool:
    """Whether some expert-parallel group holds GPUs of two NVLink domains."""
    domain = scenario.nvlink_domain_gpus
    return any(len({rank // domain for rank in ep_group(scenario.plan, first)}) > 1
               for first in range(scenario.plan.num_gpus))


def _touched_rows(parameters: tuple[FitParameter, ...], scenarios: list[Scenario | None],
                  params: CostParams) -> list[np.ndarray]:
    return [np.array([i for i, s in enumerate(scenarios)
                      if s is not None and touches(p.key, s, params)], dtype=int)
            for p in parameters]


def short_row(row: dict[str, Any], scenario: Scenario | None) -> dict[str, Any]:
    """The row (whose Scenario is `scenario`, None if it has none) with its global batch cut
    to two micro batches per pipeline stage (whole runs of a schedule run once per local
    batch, Recipe.local_batch_size): a cheap stand-in whose sensitivities to the cost
    parameters approximate the whole step's (the Jacobian only steers the steps; every step
    is judged on whole steps)."""
    if scenario is None:
        return row
    plan = scenario.plan
    per_run = microbatches_per_run(plan, scenario.recipe.local_batch_size)
    microbatches = -(-2 * plan.pp // per_run) * per_run
    if plan.num_microbatches <= microbatches:
        return row
    return {**row, "gbs": str(microbatches * plan.dp * plan.mbs)}


def _errors(results: list[RowResult]) -> np.ndarray:
    return np.array([math.log1p(r.error_pct / 100) if r.status == "ok" and
                     r.error_pct is not None else math.nan for r in results])


@dataclass(slots=True)
class _Evaluations:
    """Simulates rows at trial values of the fitted parameters, counting the evaluations (a
    partial Jacobian column counts as one) and keeping the rows of the latest."""

    base: CostParams
    parameters: tuple[FitParameter, ...]
    jobs: int
    client: Any
    calls: int = 0
    results: list[RowResult] = field(default_factory=list)

    def errors(self, values: np.ndarray, rows: list[dict[str, Any]]) -> np.ndarray:
        """Each row's log error with the fitted parameters at `values` (NaN where it fails)."""
        self.calls += 1
        self.results = validate_rows(rows, _with_values(self.base, self.parameters, values),
                                     self.jobs, client=self.client)
        return _errors(self.results)


@dataclass(frozen=True, slots=True)
class _Box:
    """The fitted parameters' bounds."""

    lower: np.ndarray
    upper: np.ndarray

    @property
    def width(self) -> np.ndarray:
        return self.upper - self.lower


@dataclass(frozen=True, slots=True)
class _Point:
    """Values of the fitted parameters, the fitted rows' residuals there and their results."""

    x: np.ndarray
    residual: np.ndarray
    results: list[RowResult]


def fit(rows: list[dict[str, Any]], parameters: tuple[FitParameter, ...] = DEFAULT_FIT, *,
        base: CostParams = FIRST_PRINCIPLES, jobs: int = 1, max_evaluations: int = 40,
        loss: Loss = Loss(), steps: bool = True,
        progress: Callable[[int, str], None] | None = None, client: Any = None) -> FitResult:
    """Robust least-squares fit of `parameters` (starting from `base`) to the rows'
    measurements, with each fitted value's spread (simulator.uncertainty); with steps=False
    only the Jacobian is measured and the spread is that of the start values. `progress`
    hears (evaluations so far, a one-line account of the latest) after every evaluation.
    The rows run in `jobs` processes, or on a Dask `client`'s cluster (validate_rows)."""
    box = _Box(np.array([p.lower for p in parameters]), np.array([p.upper for p in parameters]))
    x = np.array([p.clipped(params_value(base, p.key)) for p in parameters])
    evaluations = _Evaluations(base, parameters, jobs, client)
    first = evaluations.errors(x, rows)
    initial_results = evaluations.results
    used = [row for row, e in zip(rows, first) if not math.isnan(e)]
    if not used:
        reason = next((r.reason for r in initial_results if r.reason), "no measurement")
        raise ValueError(f"calibrate: {counted(len(rows), 'row')} to fit, none ran (first "
                         f"failure: {reason}); nothing to fit")
    start = _Point(x, first[~np.isnan(first)],
                   [r for r, e in zip(initial_results, first) if not math.isnan(e)])
    tell = progress or (lambda evaluation, message: None)
    tell(evaluations.calls, f"objective {loss.objective(start.residual):.4f}, rms log error "
                            f"{_rms(start.residual):.4f} (start)")
    scenarios = [scenario_or_none(row) for row in used]
    touched = _touched_rows(parameters, scenarios, _with_values(base, parameters, x))
    short = [short_row(row, scenario) for row, scenario in zip(used, scenarios)]
    jacobian, measured = _jacobian(evaluations, x, box, short, touched, max_evaluations, tell)
    best, stopped = start, False
    if steps:
        best, jacobian, stopped = _descend(evaluations, used, start, box, jacobian, touched,
                                           loss, max_evaluations, tell)
    spread = parameter_spread([p.key for p in parameters], jacobian, best.residual,
                              loss.weights(best.residual), best.x, box.lower, box.upper,
                              measured)
    return FitResult(params=_with_values(base, parameters, best.x),
                     values={p.key: float(v) for p, v in zip(parameters, best.x)},
                     initial_rms_log_error=_rms(start.residual),
                     final_rms_log_error=_rms(best.residual),
                     rows_used=len(used), rows_failed=len(rows) - len(used),
                     evaluations=evaluations.calls, loss=loss,
                     initial_objective=loss.objective(start.residual),
                     final_objective=loss.objective(best.residual),
                     start_values={p.key: float(v) for p, v in zip(parameters, x)},
                     initial_rows=tuple(initial_results), final_rows=tuple(best.results),
                     stopped=stopped, spread=spread,
                     rows_touched={p.key: int(indices.size)
                                   for p, indices in zip(parameters, touched)})


def _rms(errors: np.ndarray) -> float:
    return float(np.sqrt(np.mean(errors ** 2))) if errors.size else math.nan


def _jacobian(evaluations: _Evaluations, x: np.ndarray, box: _Box,
              short: list[dict[str, Any]], touched: list[np.ndarray], max_evaluations: int,
              tell: Callable[[int, str], None]) -> tuple[np.ndarray, np.ndarray]:
    """Forward differences on the `short` rows at `x`: a column per fitted parameter, from the
    rows it touches, 5 % of its range up (down where up leaves its bounds). Also which columns
    are measured: a column no row touches is (zero); one that `max_evaluations` leaves out is
    not, and stays zero."""
    parameters = evaluations.parameters
    short_residual = evaluations.errors(x, short)
    tell(evaluations.calls, "short steps for the Jacobian")
    jacobian = np.zeros((len(short), len(parameters)))
    measured = np.array([indices.size == 0 for indices in touched])
    for column, indices in enumerate(touched):
        if indices.size == 0 or evaluations.calls >= max_evaluations:
            continue
        measured[column] = True
        width = box.width[column]
        step = 0.05 * width * (1 if x[column] + 0.05 * width <= box.upper[column] else -1)
        probe = x.copy()
        probe[column] += step
        moved = evaluations.errors(probe, [short[i] for i in indices])
        jacobian[indices, column] = (moved - short_residual[indices]) / step
        tell(evaluations.calls, f"Jacobian column {column + 1} of {len(parameters)}, "
                                f"{parameters[column].key} ({counted(indices.size, 'row')})")
    return jacobian, measured


def _descend(evaluations: _Evaluations, rows: list[dict[str, Any]], start: _Point, box: _Box,
             jacobian: np.ndarray, touched: list[np.ndarray], loss: Loss, max_evaluations: int,
             tell: Callable[[int, str], None]) -> tuple[_Point, np.ndarray, bool]:
    """Damped Gauss-Newton steps from `start` down the rows' loss, each judged on the rows'
    whole steps, the Jacobian kept current by Broyden updates, until `max_evaluations`, a
    negligible step or gain, or an interrupt (KeyboardInterrupt). Returns the best point, the
    Jacobian and whether it was interrupted."""
    # Rows no fitted parameter touches keep their residual: each step re-simulates the rest.
    moving = np.unique(np.concatenate([np.arange(0), *touched])).astype(int)
    best, damping = start, 1e-3
    try:
        while evaluations.calls < max_evaluations and best.residual.size:
            weights = loss.weights(best.residual)
            step = _damped_step(jacobian * weights[:, None], best.residual * weights, best.x,
                                box, damping)
            if np.all(np.abs(step) < 1e-6 * box.width):
                break
            trial = best.residual.copy()
            trial[moving] = evaluations.errors(best.x + step, [rows[i] for i in moving])
            if np.isnan(trial).any():
                values = {p.key: float(v)
                          for p, v in zip(evaluations.parameters, best.x + step)}
                raise ValueError(f"calibrate: a row that ran at the start failed at trial "
                                 f"values {values}")
            jacobian = jacobian + (np.outer(trial - best.residual - jacobian @ step, step)
                                   / (step @ step))
            improvement = loss.objective(best.residual) - loss.objective(trial)
            tell(evaluations.calls, f"objective {loss.objective(trial):.4f}, rms log error "
                                    f"{_rms(trial):.4f} "
                                    f"(step {'kept' if improvement > 0 else 'rejected'})")
            if improvement <= 0:
                damping *= 4
                continue
            results = list(best.results)
            for i, result in zip(moving, evaluations.results):
                results[i] = result
            best, damping = _Point(best.x + step, trial, results), damping / 3
            if improvement < 1e-5:
                break
    except KeyboardInterrupt:
        return best, jacobian, True
    return best, jacobian, False


def _damped_step(jacobian: np.ndarray, residual: np.ndarray, x: np.ndarray, box: _Box,
                 damping: float) -> np.ndarray:
    """The bounded Levenberg-Marquardt step: min |J d + r|^2 + damping |d / width|^2 * |J|^2
    with lower <= x + d <= upper (scaled by each parameter's range)."""
    from scipy.optimize import lsq_linear  # half a second to import: only a fit's steps

    scaled = jacobian * box.width
    scale = max(float(np.linalg.norm(scaled)), 1e-12)
    matrix = np.vstack([scaled, math.sqrt(damping) * scale * np.eye(len(x))])
    target = np.concatenate([-residual, np.zeros(len(x))])
    solution = lsq_linear(matrix, target, bounds=((box.lower - x) / box.width,
                                                  (box.upper - x) / box.width))
    return np.asarray(solution.x) * box.width


def provenance(data: str | Path, command: str, files: tuple[str, ...] = ()) -> dict[str, Any]:
    """Where a fit comes from, as its calibration file records it: the command, the data and its
    SHA-256, and that of each model, recipe or system file its rows name (`files`; null where it
    cannot be read). Taken as the fit begins, from the files it reads then: a fit runs for an
    hour, and a file edited meanwhile is not the one it fitted."""
    return {"command": command, "data": Path(data).name, "data_sha256": _sha256(str(data)),
            **({"files_sha256": {name: _sha256(name) for name in files}} if files else {})}


def calibration_document(result: FitResult, parameters: tuple[FitParameter, ...],
                         origin: Mapping[str, Any],
                         fixed: Mapping[str, float] | None = None) -> dict[str, Any]:
    """What the calibration file records: where the fit came from (`origin`, its
    `provenance`), the fit, and the values (`fixed`) that a partial refit held where its start
    file had them."""
    meanings = {p.key: p.meaning for p in (*DEFAULT_FIT, *OPTIONAL_FIT)}
    fixed_part = {"fixed": {key: {"value": value, "meaning": meanings.get(key, "")}
                            for key, value in fixed.items()}} if fixed else {}
    return {
        **origin,
        "rows_used": result.rows_used, "rows_failed": result.rows_failed,
        "evaluations": result.evaluations,
        **({"stopped": "interrupted; the best values so far"} if result.stopped else {}),
        "loss": {"name": result.loss.name, "scale": result.loss.scale},
        "objective": {"initial": result.initial_objective, "final": result.final_objective},
        "rms_log_error": {"initial": result.initial_rms_log_error,
                          "final": result.final_rms_log_error},
        "parameters": {p.key: {"value": result.values[p.key],
                               "start": result.start_values[p.key],
                               "bounds": [p.lower, p.upper], "meaning": p.meaning,
                               **_spread_entry(result.spread, p.key),
                               **({"rows": result.rows_touched[p.key]}
                                  if p.key in result.rows_touched else {})}
                       for p in parameters},
        **({"correlated": [{"parameters": [a, b], "correlation": rho}
                           for a, b, rho in result.spread.correlations]}
           if result.spread.correlations else {}),
        **fixed_part,
    }


def outside_bounds(parameters: tuple[FitParameter, ...],
                   values: Mapping[str, float]) -> list[str]:
    """A line for each of `parameters` whose value in `values` lies outside its bounds, where
    the fit starts instead (the nearer bound)."""
    return [f"{p.key}={values[p.key]:g} lies outside its bounds {p.lower:g} .. {p.upper:g}; "
            f"the fit starts at {p.clipped(values[p.key]):g}"
            for p in parameters if p.key in values and p.clipped(values[p.key]) != values[p.key]]


def rerun_differences(document: Mapping[str, Any], origin: Mapping[str, Any],
                      rows: int) -> list[str]:
    """Where a fit of `rows` rows from `origin` (its `provenance`) differs from the fit that
    wrote `document` in what a rerun must share with it to reproduce it: the data's hash and the
    number of rows fitted."""
    differences = []
    if document.get("data_sha256") not in (None, origin["data_sha256"]):
        differences.append(f"its data ({document.get('data')}) had another SHA-256")
    used, failed = document.get("rows_used"), document.get("rows_failed", 0)
    if isinstance(used, int) and isinstance(failed, int) and used + failed != rows:
        differences.append(f"it fitted {counted(used + failed, 'row')}, this fit {rows} (its "
                           f"command: {document.get('command')})")
    return differences


def _sha256(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _spread_entry(spread: Spread, key: str) -> dict[str, Any]:
    """A parameter's standard error for the file, or why it has none."""
    if key in spread.undetermined:
        return {"std_error": None, "no_std_error": spread.undetermined[key]}
    return {"std_error": spread.std_errors[key]} if key in spread.std_errors else {}
