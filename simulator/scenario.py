"""A Scenario = system + model + parallel plan + recipe (+ cost parameters, + what-ifs); run it
end to end.

    run_scenario(scenario) -> Result:  topology, task graph, memory check, replay, metrics

The default scenario is the reference run: DeepSeek-V3 on 256 GB300 NVL72 GPUs with the
Megatron-Bridge 26.06 recipe (MXFP8, TP1 PP2 VPP8 EP32, MBS 1, GBS 4096, seq 4096), 64 GPUs
of each rack in one NVLink domain as NVIDIA's DeepSeek-V3 runs use.

Asymmetric what-ifs (failed NVLink trays in one rack, a straggler GPU, a degraded link) make
some GPUs behave unlike the rest of their pipeline stage; the step is then partly unfolded
(workloads.position_classes): those GPUs, and every class of GPUs they make different,
are simulated apart from the folded ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from topologies.builders import build_topology
from topologies.systems import SystemSpec, load_system, system_gpu
from topologies.topology import Topology
from workloads.flops import model_flops_per_step, model_flops_per_token
from workloads.models import ModelSpec, model_spec
from workloads.parallelism import ParallelPlan, microbatches_per_run, validate_plan
from workloads.recipes import BLOCK_SCALED_PRECISIONS, Recipe, recipe
from workloads.schedules import check_schedule
from workloads.step import StepSpec, build_step

from simulator.calibration import DEFAULT_PARAMS, CostParams, host_params
from simulator.collector import sparse_collections
from simulator.costs import peak_key
from simulator.engine import Trace, simulate
from simulator.memory import MemoryEstimate, check_fits, peak_memory
from simulator.metrics import StepMetrics, step_metrics
from simulator.variability import slowest_gpu_slowdown

DEGRADED_TIERS = ("nic", "nvlink")
WHAT_IF_FIELDS = ("straggler_gpu", "straggler_slowdown", "degraded_link",
                  "degraded_link_bandwidth_fraction")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """Everything one simulated training step depends on.

    What-ifs, each off by default: `failed_trays` NVLink switch trays out of service in the
    first NVLink domain only (GPUs 0 .. domain_size-1; the other domains stay healthy);
    `straggler_gpu`, a GPU whose compute takes `straggler_slowdown` (>= 1) times as long;
    `degraded_link`, "nic:G" (GPU G's links to its NIC and the NIC's to its leaf) or
    "nvlink:G" (GPU G's links to its NVLink switch), left with
    `degraded_link_bandwidth_fraction` (in (0, 1]) of its bandwidth in both directions.
    """

    system: SystemSpec
    model: ModelSpec
    plan: ParallelPlan
    recipe: Recipe
    domain_size: int | None = None
    failed_trays: int = 0
    straggler_gpu: int | None = None
    straggler_slowdown: float = 1.0
    degraded_link: str | None = None
    degraded_link_bandwidth_fraction: float = 1.0
    params: CostParams = field(default_factory=lambda: DEFAULT_PARAMS)

    @property
    def nvlink_domain_gpus(self) -> int:
        """GPUs per NVLink domain as built: `domain_size`, else the system's."""
        return self.domain_size or self.system.gpus_per_domain

    def __post_init__(self) -> None:
        gpus = self.plan.num_gpus
        if self.straggler_gpu is not None and not (
                _is_int(self.straggler_gpu) and 0 <= self.straggler_gpu < gpus):
            raise ValueError(f"straggler_gpu={self.straggler_gpu!r}: must be a GPU index in "
                             f"[0, {gpus}) or none")
        if not (_is_number(self.straggler_slowdown) and self.straggler_slowdown >= 1):
            raise ValueError(f"straggler_slowdown={self.straggler_slowdown!r}: must be a number "
                             ">= 1 (how many times as long the straggler's compute takes)")
        if self.degraded_link is not None:
            degraded_port(self.degraded_link, gpus)
        fraction = self.degraded_link_bandwidth_fraction
        if not (_is_number(fraction) and 0 < fraction <= 1):
            raise ValueError(f"degraded_link_bandwidth_fraction={fraction!r}: must be a number "
                             "in (0, 1] (the share of its bandwidth the degraded link keeps)")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def degraded_port(text: Any, num_gpus: int) -> tuple[str, int]:
    """(tier, GPU) of a `degraded_link` such as "nic:17"; a one-line error otherwise."""
    tier, _, index = str(text).partition(":")
    if not (isinstance(text, str) and tier in DEGRADED_TIERS and index.isdigit()
            and int(index) < num_gpus):
        raise ValueError(f"degraded_link={text!r}: must be TIER:GPU with TIER one of "
                         f"{', '.join(DEGRADED_TIERS)} and GPU in [0, {num_gpus}), e.g. nic:17")
    return tier, int(index)


def parse_what_if(field_name: str, text: str) -> Any:
    """The value of a what-if field (WHAT_IF_FIELDS) from text; "none" clears a GPU or link."""
    if field_name in ("straggler_gpu", "degraded_link") and text.lower() in ("", "none"):
        return None
    if field_name == "degraded_link":
        return text
    kind = int if field_name == "straggler_gpu" else float
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{field_name}={text!r}: must be "
                         f"{'an integer' if kind is int else 'a number'}") from None


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


def with_model(scenario: Scenario, model: ModelSpec) -> Scenario:
    """`scenario` with another model, on the default pipeline layout; a dense model runs
    without expert parallelism (ep = etp = 1, the only values it allows)."""
    plan = replace(scenario.plan, layout=None)
    if not model.is_moe:
        plan = replace(plan, ep=1, etp=1)
    return replace(scenario, model=model, plan=plan)


def scenario_topology(scenario: Scenario) -> Topology:
    """The scenario's wiring, failed trays and degraded link included."""
    topology = build_topology(scenario.system, scenario.plan.num_gpus,
                              domain_size=scenario.domain_size,
                              failed_trays=scenario.failed_trays)
    fraction = scenario.degraded_link_bandwidth_fraction
    if scenario.degraded_link is None or fraction == 1:
        return topology
    tier, gpu = degraded_port(scenario.degraded_link, scenario.plan.num_gpus)
    try:
        links = topology.port_links(gpu, tier)
    except ValueError as error:
        raise ValueError(f"degraded_link={scenario.degraded_link!r}: {error}") from None
    return topology.with_capacity_scaled(links, fraction)


def compute_slowdown(scenario: Scenario) -> dict[int, float]:
    """How many times as long compute takes, for the GPUs (= ranks) where it is not 1."""
    if scenario.straggler_slowdown != 1 and scenario.straggler_gpu is None:
        raise ValueError(f"straggler_slowdown={scenario.straggler_slowdown}: needs "
                         f"straggler_gpu, a GPU index in [0, {scenario.plan.num_gpus})")
    if scenario.straggler_gpu is None or scenario.straggler_slowdown == 1:
        return {}
    return {scenario.straggler_gpu: scenario.straggler_slowdown}


def asymmetric_ranks(scenario: Scenario) -> tuple[frozenset[int], ...]:
    """The sets of ranks (= GPUs) that the scenario's what-ifs make unlike the rest."""
    if scenario.degraded_link_bandwidth_fraction != 1 and scenario.degraded_link is None:
        raise ValueError(f"degraded_link_bandwidth_fraction="
                         f"{scenario.degraded_link_bandwidth_fraction}: needs degraded_link, "
                         "e.g. nic:17")
    sets = [frozenset({gpu}) for gpu in compute_slowdown(scenario)]
    if scenario.degraded_link is not None and scenario.degraded_link_bandwidth_fraction != 1:
        sets.append(frozenset({degraded_port(scenario.degraded_link,
                                             scenario.plan.num_gpus)[1]}))
    if scenario.failed_trays > 0:
        sets.append(frozenset(range(min(scenario.nvlink_domain_gpus, scenario.plan.num_gpus))))
    return tuple(ranks for ranks in sets if ranks)


def check_scenario(scenario: Scenario) -> MemoryEstimate:
    """The plan's and its schedule's rules and its peak memory per GPU; a one-line error if
    any fails."""
    plan, recipe_ = scenario.plan, scenario.recipe
    validate_plan(plan, scenario.model)
    gpu = system_gpu(scenario.system)
    if recipe_.precision in BLOCK_SCALED_PRECISIONS and not gpu.block_scaled:
        raise ValueError(f"precision={recipe_.precision!r}: gpu '{gpu.name}' (Hopper) has no "
                         f"block-scaled tensor cores; use fp8-cs, fp8-blockwise or bf16")
    check_schedule(recipe_.pipeline_schedule, plan.pp, plan.vpp,
                   microbatches_per_run(plan, recipe_.local_batch_size))
    memory = peak_memory(scenario.model, scenario.plan, scenario.recipe)
    check_fits(memory, gpu)
    return memory


def run_scenario(scenario: Scenario, *, folded: bool = True) -> Result:
    """Validate, check memory, build, replay and measure one training step, with the cyclic
    garbage collector at its sparse pace (simulator.collector)."""
    with sparse_collections():
        return _run_scenario(scenario, folded)


def _run_scenario(scenario: Scenario, folded: bool) -> Result:
    model, plan, recipe_ = scenario.model, scenario.plan, scenario.recipe
    memory = check_scenario(scenario)
    gpu = system_gpu(scenario.system)
    topology = scenario_topology(scenario)
    graph = build_step(StepSpec(model=model, plan=plan, recipe=recipe_), folded=folded,
                       asymmetric=asymmetric_ranks(scenario))
    params = host_params(scenario.params, recipe_.host_numa_bound, gpu.host_cpu,
                         te_host_cleanup=recipe_.te_host_cleanup)
    pace = slowest_gpu_slowdown(plan.num_gpus, params.gpu_speed_cv)
    straggler = compute_slowdown(scenario)
    trace = simulate(graph, topology, params, nvls=recipe_.nccl_nvls,
                     compute_slowdown={rank: max(pace, straggler.get(rank, 1.0))
                                       for rank in graph.simulated_ranks})
    metrics = step_metrics(
        trace, num_gpus=plan.num_gpus, tokens_per_step=plan.gbs * plan.seq_len,
        model_flops_per_step=model_flops_per_step(model, plan.seq_len, plan.gbs, plan.tp),
        peak_flops_per_s=gpu.peak(peak_key(recipe_.precision)),
        gpus_per_rank=graph.gpus_per_rank, variation_slowdown=pace)
    return Result(scenario=scenario, metrics=metrics, memory=memory,
                  model_flops_per_token=model_flops_per_token(model, plan.seq_len, plan.tp),
                  trace=trace)
