"""Shared fixtures: a toy GPU and wiring with round numbers, idealised cost parameters, a small
MoE model and scenario factories on a 16-GPU GB300 NVL72 cluster.

Fixtures that need arguments are factories (a fixture returning a function), so a test states
the numbers its hand computation uses next to the expectation.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any, Callable, Mapping

import networkx as nx
import pytest

from simulator.calibration import CostParams
from simulator.cli import main
from simulator.scenario import Result, Scenario, run_scenario
from topologies.hardware import GPUSpec
from topologies.systems import load_system
from topologies.topology import Topology
from workloads.graph import Collective, KernelClass, Op, Work
from workloads.models import ModelSpec
from workloads.parallelism import ParallelPlan
from workloads.recipes import recipe

# Round numbers so that every hand-computed time is exact in binary floating point.
TOY_PEAK_BF16_FLOPS_PER_S = 1e12
TOY_SM_COUNT = 8
TOY_EXP_PER_S = 2.0**60  # softmax exponentials all but free: attention times stay flops / peak
GBYTE = 1e9


@pytest.fixture
def toy_gpu() -> GPUSpec:
    """1 TFLOP/s BF16, 8 SMs: a task of F FLOPs takes F / 1e12 seconds."""
    return GPUSpec(name="toy", architecture="hopper", sm_count=TOY_SM_COUNT,
                   peak_flops_per_s={"bf16": TOY_PEAK_BF16_FLOPS_PER_S, "fp8": 2e12},
                   exp_per_s=TOY_EXP_PER_S,
                   hbm_capacity_bytes=1e11, hbm_bandwidth_bytes_per_s=1e12,
                   nvlink_generation=5, nvlink_links=1, nvlink_bandwidth_bytes_per_s=GBYTE)


@pytest.fixture
def ideal_params() -> CostParams:
    """No launch cost, no kernel gaps, every efficiency 1, no collective overhead: compute
    takes flops / peak and a flow takes bytes / capacity."""
    defaults = CostParams()

    def ones(mapping: Mapping[str, float]) -> Mapping[str, float]:
        return MappingProxyType({key: 1.0 for key in mapping})

    return replace(defaults, host_launch_s=0.0, kernel_gap_s=0.0, graphed_kernel_gap_s=0.0,
                   memory_efficiency=1.0,
                   gemm_efficiency=ones(defaults.gemm_efficiency),
                   grouped_gemm_efficiency=ones(defaults.grouped_gemm_efficiency),
                   attention_efficiency=ones(defaults.attention_efficiency),
                   comm_efficiency=ones(defaults.comm_efficiency),
                   collective_overhead_s=MappingProxyType(
                       {key: 0.0 for key in defaults.collective_overhead_s}))


@pytest.fixture
def toy_topology(toy_gpu: GPUSpec) -> Callable[..., Topology]:
    """Factory: 4 GPUs in 2 NVLink domains of 2, one NIC per GPU, all NICs on one leaf.

        gpu0, gpu1 <-> nvsw0      gpu2, gpu3 <-> nvsw1      (tier nvlink, `nvlink` B/s)
        gpu{i} <-> nic{i} <-> leaf0                         (tier nic,    `nic` B/s)

    Every link has zero latency unless `latency_s` is given. Same-domain routes:
    gpu -> nvsw -> gpu; cross-domain: gpu -> nic -> leaf0 -> nic -> gpu.
    """
    def build(nvlink: float = GBYTE, nic: float = GBYTE, latency_s: float = 0.0) -> Topology:
        graph = nx.DiGraph()
        for domain in range(2):
            graph.add_node(f"nvsw{domain}", kind="nvswitch", chips=2, trays=1, failed_trays=0,
                           in_switch_reduction=True)
        graph.add_node("leaf0", kind="leaf", rail=0, switches=1)
        for index in range(4):
            gpu, nic_node, hub = f"gpu{index}", f"nic{index}", f"nvsw{index // 2}"
            graph.add_node(gpu, kind="gpu", index=index, domain=index // 2)
            graph.add_node(nic_node, kind="nic", index=index)
            for src, dst, capacity, tier in ((gpu, hub, nvlink, "nvlink"),
                                             (hub, gpu, nvlink, "nvlink"),
                                             (gpu, nic_node, nic, "nic"),
                                             (nic_node, gpu, nic, "nic"),
                                             (nic_node, "leaf0", nic, "nic"),
                                             ("leaf0", nic_node, nic, "nic")):
                graph.add_edge(src, dst, capacity_bytes_per_s=capacity, latency_s=latency_s,
                               tier=tier)
        return Topology(graph, gpu=toy_gpu, domain_size=2)
    return build


@pytest.fixture
def link_index() -> Callable[[Topology, str, str], int]:
    """Index of the link src -> dst (node names) in `topology.links`."""
    def find(topology: Topology, src: str, dst: str) -> int:
        return int(topology.graph.edges[src, dst]["index"])
    return find


@pytest.fixture
def compute() -> Callable[..., Work]:
    """Factory: BF16 GEMM work that runs `seconds` on the toy GPU at full efficiency."""
    def make(seconds: float, *, kernels: int = 1, graphed: bool = False) -> Work:
        return Work(flops=seconds * TOY_PEAK_BF16_FLOPS_PER_S, hbm_bytes=0.0,
                    kernel_class=KernelClass.GEMM, precision="bf16", kernels=kernels,
                    graphed=graphed)
    return make


@pytest.fixture
def send() -> Callable[..., Collective]:
    """Factory: a p2p send of `nbytes` from GPU `src` to GPU `dst`, simulated member `src`."""
    def make(key: str, src: int, dst: int, nbytes: float, *, held_sms: int = 0,
             graphed: bool = False, members: tuple[int, ...] | None = None) -> Collective:
        return Collective(op=Op.SEND_RECV, key=key, bytes_per_rank=nbytes, groups=((src, dst),),
                          members=(src,) if members is None else members, algorithm="p2p",
                          held_sms=held_sms, graphed=graphed)
    return make


# --- scenarios ----------------------------------------------------------------------------

@pytest.fixture(scope="session")
def small_moe() -> ModelSpec:
    """A small MoE: 4 layers (first dense), 8 experts top-2, shared expert, GQA 8 heads."""
    return ModelSpec(name="small-moe", hidden_size=512, num_layers=4, vocab_size=1024,
                     num_attention_heads=8, num_query_groups=8, ffn_hidden_size=1024,
                     num_experts=8, moe_ffn_hidden_size=256, moe_router_topk=2,
                     moe_shared_expert_intermediate_size=256, moe_layer_freq=(0, 1, 1, 1))


@pytest.fixture(scope="session")
def make_scenario(small_moe: ModelSpec) -> Callable[..., Scenario]:
    """Factory: the small MoE on 16 GB300 NVL72 GPUs in NVLink domains of 8 (two domains),
    MBS 1, GBS 32, sequence 256, recipe mbridge-26.06 unless overridden."""
    def make(*, system: Any = None, recipe_: Any = None, domain_size: int = 8,
             **plan: Any) -> Scenario:
        parallel = ParallelPlan(num_gpus=16, mbs=1, gbs=32, seq_len=256, **plan)
        return Scenario(system=system or load_system("gb300-nvl72"), model=small_moe,
                        plan=parallel, recipe=recipe_ or recipe("mbridge-26.06"),
                        domain_size=domain_size)
    return make


@pytest.fixture(scope="session")
def run_small(make_scenario) -> Callable[..., Result]:
    """Factory: `make_scenario(**options)` run with `run_scenario`, memoised for the session
    (the engine is deterministic, so a repeated request returns the same Result)."""
    cache: dict[tuple, Result] = {}

    def run(*, folded: bool = True, **options: Any) -> Result:
        key = (folded, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = run_scenario(make_scenario(**options), folded=folded)
        return cache[key]
    return run


@pytest.fixture
def one_line_error(capsys) -> Callable[[list[str]], str]:
    """Run `moesim ARGV`, which must fail with exit 2, print nothing on stdout and one
    "moesim: error:" line on stderr, no traceback; return that line."""

    def run(argv: list[str]) -> str:
        assert main(argv) == 2
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert captured.out == "" and "Traceback" not in captured.err
        assert len(lines) == 1 and lines[0].startswith("moesim: error:")
        return lines[0]

    return run
