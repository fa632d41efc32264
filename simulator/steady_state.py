"""Steady-state extrapolation in the number of micro batches: a long step from short ones.

Under (interleaved) 1F1B every micro batch past the warm-up adds the same steady-state period
to the step, so the step time is affine in the micro-batch count m once m is well past the
pipeline's warm-up:

    T(m) = T(m2) + (m - m2) * (T(m3) - T(m2)) / (m3 - m2),   m3 > m2 > m1 >= warm-up

and so, nearly, is every part of the breakdown (within ~1 % of the step in tests).
`run_steady_state` simulates m1 = 2 pp, m2 = 3 pp and m3 = 4 pp micro batches (multiples of the
pipeline depth, as interleaving requires); a schedule run once per local batch, at one, two and
three runs. Where the period from m1 to m2 and the one from m2 to m3 agree (STEADY_TOLERANCE), it
extrapolates from the last two to the plan's m; where they do not, the step has not settled and the
whole step is simulated: DeepSeek-V3 on GB300 at PP2 VPP4 in BF16 (mb2511-dsv3-gb300-256-bf16),
whose pipeline bubble still grows with each micro batch (0.08, 0.10, 0.12 s at 2, 3, 4 pp; 0.46 s at
16 pp), came out 0.9 % short of its whole step when extrapolated from 2 pp and 3 pp. A plan with no
more micro batches than the three samples together is simulated whole too: that costs no more.
DualPipeV's warm-up and cool-down take about 2 pp micro batches, so at 2 pp it has barely a steady
phase (a host-bound test ran 0.3 % short of the steady period there); its points start at 3 pp.
Validation and calibration use it: a 128-micro-batch row on PP4 costs as much as a 36-micro-batch
one. tests/test_steady_state.py checks it against whole simulations.
"""

from __future__ import annotations

from dataclasses import replace

from topologies.systems import system_gpu
from workloads.flops import model_flops_per_step
from workloads.parallelism import microbatches_per_run

from simulator.costs import peak_key
from simulator.metrics import StepMetrics
from simulator.scenario import Scenario, check_scenario, run_scenario

# Pipeline depths of warm-up before the first sample point (per schedule), and between points.
WARMUP_DEPTHS = {"1f1b": 2, "dualpipev": 3}
SPAN_DEPTHS = 1
SAMPLE_POINTS = 3
# The most the period (seconds per micro batch) may change from the first span to the second,
# relative to the second, for the step to count as settled. On the calibration rows' settled
# plans the two agree within 0.05 %; the two that had not settled differ by 0.36 and 1.2 %.
STEADY_TOLERANCE = 1e-3


def sample_microbatches(num_microbatches: int, pp: int, schedule: str = "1f1b",
                        per_run: int | None = None) -> tuple[int, ...] | None:
    """The micro-batch counts to simulate, or None when the whole step is as cheap. A schedule
    run once per local batch of `per_run` micro batches (Recipe.local_batch_size) is sampled
    at one, two and three runs: each run adds the same time, warm-up and drain included."""
    if per_run is None:
        first, span = WARMUP_DEPTHS[schedule] * pp, SPAN_DEPTHS * pp
    else:
        first = span = per_run
    points = tuple(first + k * span for k in range(SAMPLE_POINTS))
    return points if num_microbatches > sum(points) else None


def scenario_samples(scenario: Scenario) -> tuple[int, ...] | None:
    """`sample_microbatches` for the scenario's plan and recipe."""
    plan, recipe = scenario.plan, scenario.recipe
    per_run = microbatches_per_run(plan, recipe.local_batch_size)
    return sample_microbatches(plan.num_microbatches, plan.pp, recipe.pipeline_schedule,
                               per_run if per_run < plan.num_microbatches else None)


def is_settled(points: tuple[int, ...], step_times_s: tuple[float, ...]) -> bool:
    """Whether the step's period is the same over each span between the sampled points."""
    periods = [(later_s - earlier_s) / (m_later - m_earlier)
               for m_earlier, m_later, earlier_s, later_s
               in zip(points, points[1:], step_times_s, step_times_s[1:])]
    return all(abs(period - periods[-1]) <= STEADY_TOLERANCE * periods[-1]
               for period in periods)


def _with_microbatches(scenario: Scenario, num_microbatches: int) -> Scenario:
    plan = scenario.plan
    return replace(scenario, plan=replace(plan, gbs=num_microbatches * plan.dp * plan.mbs))


def _affine(first: float, second: float, span: int, steps: int) -> float:
    return first + (second - first) * steps / span


def run_steady_state(scenario: Scenario) -> StepMetrics:
    """The step metrics of `scenario`, extrapolated from shorter steps when it is long and
    they have settled, else simulated whole."""
    plan = scenario.plan
    points = scenario_samples(scenario)
    if points is None:
        return run_scenario(scenario).metrics
    check_scenario(scenario)
    samples = [run_scenario(_with_microbatches(scenario, m)).metrics for m in points]
    if not is_settled(points, tuple(sample.step_time_s for sample in samples)):
        return run_scenario(scenario).metrics
    first, second = samples[-2:]
    span, steps = points[-1] - points[-2], plan.num_microbatches - points[-2]
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
