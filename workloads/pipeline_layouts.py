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
    # Megatron-Bridge's DeepSeek-V3 recipe table by (PP, VP), the same for every (PP, VP) of
    # one stage count: 4 stages [E+16t], 2 x [16t], [13t+m+L]; 8 stages [E+8t], 6 x [8t],
    # [5t+m+L]; 16 stages [E+4t], 14 x [4t], [t+m+L]; without MTP the last stage is the same
    # less its `m` (NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/recipes/deepseek/
    # deepseek_v3.py @05d003fb, `layout_map`). The GB300 PP2 VP8 and B200 PP8 VP2 perf configs
    # of v0.5.0 pass the 16-stage one explicitly (deepseek-v3-and-flops.md §4.12;
    # hardware-and-recipes.md §3).
    ("deepseek-v3", 4, 1): "Et*16|t*16|t*16|t*13mL",
    ("deepseek-v3", 4, 0): "Et*16|t*16|t*16|t*13L",
    ("deepseek-v3", 8, 1): "Et*8|(t*8|)*6t*5mL",
    ("deepseek-v3", 8, 0): "Et*8|(t*8|)*6t*5L",
    ("deepseek-v3", 16, 1): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", 16, 0): "Et*4|(t*4|)*14tL",
    # Megatron-LM DeepSeek-V3 GB200 guide, PP8 VPP4 without MTP (hardware-and-recipes.md §3).
    ("deepseek-v3", 32, 0): "Et|(tt|)*30L",
    # Megatron-Bridge v0.2 H100 recipe, PP8 VPP4 with MTP (hardware-and-recipes.md §3).
    ("deepseek-v3", 32, 1): "Et|(tt|)*30mL",
}


def known_layout(model: ModelSpec, pp: int, vpp: int) -> str | None:
    """The published layout for this model and pipeline shape, if there is one."""
    return KNOWN_LAYOUTS.get((model.name, pp * vpp, model.mtp_layers))
