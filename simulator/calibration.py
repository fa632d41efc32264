"""The few global parameters of the cost model, each with a physical meaning and a source.

Defaults come from first principles and published micro-benchmarks (never from the measured
training runs that moesim is validated against): GEMM and attention efficiencies are the share
of the dense tensor peak that large kernels reach, communication efficiencies are the share of
line rate that NCCL or an EP dispatcher reaches, launch costs are the CPU and GPU time around
one kernel. `moesim calibrate` refits them and writes the same fields to a file; the fit it
made of ../shared/data/calibration.csv ships as calibration.yaml and is DEFAULT_PARAMS.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import yaml

from topologies.hardware import ARCHITECTURES
from workloads.recipes import DISPATCHERS

# The key prefix of TE's fused grouped MLP in grouped_gemm_efficiency ("fused-<architecture>-
# <precision>", else "fused-<precision>").
FUSED = "fused"
# The fabric of an NVLink domain of at most BASEBOARD_GPUS GPUs in comm_efficiency keys.
NVLINK8 = "nvlink8"
BASEBOARD_GPUS = 8


def nvlink_fabric(domain_gpus: int) -> str:
    """The comm_efficiency fabric NVLink reads in a domain of `domain_gpus` GPUs: "nvlink8" on
    an HGX/DGX baseboard (at most BASEBOARD_GPUS), else "nvlink"."""
    return NVLINK8 if domain_gpus <= BASEBOARD_GPUS else "nvlink"


MAPPING_FIELDS = ("gemm_efficiency", "grouped_gemm_efficiency", "attention_efficiency",
                  "comm_efficiency", "collective_overhead_s")
# The keys the cost model can read in each mapping field (simulator.costs, efficiency_key,
# CostParams.comm and overhead_s); a key outside them would be held and never used.
_ARCHITECTURE = "|".join(ARCHITECTURES)
_PRECISION = "bf16|fp8|nvfp4"
_ALGORITHM = "|".join(("nccl", *DISPATCHERS))
KEY_GRAMMAR = {
    "gemm_efficiency": (rf"(?:(?:logits-)?(?:{_ARCHITECTURE})-)?(?:{_PRECISION})",
                        "[[logits-]ARCHITECTURE-]PRECISION"),
    "grouped_gemm_efficiency": (rf"(?:(?:{_ARCHITECTURE}|{FUSED}(?:-(?:{_ARCHITECTURE}))?)-)?"
                                rf"(?:{_PRECISION})",
                                "[ARCHITECTURE-|fused-[ARCHITECTURE-]]PRECISION"),
    "attention_efficiency": (rf"(?:(?:{_ARCHITECTURE}|window)-)?(?:{_PRECISION})(?:-d\d+)?",
                             "[ARCHITECTURE-|window-]PRECISION[-dHEAD_DIM]"),
    "comm_efficiency": (rf"(?:{_ALGORITHM})-(?:nvlink8|nvlink|network)",
                        "ALGORITHM-(nvlink8|nvlink|network)"),
    "collective_overhead_s": (rf"{_ALGORITHM}|p2p", "ALGORITHM or p2p"),
}


def _frozen(mapping: dict[str, float]) -> Mapping[str, float]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True, kw_only=True)
class CostParams:
    """Global efficiencies and overheads. Efficiencies are fractions of a hardware peak."""

    # Large dense GEMMs: cuBLAS reaches ~700-750 of 989 dense BF16 TFLOP/s on H100
    # (Megatron-LM issue #1276 discussion of 989 dense peak; NVIDIA Transformer Engine
    # benchmarks); FP8/MXFP8 kernels reach a lower share (scaling and quantisation epilogues).
    # "logits-<architecture>-bf16": the output layer's vocabulary projection, a plain cuBLAS
    # BF16 matmul outside Transformer Engine, measured rather than fitted: torch.matmul reaches
    # 0.63 of a B200's dense BF16 peak at 4,096 to 8,192 cubed (pytorch/ao PR 2427; tritonbench
    # PR 1009 has aten matmul at 0.41 at 8,192 cubed, not taken); Blackwell Ultra has the same
    # BF16 tensor cores. Elsewhere it runs at the GPU's BF16 GEMM rate.
    gemm_efficiency: Mapping[str, float] = field(default_factory=lambda: _frozen(
        {"bf16": 0.75, "fp8": 0.70, "nvfp4": 0.60, "logits-blackwell-bf16": 0.63,
         "logits-blackwell-ultra-bf16": 0.63}))
    # Grouped GEMMs of MoE experts: many smaller problems, lower occupancy than one GEMM.
    # MCore's multi-stream cuBLAS MXFP8 grouped GEMM reaches 2,672 TFLOP/s on GB200 at
    # K=7,168, N=2,048 (GB200 guide §1 item 3), 0.53 of the 5,000 dense FP8 peak.
    # "fused-fp8": TE's fused MXFP8 grouped MLP (FC1 + SwiGLU + quantisation, FC2); a fused
    # MXFP8 grouped MLP on one GB200 ran 1.13x as fast as its six GEMMs alone
    # (marin-community/marin issue 7282, cudnn-frontend fused MoE kernels): 0.53 x 1.13.
    # cuDNN's benchmark of the fused kernels themselves (NVIDIA/cudnn-frontend
    # benchmark/cutedsl_fusion_kernels: cudnn-frontend 1.23, MXFP8 operands, 8 experts x 4,096
    # tokens, K = 8,192, N = 4,096, CUDA-graph replay) brackets it: FC1 + SwiGLU (a GEMM
    # 8,192 wide) 1.542 ms on GB200 and 1.323 ms on GB300, FC2's data gradient + dSwiGLU 0.805
    # and 0.718 ms, 0.56 and 0.65 of the 5,000 TFLOP/s dense FP8 peak over the two: the same
    # kernels run 1.15x as fast on Blackwell Ultra at the same peak, so a calibration may give
    # each architecture its own rate, "fused-<architecture>-fp8"; "fused-fp8" serves the others.
    grouped_gemm_efficiency: Mapping[str, float] = field(default_factory=lambda: _frozen(
        {"bf16": 0.65, "fp8": 0.53, "nvfp4": 0.50, "fused-fp8": 0.60}))
    # Fused attention fwd+bwd, its matmuls alone (the softmax's exponentials are timed on the
    # GPU's special-function units, GPUSpec.exp_per_s): FlashAttention-3 reaches ~0.6 of the
    # H100's BF16 peak forward and ~0.45 backward at head dim 128; less the time of one
    # exponential per score each way at 3.9 T/s, the matmuls run at 0.85 and 0.49, 0.56 over
    # forward and backward (backward has 2.5x the FLOPs). Hopper FP8 is taken at 0.9 of the
    # BF16 share (no FP8 backward benchmark at hand).
    # Blackwell FP8: TE runs FP8 attention in MXFP8 under the MXFP8 recipe (MXFP8BlockScaling
    # with fp8_dpa). cuDNN 9.27's DeepSeek-V3 benchmark (head dims 192/128, 128 heads, batch 2,
    # 4,096 causal tokens) takes 0.696 + 2.549 ms fwd + bwd in MXFP8 on GB200 and
    # 0.531 + 2.293 ms on GB300; less one exponential per score each way, its matmuls run at
    # 0.403 and 0.397 of the FP8 peak. Its BF16 runs (1.004 + 3.354 ms and 0.815 + 3.107 ms)
    # give 0.550 and 0.546, which confirms the BF16 share above
    # (NVIDIA/cudnn-frontend benchmark/attention_training/results/dsv3, 2026-09-28).
    # "*-d128": head dim 128 (GQA, 8 query heads per key head, as Llama 3.1 and Qwen3), from
    # the same repository's Llama 3.1 benchmark (64/8 heads, batch 2, 4,096 causal tokens):
    # BF16 0.417 + 1.248 ms fwd + bwd on GB200 and 0.316 + 1.129 on GB300, 0.62 of the BF16
    # peak less the exponentials; MXFP8 0.324 + 1.390 and 0.235 + 1.256 ms, 0.30 of the FP8
    # peak: at this head dim MXFP8 attention is no faster than BF16, its backward slower
    # (results/llama3.1, 2026-09-28).
    # "window-*": sliding-window layers, whole kernels, their exponentials included; cuDNN
    # 9.27's GPT-OSS benchmark (128-token window, head dim 64, 4,096 tokens) reaches 164 TFLOP/s
    # forward and 183 backward in BF16 on GB200, 0.07 of the 2,500 dense BF16 peak; in MXFP8 its
    # forward is no faster (168) and its backward 4.5x slower (41 TFLOP/s), 2.27 ms fwd + bwd
    # against 0.67 in BF16: 0.0105 of the FP8 peak on GB200, 0.0118 on GB300 (2.02 ms), 0.011
    # (same repository, results/gpt_oss, 2026-09-28).
    # "*-fp8-d64": GPT-OSS's full causal layers (head dim 64) in MXFP8. The same benchmark's
    # MXFP8 backward grows with the square of the sequence although the window is fixed (GB200:
    # 0.642, 2.072, 7.368, 27.85, 106.9 ms from 2,048 to 32,768 tokens; BF16 grows linearly,
    # 0.234 ... 3.662): it does the whole causal work, so its 2.072 ms (GB200) and 1.851 ms
    # (GB300) at 4,096 tokens are a full causal layer's backward. Less one exponential per score,
    # with the forward at the head-dim-128 MXFP8 share (no head-dim-64 causal forward measured),
    # the matmuls run at 0.19 of the FP8 peak on both.
    attention_efficiency: Mapping[str, float] = field(default_factory=lambda: _frozen(
        {"bf16": 0.56, "fp8": 0.50, "blackwell-fp8": 0.40, "blackwell-ultra-fp8": 0.40,
         "blackwell-bf16-d128": 0.62, "blackwell-ultra-bf16-d128": 0.62,
         "blackwell-fp8-d128": 0.30, "blackwell-ultra-fp8-d128": 0.30,
         "blackwell-fp8-d64": 0.19, "blackwell-ultra-fp8-d64": 0.19,
         "window-bf16": 0.07, "window-fp8": 0.011}))
    # Share of HBM bandwidth that streaming kernels reach (norms, permutes, optimizer).
    memory_efficiency: float = 0.80
    # How a kernel's math time and its HBM time combine: (math^p + memory^p)^(1/p). p = inf is
    # the roofline (the two overlap fully and the longer alone counts), p = 1 their sum (no
    # overlap, as in the additive model of Treibig and Hager, "Introducing a performance model
    # for bandwidth-limited loop kernels", LNCS 6067, arXiv:0905.0792, where data transfers do
    # not overlap the core's work); in between, a kernel whose two times are close (near the
    # ridge point) reaches neither roof, and one far from the ridge is as the roofline has it.
    # First principles: the roofline; the shipped fit rounds its corner to p = 1.75
    # (docs/calibration-history.md, "The roofline's corner rounded").
    roofline_overlap_exponent: float = math.inf
    # CPU time to launch one eager PyTorch kernel (framework + driver) from an x86 host, seconds.
    host_launch_s: float = 8e-6
    # CPU seconds an x86 host spends per layer phase of a unit that Megatron's combined 1F1B
    # (A2A overlap) runs paired with another: each of its schedule nodes waits on and records
    # a CUDA event, switches stream and, backward, calls autograd on its own outputs
    # (megatron/core/pipeline_parallel/utils.py ScheduleNode, stream_acquire_context). No
    # measurement found: fitted; the start, 3 launches' worth, counts the two event calls and
    # the node call. A full-iteration CUDA graph replays the schedule without the host.
    schedule_node_host_s: float = 24e-6
    # How many times as long the router's permutation and the unpermute take without TE's
    # fused permute kernel ("up to 10x" unit speed-up, TE PR 1927; GB200 guide §2.1.1).
    unfused_permute_slowdown: float = 10.0
    # How many times as long a launch takes when the rank's CPU and memory are not bound to
    # its GPU's NUMA node (remote memory, migrating threads; the GB200 guide §2.4 measured
    # bindpcie as its second-largest single gain). No micro-benchmark found: fitted.
    unbound_host_slowdown: float = 1.3
    # How many times as long a launch takes on a Grace (Arm) host as on an x86 one: PyTorch's
    # Linear forward costs 37.08 us of CPU on GB200 and 13.48 us on an H100 DGX (Xeon 8480C)
    # (TransformerEngine issue #2053, "High CPU overhead on Grace systems"): 2.75x.
    grace_host_slowdown: float = 2.75
    # How many times as fast TE's host code runs after a clean-up of its per-call checks,
    # PyTorch API calls and CUDA calls (GB200 guide §2.4, its ladder's second "CPU-side
    # optimization" step). The guide gives no per-call figure; TE PR 1191, a clean-up of the
    # same kind (memoised process-group properties, no custom __setattr__, fewer tensor
    # attribute reads), took a TE Linear forward's CPU time from 140 to 115 us: 1.22x.
    te_host_cleanup_speedup: float = 140 / 115
    # How many times as fast a per-tensor-scaled FP8 GEMM (fp8-cs: current or delayed scaling)
    # runs as the block-scaled MXFP8 GEMM of the same shape on a GPU with block-scaled tensor
    # cores (Blackwell), whose FP8 efficiencies the MXFP8 rows set. Transformer Engine's GEMM
    # profiling guide (docs/examples/gemm_profiling/gemm_profiling.rst, B300, a Llama-like
    # layer of hidden 4,096, FFN 16,384, 15,872 tokens, inputs quantised before the timed
    # loop): fprop + dgrad + wgrad 6.812 ms per layer with FP8 current scaling against 7.161 ms
    # in MXFP8, 1.05x. Hopper has only per-tensor FP8, which its own rates describe.
    per_tensor_fp8_speedup: float = 7.161 / 6.812
    # Coefficient of variation of a GPU's persistent compute speed among identical GPUs:
    # Sinha et al. (SC22, arXiv 2208.11035) measured an 8 % average spread between the GPUs of
    # one cluster (outliers up to 1.5x slower: a straggler what-if); read as a +-3 sigma
    # range, cv = 8 % / 6. A step runs at its slowest GPU's pace (simulator.variability).
    gpu_speed_cv: float = 0.013
    # GPU idle between dependent kernels launched eagerly vs from a CUDA graph, seconds.
    kernel_gap_s: float = 2e-6
    graphed_kernel_gap_s: float = 0.5e-6
    # Share of line rate reached, by "<algorithm>-<fabric>" (fabric: nvlink or network).
    # nccl-nvlink: H100 ring busBW ~370 of 450 GB/s (nccl-tests #212); nccl-network: IB ring
    # busBW ~45 of 50 GB/s per 400G NIC at small scale (nccl #1221, #1801);
    # hybridep-nvlink: 539-642 of 900 GB/s at EP32 on GB200 (DeepEP hybrid-ep README);
    # deepep-nvlink: ~400 dispatch / ~190 combine of 900 at EP32 (Megatron GB200 guide §2.2.1,
    # the port before NVIDIA tuned it, a lower bound for the tuned kernels; the guide's ladder
    # runs it as measured, Recipe.deepep_nvlink_efficiency, until its step 06);
    # alltoall-nvlink: NCCL all-to-all at EP32 was no faster than that DeepEP (the guide, same
    # section: switching to DeepEP brought "no communication benefits"), so ~0.3;
    # *-network EP kernels: 43-58 of 50 GB/s on CX-7 (DeepEP docs/legacy.md).
    # "<algorithm>-nvlink8": inside an NVLink domain of at most 8 GPUs (an HGX/DGX baseboard),
    # where DeepEP runs its own intranode kernels (NUM_MAX_NVL_PEERS = 8) rather than the
    # rack-scale port the GB200 guide measured; without an entry, "<algorithm>-nvlink".
    # deepep-nvlink8, measured, not fitted: 8 H100, 4,096 tokens, hidden 7,168, top-8 of 32
    # experts, 20 SMs: dispatch 329, combine 287 GB/s of received bytes (tile-ai/tilescale
    # examples/distributed/deepep README, DeepEP's kernels in its harness), 7/8 of them remote:
    # 0.64 and 0.56 of 450 GB/s, 0.60 over the pair. The same kernels on H800 (153 / 158 GB/s,
    # DeepEP docs/legacy.md) reach 0.67 / 0.69 of its 200, and on 8 B200 at 24 SMs about 0.60
    # (tilescale examples/distributed/deepep_v2 README: 1,048 / 990 us at 64 SMs, 11 / 9 %
    # slower at 24).
    comm_efficiency: Mapping[str, float] = field(default_factory=lambda: _frozen({
        "nccl-nvlink": 0.80, "nccl-network": 0.85,
        "hybridep-nvlink": 0.65, "hybridep-network": 0.90,
        "deepep-nvlink": 0.33, "deepep-nvlink8": 0.60, "deepep-network": 0.90,
        "alltoall-nvlink": 0.30, "alltoall-network": 0.80,
        "allgather-nvlink": 0.50, "allgather-network": 0.80,
    }))
    # Fixed start-up cost of one collective (launch, handshake, kernel tail), seconds.
    collective_overhead_s: Mapping[str, float] = field(default_factory=lambda: _frozen({
        "nccl": 15e-6, "hybridep": 20e-6, "deepep": 20e-6, "alltoall": 30e-6,
        "allgather": 30e-6, "p2p": 10e-6,
    }))

    def __post_init__(self) -> None:
        for name in MAPPING_FIELDS:
            object.__setattr__(self, name, _frozen(dict(getattr(self, name))))
            _check_keys(name, getattr(self, name))
        for name in ("gemm_efficiency", "grouped_gemm_efficiency", "attention_efficiency",
                     "comm_efficiency"):
            for key, value in getattr(self, name).items():
                if not 0 < value <= 1:
                    raise ValueError(f"{name}[{key}]={value}: must be in (0, 1]")
        if not 0 < self.memory_efficiency <= 1:
            raise ValueError(f"memory_efficiency={self.memory_efficiency}: must be in (0, 1]")
        if not self.roofline_overlap_exponent >= 1:
            raise ValueError(f"roofline_overlap_exponent={self.roofline_overlap_exponent}: "
                             "must be >= 1 (1: math and memory in series; inf: the roofline)")
        for name in ("unbound_host_slowdown", "unfused_permute_slowdown", "grace_host_slowdown",
                     "te_host_cleanup_speedup", "per_tensor_fp8_speedup"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: must be >= 1")
        if not 0 <= self.gpu_speed_cv < 0.2:
            raise ValueError(f"gpu_speed_cv={self.gpu_speed_cv}: must be in [0, 0.2)")
        for name in ("host_launch_s", "schedule_node_host_s", "kernel_gap_s",
                     "graphed_kernel_gap_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)}: must be >= 0")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle through the constructor (a mappingproxy does not pickle): for --jobs."""
        values: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update({name: dict(values[name]) for name in MAPPING_FIELDS})
        return (partial(CostParams, **values), ())

    def comm(self, algorithm: str, fabric: str) -> float:
        """Efficiency of `algorithm` over `fabric` ("nvlink8", "nvlink" or "network")."""
        key = comm_key(self.comm_efficiency, algorithm, fabric)
        if key not in self.comm_efficiency:
            raise ValueError(f"comm_efficiency: no entry {key!r}; known are "
                             f"{', '.join(sorted(self.comm_efficiency))}")
        return self.comm_efficiency[key]

    def overhead_s(self, algorithm: str) -> float:
        return self.collective_overhead_s.get(algorithm, self.collective_overhead_s["nccl"])


def comm_key(table: Mapping[str, float], algorithm: str, fabric: str) -> str:
    """The key of comm_efficiency `table` that `algorithm` reads on `fabric`: "nvlink8" (an
    NVLink domain of at most 8 GPUs) falls back to "nvlink" where it has no entry."""
    key = f"{algorithm}-{fabric}"
    if fabric == NVLINK8 and key not in table:
        return f"{algorithm}-nvlink"
    return key


def _check_keys(name: str, table: Mapping[str, float]) -> None:
    """Raise a one-line error for a key of mapping field `name` that no kernel reads."""
    pattern, shape = KEY_GRAMMAR[name]
    words = {"ARCHITECTURE": _ARCHITECTURE, "PRECISION": _PRECISION, "ALGORITHM": _ALGORITHM}
    for key in table:
        if not re.fullmatch(pattern, key):
            legend = "; ".join(f"{word}: {choices.replace('|', ', ')}"
                               for word, choices in words.items() if word in shape)
            raise ValueError(f"{name}.{key}: not a key the cost model reads; keys are {shape} "
                             f"({legend})")


def host_params(params: CostParams, numa_bound: bool, host_cpu: str = "x86", *,
                te_host_cleanup: bool = False) -> CostParams:
    """`params` as a rank's CPU sees them: `host_launch_s` and `schedule_node_host_s` are an
    x86 host's; both take longer on a Grace host and when the rank is not NUMA-bound. TE's
    cleaned-up host code launches faster; the schedule nodes are Megatron's, not TE's."""
    slowdown = ((1.0 if numa_bound else params.unbound_host_slowdown)
                * (params.grace_host_slowdown if host_cpu == "grace" else 1.0))
    launch_slowdown = slowdown / (params.te_host_cleanup_speedup if te_host_cleanup else 1.0)
    if slowdown == 1.0 and launch_slowdown == 1.0:
        return params
    return replace(params, host_launch_s=params.host_launch_s * launch_slowdown,
                   schedule_node_host_s=params.schedule_node_host_s * slowdown)


FIRST_PRINCIPLES = CostParams()
SCALAR_FIELDS = tuple(f.name for f in fields(CostParams)
                      if isinstance(getattr(FIRST_PRINCIPLES, f.name), float))


def efficiency_key(table: Mapping[str, float], prefix: str, precision_key: str,
                   head_dim: int = 0) -> str:
    """The key of `table` that a kernel uses, most specific first: "<prefix>-<precision>-d<head
    dim>" (attention), "<prefix>-<precision>" (prefix: the GPU architecture, "fused-<GPU
    architecture>" for the fused grouped MLP, "window" for sliding-window attention), for the
    fused grouped MLP "fused-<precision>" (one rate for every architecture), "<precision>",
    "bf16"."""
    key = f"{prefix}-{precision_key}"
    shared = (f"{FUSED}-{precision_key}",) if prefix.startswith(f"{FUSED}-") else ()
    for candidate in (f"{key}-d{head_dim}", key, *shared, precision_key):
        if candidate in table:
            return candidate
    return "bf16"


def params_value(params: CostParams, key: str) -> float:
    """The value of a scalar field, or of `field.key` inside a mapping field (falling back
    as the cost model does, `efficiency_key` and `comm_key`)."""
    name, _, entry = key.partition(".")
    current = getattr(params, name)
    if not entry:
        return float(current)
    if name == "comm_efficiency":
        algorithm, _, fabric = entry.rpartition("-")
        return float(current.get(comm_key(current, algorithm, fabric), 0.0))
    parts = re.fullmatch(r"(.*?)(?:-d(\d+))?", entry)
    assert parts is not None  # the pattern matches any string
    prefix, _, precision = parts[1].rpartition("-")
    return float(current.get(efficiency_key(current, prefix, precision, int(parts[2] or 0)),
                             0.0))


def params_with(params: CostParams, key: str, value: float) -> CostParams:
    """Set one parameter: a scalar field, or `field.key` inside a mapping field."""
    name, _, entry = key.partition(".")
    known = tuple(f.name for f in fields(CostParams))
    if name not in known:
        raise ValueError(f"calibration parameter {name!r}: known are {', '.join(known)}")
    current = getattr(params, name)
    if not entry:
        if not isinstance(current, float):
            raise ValueError(f"calibration parameter {name}: give a key, e.g. {name}.fp8=0.7")
        change: dict[str, Any] = {name: value}
        return replace(params, **change)
    change = {name: _frozen({**current, entry: value})}
    return replace(params, **change)


def read_calibration_file(path: str | Path) -> Any:
    """The YAML document of a file `moesim calibrate` wrote, as parsed."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"calibration {path}: cannot read ({str(error).splitlines()[0]})") \
            from None


def calibration_entries(document: Any, path: str | Path) -> dict[str, Any]:
    """The `parameters` mapping (key -> {value, start, bounds, meaning}) of the document
    (`read_calibration_file`) of a file `moesim calibrate` wrote to `path`."""
    entries = document.get("parameters") if isinstance(document, dict) else None
    if not isinstance(entries, dict):
        raise ValueError(f"calibration {path}: key 'parameters' must be a mapping of "
                         "key -> {value: number}")
    return {str(key): entry for key, entry in entries.items()}


def _entry_value(entry: Any, name: str) -> Any:
    return entry.get(name) if isinstance(entry, dict) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def calibration_values(path: str | Path, field: str = "value") -> dict[str, float]:
    """Every value a file `moesim calibrate` wrote holds (`document_values`)."""
    return document_values(read_calibration_file(path), path, field)


def document_values(document: Any, path: str | Path, field: str = "value") -> dict[str, float]:
    """Every value the document of a file `moesim calibrate` wrote to `path` holds, key ->
    number: its `fixed` ones (those a partial refit held at its start file's), then each fitted
    entry's `value`, or with field="start" the value that fit began at."""
    fixed = document.get("fixed", {}) if isinstance(document, dict) else {}
    held = {str(key): _entry_value(entry, "value")
            for key, entry in (fixed.items() if isinstance(fixed, dict) else ())}
    wrong = [f"fixed.{key}.value={value!r}" for key, value in held.items()
             if not _is_number(value)]
    if not isinstance(fixed, dict) or wrong:
        raise ValueError(f"calibration {path}: key 'fixed' must be a mapping of "
                         f"key -> {{value: number}}{', not ' + wrong[0] if wrong else ''}")
    values = {key: float(value) for key, value in held.items()}
    for key, entry in calibration_entries(document, path).items():
        if not isinstance(entry, dict):
            raise ValueError(f"calibration {path}: parameters.{key}={entry!r} must be a "
                             f"mapping with a number under {field!r}")
        value = _entry_value(entry, field)
        if not _is_number(value):
            raise ValueError(f"calibration {path}: parameters.{key}.{field}={value!r} must be "
                             "a number")
        values[key] = float(value)
    return values


def load_calibration(path: str | Path, base: CostParams | None = None,
                     field: str = "value") -> CostParams:
    """Cost parameters from a file `moesim calibrate` wrote (`calibration_values`), applied on
    top of `base` (default: the first-principles values)."""
    return params_with_values(FIRST_PRINCIPLES if base is None else base,
                              calibration_values(path, field))


def params_with_values(params: CostParams, values: Mapping[str, float]) -> CostParams:
    """`params` with each key of `values` (as `params_with` names them) set."""
    for key, value in values.items():
        params = params_with(params, key, value)
    return params


# The calibration `moesim calibrate ../shared/data/calibration.csv` produced (the file records
# the command, the data's hash and every parameter's meaning); `moesim calibrate` itself
# starts from FIRST_PRINCIPLES.
SHIPPED_CALIBRATION = Path(__file__).with_name("calibration.yaml")
DEFAULT_PARAMS = (load_calibration(SHIPPED_CALIBRATION, FIRST_PRINCIPLES)
                  if SHIPPED_CALIBRATION.exists() else FIRST_PRINCIPLES)
