"""Software recipes: the framework features of one release, as data.

Owns `Recipe`, the catalog `RECIPES` (NVIDIA Megatron-Bridge DeepSeek-V3 GB300 performance
recipes), `recipe(name)`, `recipe_with(...)` and `parse_recipe_value(...)` for CLI overrides.
A recipe says what the software does (precision, dispatcher, CUDA graphs, overlap, recompute,
padding, optimizer precision); it carries no FLOPs, bytes of activations or seconds. The one
formula, the optimizer state it implies per parameter (sharded by the distributed optimizer):

    optimizer_state_bytes_per_param = main params + Adam exp_avg + exp_avg_sq
        = 4 + 4 + 4 = 12 (Megatron default)  or  4 + 2 + 2 = 8 (BF16 moments)

Sources: research/deepseek-v3-and-flops.md (§4.x below), research/hardware-and-recipes.md §3
("hw §3"), data/README.md recipe-flag table ("data table").
"""

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from workloads.schedules import SCHEDULES

PRECISIONS = ("bf16", "fp8-cs", "fp8-blockwise", "mxfp8", "nvfp4")
# Switches that only a run in FP8/FP4 has: attention, the parameter all-gather and the MoE
# dispatch in FP8.
FP8_ONLY_FIELDS = ("fp8_attention", "fp8_param_gather", "fp8_dispatch")
# Microscaling formats: their per-block scales need Blackwell's tensor cores (Hopper has none).
BLOCK_SCALED_PRECISIONS = ("mxfp8", "nvfp4")
DISPATCHERS = ("alltoall", "allgather", "deepep", "hybridep")
NCCL_DISPATCHERS = ("alltoall", "allgather")
CUDA_GRAPHS = ("none", "partial", "full")
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                     "shared_experts")
FULL_RECOMPUTE = ("full",)


@dataclass(frozen=True, slots=True, kw_only=True)
class Recipe:
    """Framework features; defaults are plain Megatron-LM defaults.

    dispatcher_sms: SMs the DeepEP/HybridEP kernels hold while they run; 0 for the NCCL
    dispatchers (alltoall/allgather), whose few NCCL channels are not modelled as held SMs.
    cuda_graphs: "partial" = TE-scoped per-layer graphs, "full" = full-iteration graph.
    a2a_overlap: 1F1B EP all-to-all overlap (with delayed wgrad), §4.6.
    recompute_modules: selective recompute modules (§4.9), ("full",) or () for none.
    expert_capacity_factor: None = dropless; else each expert's input is padded to this factor x
        the balanced load (--moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity):
        the grouped GEMMs run on the padded rows.
    rank_capacity_factor: HybridEP's per-EP-rank budget (--moe-expert-rank-capacity-factor):
        dispatch and grouped-expert buffers sized to this factor x the balanced load, for static
        shapes; the experts compute only the tokens received (the grouped kernels read the
        per-expert counts on the device and skip the rest of the buffer).
    grad_reduce_dtype_bytes: bytes per gradient element in the grad buffer and its reduction.
    fp8_param_gather: the DP all-gather of parameters moves FP8 weights.
    fp8_dispatch: the EP all-to-all sends tokens to their experts in FP8 (forward dispatch and
        the activation gradient the backward sends to the experts); what comes back stays BF16
        (DeepSeek-V3 report §3.3.2). Only DeepEP's and HybridEP's kernels take FP8 tokens
        (workloads.routing.dispatch_payload_bytes).
    tp_comm_overlap: --tp-comm-overlap (TE userbuffers, needs TP >= 2 and sequence parallelism):
        each sequence-parallel all-gather and reduce-scatter is split into TP chunks pipelined
        with the GEMM it feeds or drains, so it runs beside that GEMM instead of before or
        after it.
    optimizer_state_bytes_per_param: main params + both Adam moments (see module docstring).
    nccl_nvls: NCCL may use NVLink SHARP (in-switch reduction) collectives.
    activation_offload_layers: --cpu-offloading-num-layers: that many layers of each rank keep
        their activations in host memory (copied while the GPU computes; counted in memory,
        taken as hidden in time).

    Kernel-level features of the Megatron GB200 guide (deepseek-v3-gb200-optimization.md,
    "guide" below), each acting on kernel counts, kernel speed or host cost:
    router_fusion: --moe-router-fusion, router kernels 72 -> 31 (guide §2.1.4).
    permute_fusion: --moe-permute-fusion, the fused permute kernel (TE PR 1927, "up to 10x").
    quant_alloc_fusion: MXFP8 scale buffers from one pre-allocated pool instead of
        torch.zeros per scale tensor (guide §2.1.2; TE default since).
    swizzle_fusion: one swizzle kernel for all scale factors of a GEMM (guide §2.1.3).
    pdl: programmatic dependent launch for quantisation kernels: their launch latency hides
        under the previous kernel (guide §3 table, step 08).
    norm_quant_fusion: MXFP8 quantisation fused into the norm by cuDNN (guide §2.1.5).
    graph_shared_expert: Megatron computes the shared expert before the router, where the
        TE-scoped moe_router graph captures it (guide §2.3; not when shared_expert_overlap is
        on; Megatron-LM PR 1920, Oct 2025); off, as before that, it runs after the dispatch's
        host sync, ahead of the routed experts (MoELayer.experts_compute).
    host_numa_bound: each rank's CPU and memory bound to its GPU's NUMA node (bindpcie,
        guide §2.4); unbound, every launch takes CostParams.unbound_host_slowdown longer.
    te_host_cleanup: TE's host code with the guide's later clean-up of checks, PyTorch API and
        CUDA calls (guide §2.4, §3 table step 11): each eager launch's host time is divided by
        CostParams.te_host_cleanup_speedup. The calibrated host_launch_s is the releases'
        stack as it is, so only the guide's ladder turns this on.
    fused_grouped_mlp: TE's operation fuser runs the routed experts as one fused grouped MLP
        (CuTeDSL kernels: FC1 + SwiGLU + MXFP8 quantisation, then FC2; Megatron
        --use-transformer-engine-op-fuser with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1). TE selects it
        only for MXFP8 (TransformerEngine PR 2622); at other precisions the flag changes nothing.
    fused_mlp_dbias_slowdown: how many times as long the fused MLP's backward FC2-dgrad + dGLU
        kernel takes when it also reduces the experts' bias gradient (models with
        linear_bias); 1 = as designed.
    deepep_nvlink_efficiency: a measured share of NVLink line rate for DeepEP's dispatch and
        combine that replaces the calibrated comm_efficiency "deepep-nvlink" (None: the
        calibrated one); the GB200 guide's steps 03-05 ran the untuned EP32 community port
        (DEEPEP_UNTUNED_MNNVL_EFFICIENCY).
    pipeline_schedule: "1f1b" (Megatron's 1F1B, interleaved when vpp > 1) or "dualpipev"
        (DeepSeek's V-shaped DualPipe: two chunks per rank, vpp = 2; workloads.schedules).
    p2p_host_sync: the host synchronises the device after each pipeline exchange of a
        non-interleaved 1F1B, as Megatron does (batch_p2p_sync, workloads.step); PyTorch's
        pipeline schedules (TorchTitan, AutoModel) only make the stream wait on the exchange
        (`_wait_batch_p2p`, `Work.wait()`: for a CUDA collective it returns once the operation
        is enqueued, pytorch/pytorch PR 45709).
    local_batch_size: sequences each DP rank puts through one pipeline schedule; a step runs
        the schedule gbs / (local_batch_size * dp) times, each of local_batch_size / mbs micro
        batches, one after the other (NeMo AutoModel's step_scheduler.local_batch_size: its
        benchmark loop runs one schedule per "GA step", recipes/llm/benchmark.py; TorchTitan's
        training.local_batch_size likewise, one pp_schedule.step per gradient-accumulation
        step). 0: the whole per-rank batch in one schedule, as Megatron does. Only a pipeline
        (pp > 1) has a schedule to repeat: without one every micro batch is a forward and
        backward of its own.
    """

    name: str
    precision: str = "bf16"
    dispatcher: str = "alltoall"
    dispatcher_sms: int = 0
    cuda_graphs: str = "none"
    a2a_overlap: bool = False
    shared_expert_overlap: bool = False
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    recompute_modules: tuple[str, ...] = ()
    fp8_attention: bool = False
    expert_capacity_factor: float | None = None
    rank_capacity_factor: float | None = None
    grad_reduce_dtype_bytes: int = 4
    fp8_param_gather: bool = False
    fp8_dispatch: bool = False
    tp_comm_overlap: bool = False
    optimizer_state_bytes_per_param: float = 12.0
    nccl_nvls: bool = True
    activation_offload_layers: int = 0
    router_fusion: bool = False
    permute_fusion: bool = False
    quant_alloc_fusion: bool = True
    swizzle_fusion: bool = True
    pdl: bool = True
    norm_quant_fusion: bool = False
    graph_shared_expert: bool = True
    host_numa_bound: bool = True
    te_host_cleanup: bool = False
    fused_grouped_mlp: bool = False
    fused_mlp_dbias_slowdown: float = 1.0
    deepep_nvlink_efficiency: float | None = None
    pipeline_schedule: str = "1f1b"
    p2p_host_sync: bool = True
    local_batch_size: int = 0

    def __post_init__(self) -> None:
        for field, allowed in (("precision", PRECISIONS), ("dispatcher", DISPATCHERS),
                               ("cuda_graphs", CUDA_GRAPHS), ("pipeline_schedule", SCHEDULES)):
            if getattr(self, field) not in allowed:
                raise ValueError(f"{field}={getattr(self, field)!r}: must be one of {allowed}")
        _check_dispatcher_sms(self)
        _check_recompute(self.recompute_modules)
        _check_numbers(self)
        _check_compatibility(self)


def static_expert_shapes(r: Recipe) -> bool:
    """Whether the experts' buffers have fixed sizes (a capacity factor of either kind), so no
    host sync reads the received token counts."""
    return r.expert_capacity_factor is not None or r.rank_capacity_factor is not None


def host_runs_schedule_nodes(r: Recipe) -> bool:
    """Whether the host runs the combined 1F1B's schedule nodes (A2A overlap outside a
    full-iteration CUDA graph, which replays them without it)."""
    return r.a2a_overlap and r.cuda_graphs != "full"


def _check_dispatcher_sms(r: Recipe) -> None:
    if r.dispatcher in NCCL_DISPATCHERS and r.dispatcher_sms != 0:
        raise ValueError(f"dispatcher_sms={r.dispatcher_sms}: must be 0 for the NCCL "
                         f"dispatcher {r.dispatcher!r}")
    if r.dispatcher not in NCCL_DISPATCHERS and r.dispatcher_sms < 1:
        raise ValueError(f"dispatcher_sms={r.dispatcher_sms}: {r.dispatcher} kernels hold SMs, "
                         f"must be >= 1")


def _check_recompute(modules: tuple[str, ...]) -> None:
    if modules == FULL_RECOMPUTE:
        return
    for module in modules:
        if module not in RECOMPUTE_MODULES:
            raise ValueError(f"recompute_modules={modules}: unknown module {module!r}; allowed: "
                             f"{', '.join(RECOMPUTE_MODULES)}, or ('full',) alone")
    if len(set(modules)) != len(modules):
        raise ValueError(f"recompute_modules={modules}: a module is listed twice")


def _check_numbers(r: Recipe) -> None:
    for name, factor in (("expert_capacity_factor", r.expert_capacity_factor),
                         ("rank_capacity_factor", r.rank_capacity_factor)):
        if factor is not None and factor <= 0:
            raise ValueError(f"{name}={factor}: must be None (dropless) or > 0")
    if r.grad_reduce_dtype_bytes not in (2, 4):
        raise ValueError(f"grad_reduce_dtype_bytes={r.grad_reduce_dtype_bytes}: must be 2 (bf16) "
                         f"or 4 (fp32)")
    if r.optimizer_state_bytes_per_param <= 0:
        raise ValueError(f"optimizer_state_bytes_per_param={r.optimizer_state_bytes_per_param}: "
                         f"must be > 0")
    efficiency = r.deepep_nvlink_efficiency
    if efficiency is not None and not 0 < efficiency <= 1:
        raise ValueError(f"deepep_nvlink_efficiency={efficiency}: must be None (calibrated) or "
                         "a share of line rate in (0, 1]")
    if r.fused_mlp_dbias_slowdown < 1:
        raise ValueError(f"fused_mlp_dbias_slowdown={r.fused_mlp_dbias_slowdown}: must be >= 1")
    for name in ("activation_offload_layers", "local_batch_size"):
        value = getattr(r, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}={value!r}: must be a whole number >= 0")


def a2a_overlap_refusal(recompute_modules: tuple[str, ...], dispatcher: str) -> str | None:
    """Why Megatron refuses the 1F1B all-to-all overlap beside these settings, or None."""
    if recompute_modules == FULL_RECOMPUTE or "moe" in recompute_modules:
        return (f"recompute_modules={recompute_modules}: a2a_overlap=True forbids full "
                f"recompute and 'moe'")
    if dispatcher == "allgather":
        return "dispatcher='allgather': a2a_overlap=True needs alltoall, deepep or hybridep"
    return None


def _check_compatibility(r: Recipe) -> None:
    """Megatron's constraints, research/deepseek-v3-and-flops.md §4.5, §4.6 and §4.10."""
    if r.a2a_overlap and r.shared_expert_overlap:
        raise ValueError("shared_expert_overlap=True: incompatible with a2a_overlap=True")
    refusal = a2a_overlap_refusal(r.recompute_modules, r.dispatcher)
    if r.a2a_overlap and refusal:
        raise ValueError(refusal)
    for field in FP8_ONLY_FIELDS:
        if getattr(r, field) and r.precision == "bf16":
            raise ValueError(f"{field}=True: needs an FP8/FP4 precision, not precision='bf16'")
    if r.fp8_dispatch and r.dispatcher in NCCL_DISPATCHERS:
        raise ValueError(f"fp8_dispatch=True: needs dispatcher 'deepep' or 'hybridep', whose "
                         f"kernels take FP8 tokens, not dispatcher={r.dispatcher!r}")


# DeepEP's EP32 port to GB200's multi-node NVLink before NVIDIA tuned it reached about 400 GB/s
# dispatch and 190 GB/s combine algorithm bandwidth on 24 SMs, of 900 GB/s per direction
# (Megatron-LM deepseek-v3-gb200-optimization.md §2.2.1). Both move BF16 tokens (no FP8
# dispatch in the guide), so over a dispatch + combine pair the share of line rate is the
# harmonic mean of the two: 0.286.
DEEPEP_UNTUNED_MNNVL_EFFICIENCY = 2 / (900 / 400 + 900 / 190)

_MBRIDGE_26_06 = Recipe(
    # DeepSeek-V3, GB300, 1,648 TFLOP/s/GPU: Megatron-Bridge v0.5.0 perf config
    # DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V2 (deepseek-v3-and-flops.md §4.13; hw §3 row 1).
    name="mbridge-26.06",
    precision="mxfp8",                     # §4.13: MXFP8
    dispatcher="hybridep",                 # §4.13: flex dispatcher, HybridEP backend
    dispatcher_sms=32,                     # §4.13: moe_hybridep_num_sms=32
    cuda_graphs="full",                    # §4.13: cuda_graph_impl=full_iteration
    a2a_overlap=True,                      # §4.13: moe_a2a_overlap=True (+ delay_wgrad_compute)
    shared_expert_overlap=False,           # §4.13: shared-expert overlap off
    overlap_grad_reduce=True,              # §4.13: distributed optimizer, overlap_grad_reduce
    overlap_param_gather=True,             # §4.13: overlap_param_gather
    recompute_modules=(),                  # §4.13: recompute_modules=[]
    fp8_attention=True,                    # §4.13: fp8_dot_product_attention=True
    rank_capacity_factor=1.5,              # §4.13: moe_expert_rank_capacity_factor=1.5
    grad_reduce_dtype_bytes=2,             # §4.13: BF16 grad reduce (grad_reduce_in_fp32=False)
    fp8_param_gather=False,                # §4.10: not used with MXFP8
    optimizer_state_bytes_per_param=8.0,   # §4.13: FP32 main params + BF16 moments
    nccl_nvls=False,                       # hw §3 row 1: NCCL_NVLS_ENABLE=0
    router_fusion=True,                    # hw §3: common to all NVIDIA DSv3 perf recipes
    permute_fusion=True,                   # hw §3: common to all NVIDIA DSv3 perf recipes
    norm_quant_fusion=True,                # guide §2.1.5: cuDNN >= 9.14 norm + quantisation
    fused_grouped_mlp=True,                # hw §3 row 1: CuTeDSL fused grouped MLP, TE op fuser
)

_MBRIDGE_26_02 = Recipe(
    # DeepSeek-V3, GB300, 26.02-26.04.01 (1,199 -> 1,298): Megatron-Bridge v0.3.0/v0.4.x perf
    # configs (hw §3 row 3; data table row "26.02 - 26.04.01 gb300").
    name="mbridge-26.02",
    precision="mxfp8",                     # data table / calibration.csv rows mb2602-dsv3-gb300
    dispatcher="hybridep",                 # data table: hybridep
    dispatcher_sms=32,                     # §4.2: Bridge perf recipes use 32 (library default 16)
    cuda_graphs="none",                    # data table: none
    a2a_overlap=False,                     # data table: 0
    shared_expert_overlap=True,            # §4.5: Bridge DSv3 provider default (a2a overlap off)
    overlap_grad_reduce=True,              # hw §3: common to all NVIDIA DSv3 perf recipes
    overlap_param_gather=True,             # hw §3: common to all NVIDIA DSv3 perf recipes
    recompute_modules=("mla_up_proj",),    # data table: mla_up_proj
    fp8_attention=False,                   # data table: 0
    expert_capacity_factor=None,           # dropless; rank capacity came with full graphs (26.06)
    grad_reduce_dtype_bytes=2,             # §4.12: DSv3 perf recipes set grad_reduce_in_fp32=False
    fp8_param_gather=False,                # §4.10: not used with MXFP8
    optimizer_state_bytes_per_param=8.0,   # Bridge recipes/deepseek/deepseek_v3.py: precision-aware
                                           # optimizer, FP32 main params + BF16 moments
    nccl_nvls=False,                       # hw §1.2: NVIDIA's DSv3 recipes set NCCL_NVLS_ENABLE=0
    router_fusion=True,                    # hw §3: common to all NVIDIA DSv3 perf recipes
    permute_fusion=True,                   # hw §3: common to all NVIDIA DSv3 perf recipes
    norm_quant_fusion=True,                # perf_plugins.py: cuDNN norm env kept for DeepSeek
                                           # FP8-MX on GB200/GB300 (guide §2.1.5)
)

_MBRIDGE_25_11 = Recipe(
    # DeepSeek-V3, GB300, 25.11 (1,088, no MTP). The 25.11 table rows carry no recipe flags and
    # do not match the release recipes (hw §2 caveat 7). Flags below come from the Megatron-
    # Bridge perf scripts whose GB300 entry matches the table (PP2 VP4 EP32 GBS 4096, MTP off):
    # scripts/performance/configs/deepseek/workload_base_configs.py and
    # deepseek_llm_pretrain.py @d19cb73.
    name="mbridge-25.11",
    precision="mxfp8",                     # calibration.csv mb2511-dsv3-gb300-256-mxfp8
    dispatcher="hybridep",                 # base config: moe_flex_dispatcher_backend="hybridep"
    dispatcher_sms=32,                     # perf overrides: moe_hybridep_num_sms=32
    cuda_graphs="partial",                 # base config: transformer_engine, scope attn,
                                           # moe_router, moe_preprocess
    a2a_overlap=False,                     # base config: moe_a2a_overlap=False
    shared_expert_overlap=False,           # a flex dispatcher forces it off
                                           # (flex_dispatcher_backend.py)
    overlap_grad_reduce=True,              # deepseek_llm_pretrain.py: overlap_grad_reduce = True
    overlap_param_gather=False,            # deepseek_llm_pretrain.py: off for fp8_mx ("causes
                                           # NaN grad norm")
    recompute_modules=(),                  # GB300 base config: recompute_modules=[]
    fp8_attention=False,                   # not enabled in the pre-v0.3 scripts (data table rule)
    expert_capacity_factor=None,           # dropless (force-balanced benchmark routing)
    grad_reduce_dtype_bytes=2,             # deepseek_llm_pretrain.py: grad_reduce_in_fp32 = False
    fp8_param_gather=False,                # §4.10: not used with MXFP8
    optimizer_state_bytes_per_param=8.0,   # pre-v0.3 recipes/deepseek/deepseek_v3.py:
                                           # precision-aware, FP32 main params + BF16 moments
    nccl_nvls=False,                       # hw §1.2: NVIDIA's DSv3 recipes set NCCL_NVLS_ENABLE=0
    router_fusion=True,                    # hw §3: common to all NVIDIA DSv3 perf recipes
    permute_fusion=True,                   # hw §3: common to all NVIDIA DSv3 perf recipes
    norm_quant_fusion=False,               # setup_experiment.py of the use_tokendrop scripts
                                           # removes the cuDNN norm env for DeepSeek
                                           # (del_cudnn_ln: only some Llama runs keep it)
)

_MEGATRON_DEFAULTS = Recipe(
    # Plain Megatron-LM / Megatron-Bridge training defaults for runs whose tables give no
    # recipe flags: distributed optimizer with overlapped grad reduce and param gather (the
    # NVIDIA perf recipes' common setting, hw §3), FP32 gradient reduction and FP32 Adam
    # moments (Megatron defaults: grad_reduce_in_fp32 and 4+4+4 bytes of optimizer state),
    # eager execution, NCCL all-to-all dispatcher, no recompute, NVLS allowed.
    name="megatron-defaults",
    overlap_grad_reduce=True,
    overlap_param_gather=True,
)

# Releases in the `release` vocabulary of ../shared/data/README.md. A row's explicit flags
# (precision, recompute, dispatcher, cuda_graphs, a2a_overlap, fp8_attention) override these.
_RELEASES = (
    _MEGATRON_DEFAULTS,
    _MBRIDGE_25_11,
    _MBRIDGE_26_02,
    replace(_MBRIDGE_26_02, name="mbridge-26.04"),  # data table: same flags as 26.02 on GB300
    _MBRIDGE_26_06,
    # 26.06.01: 26.06's recipes with cudnn-frontend 1.24/1.25, whose fused grouped-GEMM dGLU
    # kernel with a bias gradient took 1362.8 us instead of 155.6 us (CUTLASS DSL code
    # generation of the dbias reduction; NVIDIA/cudnn-frontend issue 256, fixed by PR 322;
    # the footnote of Megatron-Bridge docs/performance-summary.md for GPT-OSS in 26.06.01).
    replace(_MBRIDGE_26_06, name="mbridge-26.06.01", fused_mlp_dbias_slowdown=1362.8 / 155.6),
    # 26.08 keeps 26.06's DSv3 features and adds FP8 output projection (hw §3 row 1), which
    # moesim does not distinguish from the MXFP8 linear layers it already runs in FP8.
    replace(_MBRIDGE_26_06, name="mbridge-26.08"),
    # 25.09: first Megatron-Bridge tables (scripts/performance/configs/deepseek/
    # deepseek_v3_llm_pretrain.py @58fa56a3): GB200 and B200 ran the NCCL all-to-all with token
    # drop (the rows' routing column), recompute of the MLA up-projections, no A2A overlap,
    # the alltoall provider's shared-expert overlap; DSv3 H100 flags come per row (data table
    # row 25.09); BF16 gradient reduction and precision-aware optimizer as in the later DSv3
    # recipes.
    replace(_MBRIDGE_25_11, name="mbridge-25.09", dispatcher="alltoall", dispatcher_sms=0,
            cuda_graphs="none", shared_expert_overlap=True, recompute_modules=("mla_up_proj",)),
    # GB200 guide baseline (hw §3, data/README.md "Other sources"): alltoall dispatcher, no
    # graphs, no 1F1B A2A overlap, FP8 param-gather, BF16 Adam moments; steps override flags.
    # Its kernel-level features start off, and DeepEP (from step 03) is the untuned EP32 port;
    # GB200_GUIDE_STEPS turns them on step by step.
    replace(_MEGATRON_DEFAULTS, name="mbridge-gb200-guide-2025-11", precision="mxfp8",
            recompute_modules=("mla_up_proj", "mlp"), fp8_param_gather=True,
            grad_reduce_dtype_bytes=2, optimizer_state_bytes_per_param=8.0, nccl_nvls=False,
            quant_alloc_fusion=False, swizzle_fusion=False, pdl=False,
            graph_shared_expert=False, host_numa_bound=False,
            deepep_nvlink_efficiency=DEEPEP_UNTUNED_MNNVL_EFFICIENCY),
    # ModelZoo scripts (yanring/Megatron-MoE-ModelZoo) and the MoE report built on them: flags
    # per row; BF16 moments via the precision-aware optimizer as in the Bridge DSv3 recipes;
    # router and permute fusion as in every NVIDIA DSv3 perf recipe (hw §3).
    replace(_MEGATRON_DEFAULTS, name="modelzoo-2025", dispatcher="deepep", dispatcher_sms=24,
            optimizer_state_bytes_per_param=8.0, grad_reduce_dtype_bytes=2,
            router_fusion=True, permute_fusion=True),
    replace(_MEGATRON_DEFAULTS, name="modelzoo-2026", dispatcher="hybridep", dispatcher_sms=32,
            optimizer_state_bytes_per_param=8.0, grad_reduce_dtype_bytes=2,
            router_fusion=True, permute_fusion=True),
    replace(_MEGATRON_DEFAULTS, name="moe-report-2026", dispatcher="hybridep",
            dispatcher_sms=32, cuda_graphs="partial", optimizer_state_bytes_per_param=8.0,
            grad_reduce_dtype_bytes=2,
            router_fusion=True, permute_fusion=True),
    replace(_MBRIDGE_26_02, name="mbridge-skill-2026"),
    # DeepSeek's own H800 run (DeepSeek-V3 report §3): DualPipe with its overlapped F&B pairs,
    # run as DualPipeV on the same ranks (the same bubble and overlap, DeepSeek-V3 report
    # §3.2.1 and the DualPipe README; one copy of the parameters where DualPipe holds two, so
    # memory counts one stage's parameters fewer), DeepEP-style kernels on 20 SMs, FP8
    # blockwise with the dispatch in FP8 (§3.3.2), BF16 moments, recompute of RMSNorm and
    # MLA up-projections; ZeRO-1 data parallelism.
    replace(_MEGATRON_DEFAULTS, name="deepseek-2024", precision="fp8-blockwise",
            dispatcher="deepep", dispatcher_sms=20, a2a_overlap=True, fp8_dispatch=True,
            pipeline_schedule="dualpipev",
            recompute_modules=("mla_up_proj", "layernorm"), optimizer_state_bytes_per_param=8.0,
            grad_reduce_dtype_bytes=4),
    # NeMo 2.0 tables (Llama, Mixtral): Megatron defaults, flags per row.
    *(replace(_MEGATRON_DEFAULTS, name=name) for name in (
        "megatron-lm-2024", "nemo-24.07", "nemo-25.02", "nemo-25.04", "nemo-25.07")),
    # Meta's Llama 3 (FSDP-style sharding per row), TorchTitan (FSDP2 + Float8) and NeMo
    # AutoModel (FSDP2 + DeepEP): eager PyTorch, FP32 gradient reduction; the last two pipeline
    # with PyTorch's schedules, which do not synchronise the host at an exchange.
    replace(_MEGATRON_DEFAULTS, name="llama3-2024"),
    replace(_MEGATRON_DEFAULTS, name="torchtitan-2025", p2p_host_sync=False),
    # AutoModel's benchmark configs (NVIDIA-NeMo/Automodel examples/benchmark/configs/
    # deepseek_v3_te_deepep.yaml, qwen3_moe_30b_te_deepep.yaml): parallelizer
    # activation_checkpointing: true, i.e. every transformer block recomputed; local batches
    # of 8 sequences (deepseek_v3_te_deepep_1024.yaml step_scheduler.local_batch_size: 8; data
    # README: "AutoModel's GA counts local batches (LBS 8)").
    replace(_MEGATRON_DEFAULTS, name="automodel-2026", dispatcher="deepep", dispatcher_sms=24,
            p2p_host_sync=False, recompute_modules=FULL_RECOMPUTE, local_batch_size=8),
)

RECIPES: dict[str, Recipe] = {r.name: r for r in _RELEASES}

# The GB200 guide's optimisation ladder (guide §3 table): the kernel-level features each step
# turns on, cumulatively. Steps 03, 04, 05 and 10 change the dispatcher, recompute and graphs,
# which measurement rows carry as columns; step 06 tunes DeepEP, whose kernels then reach the
# calibrated deepep-nvlink efficiency; step 11 cleans up TE's host code.
GB200_GUIDE = "mbridge-gb200-guide-2025-11"
GB200_GUIDE_STEPS: dict[int, dict[str, Any]] = {
    1: {"permute_fusion": True, "quant_alloc_fusion": True},
    2: {"router_fusion": True},
    6: {"deepep_nvlink_efficiency": None},
    7: {"host_numa_bound": True},
    8: {"pdl": True, "swizzle_fusion": True},
    9: {"graph_shared_expert": True},
    11: {"te_host_cleanup": True},
    12: {"norm_quant_fusion": True},
}


def guide_step_recipe(step: int) -> Recipe:
    """The GB200 guide's recipe after optimisation step `step` (0 = baseline ... 12)."""
    if not 0 <= step <= max(GB200_GUIDE_STEPS):
        raise ValueError(f"GB200 guide step={step}: must be 0 .. {max(GB200_GUIDE_STEPS)}")
    changes: dict[str, Any] = {}
    for number in sorted(GB200_GUIDE_STEPS):
        if number <= step:
            changes.update(GB200_GUIDE_STEPS[number])
    return replace(RECIPES[GB200_GUIDE], **changes)


def recipe(name: str) -> Recipe:
    """The catalog recipe called `name`."""
    if name not in RECIPES:
        raise ValueError(f"recipe={name!r}: unknown recipe; known: {', '.join(sorted(RECIPES))}")
    return RECIPES[name]


def recipe_with(base: Recipe, **changes: Any) -> Recipe:
    """A copy of `base` with `changes` applied and validated. A change to BF16 turns off the
    switches that only an FP8/FP4 run has (FP8_ONLY_FIELDS), a change to an NCCL dispatcher
    FP8 dispatch, and a change to a recompute or dispatcher that Megatron refuses the 1F1B
    all-to-all overlap beside (`a2a_overlap_refusal`) the overlap, unless `changes` sets
    them."""
    known = [f.name for f in fields(Recipe)]
    for field in changes:
        if field not in known:
            raise ValueError(f"field={field!r}: unknown recipe field; known: {', '.join(known)}")
    if changes.get("precision") == "bf16":
        changes = {**{field: False for field in FP8_ONLY_FIELDS}, **changes}
    if changes.get("dispatcher") in NCCL_DISPATCHERS:
        changes = {"fp8_dispatch": False, **changes}
    if {"recompute_modules", "dispatcher"} & changes.keys() and a2a_overlap_refusal(
            changes.get("recompute_modules", base.recompute_modules),
            changes.get("dispatcher", base.dispatcher)):
        changes = {"a2a_overlap": False, **changes}
    return replace(base, **changes)


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError("expected true/false, 1/0, yes/no or on/off")


def _parse_optional_float(text: str) -> float | None:
    return None if text.strip().lower() == "none" else float(text)


def _parse_modules(text: str) -> tuple[str, ...]:
    lowered = text.strip().lower()
    if lowered in ("", "none"):
        return ()
    return tuple(module.strip() for module in lowered.split("+"))


_PARSERS: dict[object, Callable[[str], object]] = {
    bool: _parse_bool,
    int: int,
    float: float,
    str: str.strip,
    float | None: _parse_optional_float,
    tuple[str, ...]: _parse_modules,
}


def parse_recipe_value(field: str, text: str) -> object:
    """A CLI string ("true", "1.5", "mla_up_proj+mlp", "none") as the type of Recipe.`field`."""
    types = {f.name: f.type for f in fields(Recipe)}
    if field not in types:
        raise ValueError(f"field={field!r}: unknown recipe field; known: {', '.join(types)}")
    kind = types[field]
    try:
        return _PARSERS[kind](text)
    except ValueError as error:
        kind_name = kind.__name__ if isinstance(kind, type) else str(kind)
        raise ValueError(f"{field}={text!r}: cannot parse as {kind_name}: {error}") from None
