"""Pipeline layouts that the published recipes use, by model and number of virtual stages.

Megatron-Bridge's DeepSeek-V3 recipes pass explicit `--pipeline-model-parallel-layout`
strings instead of an even split: the first stage also holds the embedding, the last the MTP
layer and the loss, so they get fewer decoder layers. A plan without a layout uses the one
listed here for its model and pp * vpp (and MTP depth), else Megatron's even split.
"""

from __future__ import annotations

from workloads.models import ModelSpec

# (model, pp * vpp, mtp_layers) -> layout string.
KNOWN_LAYOUTS: dict[tuple[str, int, int], str] = {
    # Megatron-Bridge v0.5.0 DSv3 GB300 (PP2 VP8) and B200 (PP8 VP2) perf configs, and the
    # built-in (PP, VP) table ((16, 1): [E+4t], 14 x [4t], [t+m+L]) that the GB200 PP4 VP4
    # recipes use (deepseek-v3-and-flops.md §4.12; hardware-and-recipes.md §3).
    ("deepseek-v3", 16, 1): "Et*4|(t*4|)*14tmL",
    # Megatron-LM DeepSeek-V3 GB200 guide, PP8 VPP4 without MTP (hardware-and-recipes.md §3).
    ("deepseek-v3", 32, 0): "Et|(tt|)*30L",
    # Megatron-Bridge v0.2 H100 recipe, PP8 VPP4 with MTP (hardware-and-recipes.md §3).
    ("deepseek-v3", 32, 1): "Et|(tt|)*30mL",
}


def known_layout(model: ModelSpec, pp: int, vpp: int) -> str | None:
    """The published layout for this model and pipeline shape, if there is one."""
    return KNOWN_LAYOUTS.get((model.name, pp * vpp, model.mtp_layers))
