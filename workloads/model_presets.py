"""Per-model presets of the Megatron-Bridge performance scripts, on top of a release recipe.

A Megatron-Bridge release's recipe in workloads.recipes is its DeepSeek-V3 configuration. The
same container runs other models with their own presets (dispatcher, CUDA graphs, recompute,
activation offload), from `scripts/performance/configs/<family>/*_workload_base_configs.py`
and `*_llm_pretrain.py` in NVIDIA-NeMo/Megatron-Bridge. Script versions are matched to
containers by content (the index keeps commits, not tags): the old per-model layout with
HybridEP and TE-scoped graphs = 25.11 (commits 767255d2, 6b296ac1); the `_V1/_V2` layout =
26.02 (f29a269f, 1e7adfa9, 3dafb00a, 3d277f69); the newest stored versions (01b2977e, 07eea52d,
00919dcf, 0013c9a8) = 26.04 and later. What every preset shares (overrides.py/utils.py of
those versions): a2a overlap off unless set, recompute off unless set, the cuDNN norm fusion
environment removed except for some Llama runs (and, from 26.02, DeepSeek-V3 FP8-MX on
GB200/GB300), router fusion on for Qwen3 and GPT-OSS.

NeMo's performance scripts (`scripts/performance/llm/pretrain_llama3*.py`) are the source of
the one NeMo preset, Llama's TP comm overlap. `model_preset(release, model, gpu, precision)`
returns the recipe changes; a row's explicit flags still override them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

MBRIDGE_25_09 = ("mbridge-25.09",)
MBRIDGE_25_11 = ("mbridge-25.11",)
MBRIDGE_26_06_ON = ("mbridge-26.06", "mbridge-26.06.01", "mbridge-26.08")
MBRIDGE_26 = ("mbridge-26.02", "mbridge-26.04", *MBRIDGE_26_06_ON)
MBRIDGE_26_04_ON = ("mbridge-26.04", *MBRIDGE_26_06_ON)
MBRIDGE = MBRIDGE_25_09 + MBRIDGE_25_11 + MBRIDGE_26
NEMO = ("nemo-24.07", "nemo-25.02", "nemo-25.04", "nemo-25.07")
ANY = ()

QWEN3 = ("qwen3-30b-a3b", "qwen3-235b-a22b")
GPT_OSS = ("gpt-oss-120b",)
LLAMA = ("llama3-8b", "llama3-70b", "llama3.1-405b")
BLACKWELL_NVL = ("gb200", "gb300", "b300")

HYBRIDEP: dict[str, Any] = {"dispatcher": "hybridep", "dispatcher_sms": 32}
ALLTOALL: dict[str, Any] = {"dispatcher": "alltoall", "dispatcher_sms": 0}
# Qwen3's MXFP8 full-iteration stack from 26.06 (see PRESETS).
QWEN3_FULL_ITERATION: dict[str, Any] = {
    "cuda_graphs": "full", "a2a_overlap": True, "fp8_attention": True, "recompute_modules": (),
    "rank_capacity_factor": 1.5, "fused_grouped_mlp": True, **HYBRIDEP}


@dataclass(frozen=True, slots=True)
class Preset:
    """Recipe `changes` for the models, GPUs, releases and precisions named (empty = any)."""

    models: tuple[str, ...]
    gpus: tuple[str, ...]
    releases: tuple[str, ...]
    changes: Mapping[str, Any]
    precisions: tuple[str, ...] = ANY

    def applies(self, release: str, model: str, gpu: str, precision: str) -> bool:
        return all(not allowed or value in allowed for allowed, value in (
            (self.models, model), (self.gpus, gpu), (self.releases, release),
            (self.precisions, precision)))


def _preset(models: tuple[str, ...], gpus: tuple[str, ...], releases: tuple[str, ...],
            precisions: tuple[str, ...] = ANY, /, **changes: Any) -> Preset:
    return Preset(models, gpus, releases, MappingProxyType(changes), precisions)


# Later entries win. Sources: the files named in the module docstring, at those commits.
PRESETS: tuple[Preset, ...] = (
    # Every non-DeepSeek model: none of the DSv3-only settings (a2a overlap, FP8 attention,
    # DSv3 recompute lists, cuDNN norm+quantisation env, expert-rank capacity for full graphs).
    _preset(QWEN3 + GPT_OSS + LLAMA, ANY, MBRIDGE, a2a_overlap=False, fp8_attention=False,
            recompute_modules=(), cuda_graphs="none", norm_quant_fusion=False,
            rank_capacity_factor=None, shared_expert_overlap=False,
            fused_grouped_mlp=False, **ALLTOALL),
    # DeepSeek-V3 in 25.11 (workload_base_configs.py @d19cb73): GB200 recomputes the MLA
    # up-projections; B200 runs the NCCL all-to-all eagerly.
    _preset(("deepseek-v3",), ("gb200",), MBRIDGE_25_11, recompute_modules=("mla_up_proj",)),
    _preset(("deepseek-v3",), ("b200",), MBRIDGE_25_11, recompute_modules=("mla_up_proj",),
            cuda_graphs="none", shared_expert_overlap=True, **ALLTOALL),
    # DeepSeek-V3 on x86-hosted nodes in 26.x: perf_plugins.py keeps the cuDNN norm env
    # (NVTE_NORM_FWD/BWD_USE_CUDNN) for DeepSeek only on GB200/GB300 with FP8-MX.
    _preset(("deepseek-v3",), ("b200", "b300", "h100"), MBRIDGE_26, norm_quant_fusion=False),
    # DeepSeek-V3 on B200/B300 nodes in 26.06+: TE-scoped graphs (v0.5.0 B300_V2, hw §3); the
    # full-iteration stack with the TE op fuser is the NVL72 configs' (hw §3 rows 1-2).
    _preset(("deepseek-v3",), ("b200", "b300"), MBRIDGE_26_06_ON,
            fused_grouped_mlp=False),
    # Qwen3: TE-scoped graphs of router and preprocess; HybridEP (32 SMs) on NVL72 and B300
    # from 25.11 on; alltoall with A2A overlap on H100; 25.09 YAML: graphs on GB200 only.
    _preset(QWEN3, ("gb200",), MBRIDGE_25_09, cuda_graphs="full"),
    _preset(QWEN3, BLACKWELL_NVL, MBRIDGE_25_11 + MBRIDGE_26, cuda_graphs="partial",
            **HYBRIDEP),
    _preset(QWEN3, ("b200",), MBRIDGE_25_11, a2a_overlap=True),
    _preset(("qwen3-30b-a3b",), ("b200",), MBRIDGE_26_04_ON, cuda_graphs="partial",
            **HYBRIDEP),
    _preset(("qwen3-235b-a22b",), ("b300",), MBRIDGE_26_04_ON, cuda_graphs="none",
            **ALLTOALL),
    _preset(QWEN3, ("h100",), MBRIDGE_25_11 + MBRIDGE_26, a2a_overlap=True),
    # Qwen3 MXFP8 on GB200/GB300 from 26.06 ("Full-Iter CUDA Graphs for 26.06", Megatron-Bridge
    # PR 4249; qwen3_llm_pretrain.py @05c0c90f set_full_iter_cg_configs; 26.08 perf_recipes
    # qwen/gb200/qwen3_moe.py @03573ca6): one graph per iteration with paged stash and
    # expert-rank capacity factor 1.5, A2A overlap with delayed wgrad, FP8 attention, the TE
    # op fuser's fused grouped MLP, HybridEP.
    _preset(QWEN3, ("gb200", "gb300"), MBRIDGE_26_06_ON, ("mxfp8",), **QWEN3_FULL_ITERATION),
    # Qwen3-30B MXFP8 on 8 B300 in 26.06 too: the 26.06.00 container's official recipe resolves
    # to "EP=8, MBS=8, GBS=512, sequence length 4096, HybridEP, and full-iteration CUDA graphs"
    # (a maintainer in Megatron-Bridge issue 4587); qwen3_llm_pretrain.py @05c0c90f gives the
    # 30B B300 builder the full-iteration MoE settings. The rest of the stack (A2A overlap, FP8
    # attention, fused MLP) is taken as GB300's: PR 4249 names three platforms for 26.06, and
    # the later helper gives B300 all of it (PR 5356). 235B on B300 came later (PR 4606).
    _preset(("qwen3-30b-a3b",), ("b300",), MBRIDGE_26_06_ON, ("mxfp8",), **QWEN3_FULL_ITERATION),
    # GPT-OSS: alltoall; graphs (TE-scoped) on GB300/B300, recompute of layernorm and MoE
    # activation elsewhere; the 26.06+ MXFP8 V2 presets on GB200/GB300: HybridEP, one graph
    # for the whole iteration (expert-rank capacity 1.5), A2A overlap, FP8 attention, the fused
    # grouped MLP (gpt_oss workload configs @07eea52d, PR 4173; 26.08 perf_recipes
    # gpt_oss/gb200 @0ae56a74).
    _preset(GPT_OSS, ("gb300", "b300"), MBRIDGE_25_11 + MBRIDGE_26, cuda_graphs="partial"),
    _preset(GPT_OSS, ("gb200", "b200", "h100"), MBRIDGE_25_11 + MBRIDGE_26,
            recompute_modules=("layernorm", "moe_act")),
    _preset(GPT_OSS, ("gb200", "gb300"), MBRIDGE_26_06_ON, ("mxfp8",),
            cuda_graphs="full", a2a_overlap=True, fp8_attention=True, recompute_modules=(),
            rank_capacity_factor=1.5, fused_grouped_mlp=True, **HYBRIDEP),
    # Llama 3: TE's userbuffers overlap of the sequence-parallel TP collectives, except in
    # NVFP4 (llama3_llm_pretrain.py and llama31_llm_pretrain.py @0013c9a8: the recipes'
    # CommOverlapConfig(tp_comm_overlap=True), then "tp_comm_overlap = False if precision ==
    # 'nvfp4'"; NeMo's scripts/performance/llm/pretrain_llama3*.py give 70B and 405B their
    # userbuffers configs and require the overlap callback, "Required for performance").
    _preset(LLAMA, ANY, MBRIDGE + NEMO, tp_comm_overlap=True),
    _preset(LLAMA, ANY, MBRIDGE + NEMO, ("nvfp4",), tp_comm_overlap=False),
    # Llama 3: 70B FSDP runs offload activations of some layers to the host (cpu_offloading_
    # num_layers: GB200 FP8-CS 40, BF16 20; GB300 FP8-CS 20, BF16 30; B200 FP8-CS 5) and keep the
    # cuDNN LayerNorm env on GB200/GB300 (70B BF16/FP8-CS, 405B FP8-CS).
    _preset(("llama3-70b",), ("gb200",), MBRIDGE, ("fp8-cs",), activation_offload_layers=40,
            norm_quant_fusion=True),
    _preset(("llama3-70b",), ("gb200",), MBRIDGE, ("bf16",), activation_offload_layers=20),
    _preset(("llama3-70b",), ("gb300",), MBRIDGE, ("fp8-cs",), activation_offload_layers=20,
            norm_quant_fusion=True),
    _preset(("llama3-70b",), ("gb300",), MBRIDGE, ("bf16",), activation_offload_layers=30),
    _preset(("llama3-70b",), ("b200",), MBRIDGE, ("fp8-cs",), activation_offload_layers=5),
    _preset(("llama3.1-405b",), ("gb200", "gb300"), MBRIDGE, ("fp8-cs",),
            norm_quant_fusion=True),
    # 405B FP8-CS on GB200 ran FSDP with 95 offloaded layers in the 25.x scripts (0fa501ac);
    # the 26.x 256-GPU (V2) presets drop FSDP and offload.
    _preset(("llama3.1-405b",), ("gb200",), MBRIDGE_25_09 + MBRIDGE_25_11, ("fp8-cs",),
            activation_offload_layers=95),
)


def model_preset(release: str, model: str, gpu: str, precision: str) -> dict[str, Any]:
    """The recipe changes the performance scripts of `release` make for `model` on `gpu`."""
    changes: dict[str, Any] = {}
    for preset in PRESETS:
        if preset.applies(release, model, gpu, precision):
            changes.update(preset.changes)
    return changes
