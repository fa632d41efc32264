"""Compute time of one task on one GPU: a roofline plus the launch gaps around its kernels.

    t = combine(flops / (peak[precision] * eff[class, precision]),
                hbm_bytes / (hbm_bandwidth * eff_memory))
        + exponentials / exp_rate
        + streaming_hbm_bytes / (hbm_bandwidth * eff_memory) + kernels * gap

(`streaming_hbm_bytes`: the task's memory-bound kernels that run in series with its GEMMs;
`exponentials`: fused attention's softmax, which waits on the GPU's special-function units
between its two matmuls, so that small heads and a slow SFU leave the tensor cores idle).

combine(a, b) = (a^p + b^p)^(1/p), p = CostParams.roofline_overlap_exponent: the roofline's
max(a, b) at p = inf, with its corner rounded at a finite p (a kernel whose two times are close
reaches neither roof).

`gap` is the GPU idle between dependent kernels (smaller inside a CUDA graph or with
programmatic dependent launch). The CPU time to
launch eager kernels is not here: the engine replays it on a host lane per GPU, so that it is
hidden when the CPU runs ahead and exposed after a host synchronisation.
"""

from __future__ import annotations

import math

from topologies.hardware import GPUSpec
from workloads.graph import KernelClass, Work

from simulator.calibration import FUSED, CostParams, efficiency_key

PEAK_KEY = {"bf16": "bf16", "fp8-cs": "fp8", "fp8-blockwise": "fp8", "mxfp8": "fp8",
            "nvfp4": "nvfp4", "fp8": "fp8"}


def peak_key(precision: str) -> str:
    """The tensor-core peak that a training precision runs at."""
    if precision not in PEAK_KEY:
        raise ValueError(f"precision={precision!r}: known are {', '.join(sorted(PEAK_KEY))}")
    return PEAK_KEY[precision]


def _efficiency(work: Work, gpu: GPUSpec, params: CostParams) -> float:
    """The efficiency of the work's kernel class on `gpu` (see `efficiency_key`); the output
    layer's own "logits-<architecture>-<precision>" where there is one, else a GEMM's."""
    table = {KernelClass.GEMM: params.gemm_efficiency,
             KernelClass.LOGITS: params.gemm_efficiency,
             KernelClass.GROUPED_GEMM: params.grouped_gemm_efficiency,
             KernelClass.FUSED_GROUPED_MLP: params.grouped_gemm_efficiency,
             KernelClass.ATTENTION: params.attention_efficiency,
             KernelClass.WINDOW_ATTENTION: params.attention_efficiency}.get(work.kernel_class)
    if table is None:
        return 1.0
    precision = peak_key(work.precision)
    if work.kernel_class == KernelClass.LOGITS:
        logits_key = f"logits-{gpu.architecture}-{precision}"
        if logits_key in table:
            return table[logits_key]
    return table[efficiency_key(table, _key_prefix(work.kernel_class, gpu), precision,
                                work.head_dim)]


def _key_prefix(kernel_class: KernelClass, gpu: GPUSpec) -> str:
    """Efficiencies are keyed by GPU architecture; the fused grouped MLP's by "fused-" and
    the architecture, sliding-window attention's by kind alone."""
    if kernel_class == KernelClass.FUSED_GROUPED_MLP:
        return f"{FUSED}-{gpu.architecture}"
    if kernel_class == KernelClass.WINDOW_ATTENTION:
        return "window"
    return gpu.architecture


def runs_per_tensor_fp8(precision: str, gpu: GPUSpec) -> bool:
    """Whether a recipe's FP8 GEMMs run per-tensor-scaled on a GPU whose FP8 rates are its
    block-scaled (MXFP8) kernels' (see CostParams.per_tensor_fp8_speedup)."""
    return precision == "fp8-cs" and gpu.block_scaled


def _speedup(work: Work, gpu: GPUSpec, params: CostParams) -> float:
    if (work.kernel_class in (KernelClass.GEMM, KernelClass.GROUPED_GEMM)
            and runs_per_tensor_fp8(work.precision, gpu)):
        return params.per_tensor_fp8_speedup
    return 1.0


def compute_time_s(work: Work, gpu: GPUSpec, params: CostParams) -> float:
    """Seconds the GPU is busy with `work` at full SM availability."""
    math_s = 0.0
    if work.flops > 0:
        math_s = work.flops / (gpu.peak(peak_key(work.precision)) * _efficiency(work, gpu, params)
                               * _speedup(work, gpu, params))
    bandwidth = gpu.hbm_bandwidth_bytes_per_s * params.memory_efficiency
    memory_s = work.hbm_bytes / bandwidth
    if work.kernel_class == KernelClass.UNFUSED_PERMUTE:
        memory_s *= params.unfused_permute_slowdown
    gap_s = params.graphed_kernel_gap_s if work.graphed or work.pdl else params.kernel_gap_s
    return (combine(math_s, memory_s, params.roofline_overlap_exponent)
            + work.exponentials / gpu.exp_per_s
            + work.streaming_hbm_bytes / bandwidth + work.kernels * gap_s)


def combine(math_s: float, memory_s: float, exponent: float) -> float:
    """A kernel's time from its math time and its memory time: their `exponent`-norm, the
    longer of the two at exponent inf (the roofline), their sum at 1."""
    longer, shorter = max(math_s, memory_s), min(math_s, memory_s)
    if math.isinf(exponent) or shorter == 0:
        return longer
    return longer * (1 + (shorter / longer) ** exponent) ** (1 / exponent)


def host_issue_s(kernels: int, graphed: bool, params: CostParams) -> float:
    """CPU seconds to launch a task's kernels; a captured graph replays without the host."""
    return 0.0 if graphed else kernels * params.host_launch_s
