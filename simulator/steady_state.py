"""Steady-state extrapolation in the number of micro batches: a long step from two short ones.

Under (interleaved) 1F1B every micro batch past the warm-up adds the same steady-state period
to the step, so the step time is affine in the micro-batch count m once m is well past the
pipeline's warm-up:

    T(m) = T(m1) + (m - m1) * (T(m2) - T(m1)) / (m2 - m1),   m2 > m1 >= warm-up

and so, nearly, is every part of the breakdown (within ~1 % of the step in tests).
`run_steady_state` simulates m1 = 2 pp and m2 = 3 pp micro batches (multiples of the
pipeline depth, as interleaving requires) and extrapolates to the plan's m; a plan with few
micro batches is simulated whole. DualPipeV's warm-up and cool-down take about 2 pp micro
batches, so at 2 pp it has barely a steady phase (a host-bound test ran 0.3 % short of the
steady period there); its points are 3 pp and 4 pp. Validation and calibration use it: a
128-micro-batch row on PP4 costs as much as a 20-micro-batch one. tests/test_steady_state.py
checks it against whole simulations.
"""

from __future__ import annotations

from dataclasses import replace

from topologies.systems import system_gpu
from workloads.flops import model_flops_per_step

from simulator.costs import peak_key
from simulator.metrics import StepMetrics
from simulator.scenario import Scenario, check_scenario, run_scenario

# Pipeline depths of warm-up before the first sample point (per schedule), and between the
# two points.
WARMUP_DEPTHS = {"1f1b": 2, "dualpipev": 3}
SPAN_DEPTHS = 1


def sample_microbatches(num_microbatches: int, pp: int,
                        schedule: str = "1f1b") -> tuple[int, int] | None:
    """The two micro-batch counts to simulate, or None when the whole step is as cheap."""
    first = WARMUP_DEPTHS[schedule] * pp
    second = first + SPAN_DEPTHS * pp
    return (first, second) if num_microbatches > second else None


def _with_microbatches(scenario: Scenario, num_microbatches: int) -> Scenario:
    plan = scenario.plan
    return replace(scenario, plan=replace(plan, gbs=num_microbatches * plan.dp * plan.mbs))


def _affine(first: float, second: float, span: int, steps: int) -> float:
    return first + (second - first) * steps / span


def run_steady_state(scenario: Scenario) -> StepMetrics:
    """The step metrics of `scenario`, extrapolated from two shorter steps when it is long."""
    plan = scenario.plan
    points = sample_microbatches(plan.num_microbatches, plan.pp,
                                 scenario.recipe.pipeline_schedule)
    if points is None:
        return run_scenario(scenario).metrics
    check_scenario(scenario)
    first, second = (run_scenario(_with_microbatches(scenario, m)).metrics for m in points)
    span, steps = points[1] - points[0], plan.num_microbatches - points[0]
    step_s = _affine(first.step_time_s, second.step_time_s, span, steps)
    keys = sorted(set(first.breakdown_s) | set(second.breakdown_s))
    breakdown = {key: _affine(first.breakdown_s.get(key, 0.0), second.breakdown_s.get(key, 0.0),
                              span, steps) for key in keys}
    flops_per_gpu_s = (model_flops_per_step(scenario.model, plan.seq_len, plan.gbs, plan.tp)
                       / (step_s * plan.num_gpus))
    peak = system_gpu(scenario.system).peak(peak_key(scenario.recipe.precision))
    return StepMetrics(step_time_s=step_s,
                       tokens_per_s_per_gpu=plan.gbs * plan.seq_len / (step_s * plan.num_gpus),
                       tflops_per_gpu=flops_per_gpu_s / 1e12, mfu=flops_per_gpu_s / peak,
                       breakdown_s={k: v for k, v in breakdown.items() if v > 0})
