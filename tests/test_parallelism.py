"""Parallel plans, their validation, rank groups and pipeline layouts."""

import pytest

from workloads import parallelism as par
from workloads.layout import default_layout, parse_layout, validate_layout
from workloads.models import MODELS

DSV3 = MODELS["deepseek-v3"]
LLAMA3_8B = MODELS["llama3-8b"]
DSV3_LAYOUT = "Et*4|(t*4|)*14tmL"


def dsv3_2606(**changes: object) -> par.ParallelPlan:
    """DeepSeek-V3 on 256 GB300, Megatron-Bridge 26.06 (deepseek-v3-and-flops.md §4.13)."""
    fields: dict[str, object] = dict(num_gpus=256, tp=1, pp=2, vpp=8, ep=32, mbs=1, gbs=4096,
                                     seq_len=4096, layout=DSV3_LAYOUT)
    fields.update(changes)
    return par.ParallelPlan(**fields)  # type: ignore[arg-type]


def test_dsv3_2606_plan_is_valid() -> None:
    plan = dsv3_2606()
    par.validate_plan(plan, DSV3)
    assert (plan.dp, plan.expert_dp, plan.num_microbatches) == (128, 4, 32)
    assert plan.tokens_per_microbatch == 4096


@pytest.mark.parametrize(("changes", "field"), [
    (dict(ep=48, num_gpus=288, gbs=4608), "ep=48"),           # 256 experts not divisible by 48
    (dict(tp=3), "num_gpus=256"),                             # tp*cp*pp = 6 does not divide 256
    (dict(gbs=4000), "gbs=4000"),                             # not a multiple of mbs*dp = 128
    (dict(pp=1, vpp=2, layout=None), "vpp=2"),                # vpp needs pp > 1
    (dict(layout="Et*4|(t*4|)*14mL"), "layout"),              # 60 decoder layers, not 61
    (dict(layout="Et*4|(t*4|)*13tmL"), "layout"),             # 15 stages, not pp*vpp = 16
    (dict(cp=2, seq_len=4095), "seq_len=4095"),               # 2*cp must divide seq_len
    (dict(tp=0), "tp=0"),
    (dict(dp_sharding="zero-2"), "dp_sharding"),
])
def test_invalid_plans_name_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field) as error:
        par.validate_plan(dsv3_2606(**changes), DSV3)
    assert "\n" not in str(error.value)


def test_dense_model_rules() -> None:
    plan = par.ParallelPlan(num_gpus=8, tp=2, pp=2, gbs=16, seq_len=8192)
    par.validate_plan(plan, LLAMA3_8B)
    with pytest.raises(ValueError, match="ep=2"):
        par.validate_plan(par.ParallelPlan(num_gpus=8, ep=2, gbs=16, seq_len=8192), LLAMA3_8B)
    with pytest.raises(ValueError, match="tp=16"):  # 8 query groups
        par.validate_plan(par.ParallelPlan(num_gpus=16, tp=16, gbs=16, seq_len=8192), LLAMA3_8B)
    with pytest.raises(ValueError, match="gbs=1"):  # 1 microbatch < pp = 2
        par.ParallelPlan(num_gpus=2, pp=2, gbs=1, seq_len=8192)


def test_rank_coordinates_and_groups() -> None:
    plan = dsv3_2606()
    assert par.ep_group(plan, 0) == tuple(range(32))
    assert par.pp_group(plan, 0) == (0, 128)
    assert par.tp_group(plan, 7) == (7,)
    assert par.dp_group(plan, 0) == tuple(range(128))
    assert par.expert_dp_group(plan, 0) == (0, 32, 64, 96)
    assert par.attention_coords(plan, 200) == (0, 0, 72, 1)
    assert par.expert_coords(plan, 200) == (0, 8, 2, 1)
    assert par.stage_of(plan, 127) == 0 and par.stage_of(plan, 128) == 1
    with pytest.raises(ValueError, match="rank=256"):
        par.tp_group(plan, 256)


def test_tp_fastest_then_cp_then_dp() -> None:
    plan = par.ParallelPlan(num_gpus=32, tp=2, cp=2, pp=2, ep=4, etp=2, gbs=8, seq_len=8)
    assert par.tp_group(plan, 5) == (4, 5)
    assert par.cp_group(plan, 5) == (5, 7)
    assert par.dp_group(plan, 5) == (1, 5, 9, 13)
    assert par.etp_group(plan, 5) == (4, 5)
    assert par.ep_group(plan, 5) == (1, 3, 5, 7)
    assert par.expert_dp_group(plan, 5) == (5, 13)
    assert par.pp_group(plan, 5) == (5, 21)


@pytest.mark.parametrize("kind", par.GROUP_KINDS)
def test_every_rank_in_exactly_one_group_of_each_kind(kind: str) -> None:
    plan = par.ParallelPlan(num_gpus=32, tp=2, cp=2, pp=2, ep=4, etp=2, gbs=8, seq_len=8)
    stages = [0] if kind == "pp" else range(plan.pp)
    groups = [g for stage in stages for g in par.all_groups(plan, kind, stage)]
    members = sorted(rank for group in groups for rank in group)
    assert members == list(range(plan.num_gpus))
    assert groups == sorted(groups)
    for group in groups:
        assert all(par.group_of(plan, kind, rank) == group for rank in group)


def test_all_groups_of_dsv3_stage() -> None:
    plan = dsv3_2606()
    assert len(par.all_groups(plan, "ep", 1)) == 4
    assert all(len(g) == 128 for g in par.all_groups(plan, "dp", 0))
    assert len(par.all_groups(plan, "pp", 0)) == 128
    with pytest.raises(ValueError, match="kind='xp'"):
        par.all_groups(plan, "xp", 0)


def test_parse_dsv3_layouts() -> None:
    stages = parse_layout(DSV3_LAYOUT)
    assert len(stages) == 16
    assert stages[0] == ("E", "t", "t", "t", "t")
    assert stages[1:15] == (("t",) * 4,) * 14
    assert stages[15] == ("t", "m", "L")
    gb200 = parse_layout("Et|(tt|)*30L")
    assert len(gb200) == 32 and gb200[-1] == ("L",)
    assert parse_layout("Et*3|(tt|)*29, m|L")[-2:] == (("m",), ("L",))
    assert parse_layout("E||tL") == (("E",), (), ("t", "L"))


@pytest.mark.parametrize(("text", "message"), [
    ("Etx|L", "unknown symbol 'x' at position 2"),
    ("E(tt|*2L", "unbalanced '\\(' at position 1"),
    ("Ett)|L", "unbalanced '\\)' at position 3"),
    ("Et*|L", "bad repeat count '' at position 3"),
    ("Et*0|L", "bad repeat count '0'"),
])
def test_layout_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        parse_layout(text)
    assert f"layout={text!r}" in str(error.value)


def test_default_layout() -> None:
    stages = default_layout(DSV3, 2, 8)
    validate_layout(stages, DSV3, 2, 8)
    assert [s.count("t") for s in stages] == [3] + [4] * 13 + [3, 3]
    assert stages[0][0] == "E" and stages[-1][-2:] == ("m", "L")
    assert default_layout(LLAMA3_8B, 1, 1) == (("E",) + ("t",) * 32 + ("L",),)


def test_validate_layout_rules() -> None:
    with pytest.raises(ValueError, match="'m' symbols"):
        validate_layout(parse_layout("Et*61L"), DSV3, 1, 1)
    with pytest.raises(ValueError, match="start with 'E'"):
        validate_layout(parse_layout("t*61mEL"), DSV3, 1, 1)
    with pytest.raises(ValueError, match="before the first 'm'"):
        validate_layout(parse_layout("Et*30m|t*31L"), DSV3, 2, 1)
    with pytest.raises(ValueError, match="MTP stage 1 must be in the last model chunk"):
        validate_layout(parse_layout("Et*20|t*41m||L"), DSV3, 2, 2)


@pytest.mark.parametrize("pp, vpp", [(4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4), (2, 8)])
@pytest.mark.parametrize("mtp", [0, 1])
def test_dsv3_without_a_layout_gets_megatron_bridges_table(pp: int, vpp: int, mtp: int) -> None:
    model = DSV3.with_mtp(mtp)
    plan = par.ParallelPlan(num_gpus=pp * 32, pp=pp, vpp=vpp, ep=32, gbs=pp * 32,
                            seq_len=4096)
    stages = par.pipeline_layout(plan, model)
    validate_layout(stages, model, pp, vpp)
    layers = [stage.count("t") for stage in stages]
    per_stage = 64 // (pp * vpp)   # Bridge's table: E and MTP+L each stand for layers
    assert layers[1:-1] == [per_stage] * (pp * vpp - 2)
    assert stages[0][0] == "E" and layers[0] == per_stage
    assert layers[-1] == per_stage - 3 and stages[-1][-1] == "L"
    assert stages[-1].count("m") == mtp
