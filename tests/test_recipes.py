"""Software recipes: catalog, validation, overrides and CLI value parsing."""

import pytest

from workloads.recipes import RECIPES, Recipe, parse_recipe_value, recipe, recipe_with


def test_catalog_holds_the_dsv3_gb300_releases() -> None:
    assert {"mbridge-25.11", "mbridge-26.02", "mbridge-26.04", "mbridge-26.06"} <= set(RECIPES)
    for name, entry in RECIPES.items():
        assert entry.name == name


def test_mbridge_2606_is_the_1648_recipe() -> None:
    # deepseek-v3-and-flops.md §4.13.
    r = recipe("mbridge-26.06")
    assert (r.precision, r.dispatcher, r.dispatcher_sms) == ("mxfp8", "hybridep", 32)
    assert r.cuda_graphs == "full"
    assert r.a2a_overlap and not r.shared_expert_overlap
    assert r.overlap_grad_reduce and r.overlap_param_gather
    assert r.recompute_modules == () and r.fp8_attention
    assert r.rank_capacity_factor == 1.5 and r.expert_capacity_factor is None
    assert (r.grad_reduce_dtype_bytes, r.optimizer_state_bytes_per_param) == (2, 8.0)
    assert not r.nccl_nvls and not r.fp8_param_gather


def test_mbridge_2602_and_2604_match_the_data_table() -> None:
    # data/README.md: 26.02 - 26.04.01 gb300 = mla_up_proj, hybridep, none, a2a 0, fp8 attn 0.
    for name in ("mbridge-26.02", "mbridge-26.04"):
        r = recipe(name)
        assert r.recompute_modules == ("mla_up_proj",)
        assert (r.dispatcher, r.cuda_graphs) == ("hybridep", "none")
        assert not r.a2a_overlap and not r.fp8_attention and r.rank_capacity_factor is None


def test_unknown_recipe_lists_known_names() -> None:
    with pytest.raises(ValueError, match="recipe=.nemo-99.*known: .*mbridge-25.11, mbridge-26.02"):
        recipe("nemo-99")


@pytest.mark.parametrize(("changes", "field"), [
    (dict(precision="fp9"), "precision='fp9'"),
    (dict(dispatcher="nccl"), "dispatcher='nccl'"),
    (dict(cuda_graphs="some"), "cuda_graphs='some'"),
    (dict(dispatcher="alltoall"), "dispatcher_sms=32"),        # NCCL dispatcher holds no SMs
    (dict(recompute_modules=("attn",)), "recompute_modules"),
    (dict(recompute_modules=("full", "mlp")), "recompute_modules"),
    (dict(shared_expert_overlap=True), "shared_expert_overlap"),  # a2a overlap is on
    (dict(recompute_modules=("moe",), a2a_overlap=True), "recompute_modules"),  # forbidden
    (dict(dispatcher="allgather", dispatcher_sms=0, a2a_overlap=True), "allgather"),
    (dict(precision="bf16", fp8_attention=True), "fp8_attention"),
    (dict(expert_capacity_factor=0.0), "expert_capacity_factor"),
    (dict(grad_reduce_dtype_bytes=1), "grad_reduce_dtype_bytes"),
    (dict(colour="red"), "field='colour'"),
])
def test_bad_values_raise_one_line_errors(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field) as error:
        recipe_with(recipe("mbridge-26.06"), **changes)
    assert "\n" not in str(error.value)


def test_a_change_to_bf16_turns_off_the_fp8_only_switches_it_does_not_set() -> None:
    fp8 = recipe_with(recipe("mbridge-26.06"), fp8_param_gather=True)
    assert fp8.fp8_attention and fp8.fp8_param_gather
    bf16 = recipe_with(fp8, precision="bf16")
    assert not bf16.fp8_attention and not bf16.fp8_param_gather
    assert recipe_with(fp8, precision="fp8-cs").fp8_attention


@pytest.mark.parametrize("changes", [
    dict(recompute_modules=("full",)), dict(recompute_modules=("mlp", "moe")),
    dict(dispatcher="allgather", dispatcher_sms=0),
])
def test_a_change_that_megatron_refuses_the_a2a_overlap_beside_turns_it_off(changes) -> None:
    """Megatron refuses the 1F1B all-to-all overlap beside full or MoE recompute and the
    all-gather dispatcher: a change to those turns the overlap off unless it sets it too."""
    base = recipe("mbridge-26.06")
    assert base.a2a_overlap
    assert not recipe_with(base, **changes).a2a_overlap
    assert recipe_with(base, recompute_modules=("mlp",)).a2a_overlap


def test_recipe_with_changes_one_feature() -> None:
    base = recipe("mbridge-26.06")
    nccl = recipe_with(base, dispatcher="alltoall", dispatcher_sms=0)
    assert nccl.dispatcher == "alltoall" and nccl.cuda_graphs == base.cuda_graphs
    assert base.dispatcher == "hybridep"


def test_defaults_are_megatron_defaults() -> None:
    plain = Recipe(name="megatron")
    assert (plain.precision, plain.dispatcher, plain.cuda_graphs) == ("bf16", "alltoall", "none")
    assert plain.optimizer_state_bytes_per_param == 12.0 and plain.grad_reduce_dtype_bytes == 4


@pytest.mark.parametrize(("field", "text", "value"), [
    ("a2a_overlap", "true", True),
    ("a2a_overlap", "0", False),
    ("dispatcher_sms", "24", 24),
    ("expert_capacity_factor", "1.5", 1.5),
    ("expert_capacity_factor", "none", None),
    ("recompute_modules", "mla_up_proj+mlp", ("mla_up_proj", "mlp")),
    ("recompute_modules", "none", ()),
    ("recompute_modules", "full", ("full",)),
    ("precision", "mxfp8", "mxfp8"),
    ("optimizer_state_bytes_per_param", "8", 8.0),
])
def test_parse_recipe_value(field: str, text: str, value: object) -> None:
    parsed = parse_recipe_value(field, text)
    assert parsed == value and type(parsed) is type(value)
    base = Recipe(name="x", precision="mxfp8", dispatcher="hybridep", dispatcher_sms=32)
    recipe_with(base, **{field: parsed})


@pytest.mark.parametrize(("field", "text", "message"), [
    ("a2a_overlap", "maybe", "a2a_overlap='maybe'"),
    ("dispatcher_sms", "1.5", "dispatcher_sms='1.5'"),
    ("expert_capacity_factor", "big", "expert_capacity_factor='big'"),
    ("colour", "red", "field='colour'"),
])
def test_parse_recipe_value_errors(field: str, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_recipe_value(field, text)
