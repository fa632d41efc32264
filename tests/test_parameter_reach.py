"""No fitted parameter does nothing, and none moves a step that `touches` says it cannot.

`calibrate` differences each parameter only on the rows `touches` names (simulator.fitting), so
a parameter that moved a row `touches` skips would get a wrong Jacobian column, and one that
moved no row would be fitted to noise. Checked on a spread of small scenarios: a four-layer MoE
on each kind of system, precision, dispatcher and host setting that the parameters read.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from topologies.systems import load_system
from workloads.models import ModelSpec
from workloads.parallelism import ParallelPlan
from workloads.recipes import recipe, recipe_with

from simulator.calibration import DEFAULT_PARAMS, params_value, params_with
from simulator.fitting import DEFAULT_FIT, OPTIONAL_FIT, FitParameter, touches
from simulator.scenario import Scenario, run_scenario

PARAMETERS = (*DEFAULT_FIT, *OPTIONAL_FIT)
EAGER = dict(cuda_graphs="none", a2a_overlap=False, rank_capacity_factor=None,
             fused_grouped_mlp=False)
# (system, recipe changes on mbridge-26.06, plan changes and the NVLink domain the run uses,
# 8 unless given; EP 8 over 16 GPUs): each parameter is read by some.
VARIANTS = {
    "gb300 graphed": ("gb300-nvl72", {}, {}),
    "gb300 fused mlp": ("gb300-nvl72", dict(cuda_graphs="partial", fused_grouped_mlp=True), {}),
    "gb200 fused mlp": ("gb200-nvl72", dict(cuda_graphs="partial", fused_grouped_mlp=True), {}),
    "gb300 nvfp4": ("gb300-nvl72", dict(precision="nvfp4", **EAGER), {}),
    "gb200 nvfp4": ("gb200-nvl72", dict(precision="nvfp4", **EAGER), {}),
    "gb200 eager unbound": ("gb200-nvl72", dict(host_numa_bound=False, permute_fusion=False,
                                                dispatcher="alltoall", dispatcher_sms=0,
                                                **EAGER), {}),
    "gb200 deepep": ("gb200-nvl72", dict(dispatcher="deepep", dispatcher_sms=24, **EAGER),
                     dict(domain_size=16)),
    "gb200 bf16": ("gb200-nvl72", dict(precision="bf16", **EAGER), {}),
    "b300 overlap": ("dgx-b300", dict(EAGER, dispatcher="alltoall", dispatcher_sms=0,
                                      a2a_overlap=True), dict(pp=2, vpp=2)),
    "b200 alltoall across nodes": ("dgx-b200", dict(dispatcher="alltoall", dispatcher_sms=0,
                                                    **EAGER), dict(domain_size=4)),
    "h100 deepep across nodes": ("dgx-h100", dict(precision="fp8-cs", dispatcher="deepep",
                                                  dispatcher_sms=24, **EAGER),
                                 dict(domain_size=4)),
    "h100 deepep in a node": ("dgx-h100", dict(precision="fp8-cs", dispatcher="deepep",
                                               dispatcher_sms=24, **EAGER), {}),
    "h100 bf16": ("dgx-h100", dict(precision="bf16", dispatcher="alltoall", dispatcher_sms=0,
                                   **EAGER), {}),
}


# Four layers (the first dense) of a model the size of Mixtral's: enough work per kernel that
# the GPU, not the host, sets the step of an eager run.
MEDIUM_MOE = ModelSpec(name="medium-moe", hidden_size=4096, num_layers=4, vocab_size=32768,
                       num_attention_heads=32, num_query_groups=8, ffn_hidden_size=14336,
                       num_experts=8, moe_ffn_hidden_size=4096, moe_router_topk=2,
                       moe_shared_expert_intermediate_size=4096, moe_layer_freq=(0, 1, 1, 1))


@pytest.fixture(scope="module")
def variants():
    made = {}
    for name, (system, changes, plan) in VARIANTS.items():
        domain_size = plan.get("domain_size", 8)
        layout = {key: value for key, value in plan.items() if key != "domain_size"}
        made[name] = Scenario(system=load_system(system), model=MEDIUM_MOE,
                              plan=ParallelPlan(num_gpus=16, mbs=1, gbs=32, seq_len=4096,
                                                **{"ep": 8, **layout}),
                              recipe=recipe_with(recipe("mbridge-26.06"), **changes),
                              domain_size=domain_size)
    return made


def _step_s(scenario, params) -> float:
    return run_scenario(replace(scenario, params=params)).metrics.step_time_s


def _moved(parameter: FitParameter, params) -> float:
    """The parameter's value moved by 30 % (down where up would pass its bound)."""
    value = params_value(params, parameter.key)
    up = value * 1.3
    return up if up <= parameter.upper else max(value * 0.7, parameter.lower)


@pytest.fixture(scope="module")
def reach(variants):
    """Per parameter, per variant: (touches says it can move it, it moved the step)."""
    table = {}
    for parameter in PARAMETERS:
        # An optional key is fitted from the value its more general entry gives it.
        base = params_with(DEFAULT_PARAMS, parameter.key, params_value(DEFAULT_PARAMS,
                                                                       parameter.key))
        moved = params_with(base, parameter.key, _moved(parameter, base))
        table[parameter.key] = {
            name: (touches(parameter.key, scenario, base),
                   _step_s(scenario, moved) != _step_s(scenario, base))
            for name, scenario in variants.items()}
    return table


@pytest.mark.parametrize("key", [p.key for p in PARAMETERS])
def test_touches_never_skips_a_scenario_the_parameter_moves(reach, key):
    wrongly_skipped = [name for name, (touched, moved) in reach[key].items()
                       if moved and not touched]
    assert not wrongly_skipped, f"{key} moves {wrongly_skipped}, which touches skips"


@pytest.mark.parametrize("key", [p.key for p in PARAMETERS])
def test_every_fitted_parameter_moves_some_step(reach, key):
    assert any(moved for _, moved in reach[key].values()), f"{key} moves no scenario"
