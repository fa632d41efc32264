"""A Scenario = system + model + parallel plan + recipe (+ cost parameters); run it end to end.

    run_scenario(scenario) -> Result:  topology, task graph, memory check, replay, metrics

The default scenario is the reference run: DeepSeek-V3 on 256 GB300 NVL72 GPUs with the
Megatron-Bridge 26.06 recipe (MXFP8, TP1 PP2 VPP8 EP32, MBS 1, GBS 4096, seq 4096), 64 GPUs
of each rack in one NVLink domain as NVIDIA's DeepSeek-V3 runs use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topologies.builders import build_topology
from topologies.systems import SystemSpec, load_system, system_gpu
from topologies.topology import Topology
from workloads.flops import model_flops_per_step, model_flops_per_token
from workloads.models import ModelSpec, model_spec
from workloads.parallelism import ParallelPlan, validate_plan
from workloads.recipes import Recipe, recipe
from workloads.step import StepSpec, build_step

from simulator.calibration import DEFAULT_PARAMS, CostParams
from simulator.costs import peak_key
from simulator.engine import Trace, simulate
from simulator.memory import MemoryEstimate, check_fits, peak_memory
from simulator.metrics import StepMetrics, step_metrics


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """Everything one simulated training step depends on."""

    system: SystemSpec
    model: ModelSpec
    plan: ParallelPlan
    recipe: Recipe
    domain_size: int | None = None
    failed_trays: int = 0
    params: CostParams = field(default_factory=lambda: DEFAULT_PARAMS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    scenario: Scenario
    metrics: StepMetrics
    memory: MemoryEstimate
    model_flops_per_token: float
    trace: Trace


DEFAULT_LAYOUT = "Et*4|(t*4|)*14tmL"
# NVIDIA's DeepSeek-V3 recipes put 64 of an NVL72 rack's 72 GPUs in one NVLink domain
# (hardware-and-recipes.md §3, DESIGN.md "Placement"); smaller domains are used whole.
NVL72_RECIPE_DOMAIN = 64


def default_domain_size(system: SystemSpec) -> int:
    """GPUs per NVLink domain that recipes use on `system`."""
    return NVL72_RECIPE_DOMAIN if system.gpus_per_domain == 72 else system.gpus_per_domain


def default_scenario() -> Scenario:
    """DeepSeek-V3, 256 GB300 NVL72 GPUs, Megatron-Bridge 26.06 (hardware-and-recipes.md §3)."""
    plan = ParallelPlan(num_gpus=256, tp=1, pp=2, vpp=8, ep=32, etp=1, cp=1, mbs=1, gbs=4096,
                        seq_len=4096, layout=DEFAULT_LAYOUT)
    return Scenario(system=load_system("gb300-nvl72"), model=model_spec("deepseek-v3"),
                    plan=plan, recipe=recipe("mbridge-26.06"), domain_size=NVL72_RECIPE_DOMAIN)


def scenario_topology(scenario: Scenario) -> Topology:
    return build_topology(scenario.system, scenario.plan.num_gpus,
                          domain_size=scenario.domain_size, failed_trays=scenario.failed_trays)


def run_scenario(scenario: Scenario, *, folded: bool = True) -> Result:
    """Validate, check memory, build, replay and measure one training step."""
    model, plan, recipe_ = scenario.model, scenario.plan, scenario.recipe
    validate_plan(plan, model)
    gpu = system_gpu(scenario.system)
    memory = peak_memory(model, plan, recipe_)
    check_fits(memory, gpu)
    topology = scenario_topology(scenario)
    graph = build_step(StepSpec(model=model, plan=plan, recipe=recipe_), folded=folded)
    trace = simulate(graph, topology, scenario.params, nvls=recipe_.nccl_nvls)
    metrics = step_metrics(
        trace, num_gpus=plan.num_gpus, tokens_per_step=plan.gbs * plan.seq_len,
        model_flops_per_step=model_flops_per_step(model, plan.seq_len, plan.gbs, plan.tp),
        peak_flops_per_s=gpu.peak(peak_key(recipe_.precision)))
    return Result(scenario=scenario, metrics=metrics, memory=memory,
                  model_flops_per_token=model_flops_per_token(model, plan.seq_len, plan.tp),
                  trace=trace)
