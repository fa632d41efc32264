"""Context parallelism: core attention as steps around the CP ring (blocks.RING_STEP_KERNELS),
each waiting for the keys and values the previous exchange brought."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.overrides import apply_settings
from simulator.scenario import run_scenario
from workloads import blocks as blk
from workloads.graph import Lane, Op
from workloads.models import ModelSpec
from workloads.parallelism import ParallelPlan
from workloads.recipes import recipe, recipe_with
from workloads.step import StepSpec, build_step

EAGER = recipe_with(recipe("mbridge-26.02"), cuda_graphs="none")


def _graph(model: ModelSpec, cp: int, tp: int = 1, recipe_=EAGER):
    plan = ParallelPlan(num_gpus=16, mbs=1, gbs=32, seq_len=1024, tp=tp, cp=cp, pp=1, ep=8)
    return build_step(StepSpec(model=model, plan=plan, recipe=recipe_)), plan


def _layer_tasks(graph, prefix: str):
    return [t for t in graph.tasks if t.name.startswith(prefix)]


@pytest.mark.parametrize("cp", [2, 4])
def test_each_attention_runs_cp_steps_beside_the_rings_exchanges(small_moe, cp):
    """Forward: cp steps and cp - 1 exchanges of K and V; backward: cp steps and cp
    exchanges, K and V, then K, V, dK, dV, then dK, dV; the steps together do the layer's
    core attention."""
    graph, plan = _graph(small_moe, cp)
    kv = blk.ring_kv_bytes(small_moe, plan, EAGER)
    core = blk.attention_blocks(small_moe, plan, EAGER)["core_attn"]
    for phase, exchanges in (("F", (1,) * (cp - 1)), ("B", (1,) + (2,) * (cp - 2) + (1,))):
        tasks = _layer_tasks(graph, f"0/{phase}0/")
        ring = [t for t in tasks if "/1t.core_attn.x" in t.name]
        steps = [t for t in tasks if "/1t.core_attn.s" in t.name]
        assert [t.lane for t in ring] == [Lane.CP] * len(exchanges)
        assert [t.collective.op for t in ring] == [Op.SEND_RECV] * len(exchanges)
        assert [t.collective.bytes_per_rank / kv for t in ring] == pytest.approx(exchanges)
        work = core.forward if phase == "F" else core.backward
        assert len(steps) == cp
        assert sum(t.work.flops for t in steps) == pytest.approx(work.flops)


def test_a_step_waits_for_the_exchange_before_it_and_backward_sends_the_steps_gradients(
        small_moe):
    graph, _ = _graph(small_moe, 4)
    by_name = {t.name: t for t in graph.tasks}

    def deps(name: str) -> set[str]:
        return {graph.tasks[d].name for d in by_name[name].deps}

    for phase in ("F", "B"):
        core = next(t.name for t in graph.tasks
                    if t.name.startswith(f"0/{phase}0/") and t.name.endswith(".core_attn.s0"))
        base = core[:-len(".s0")]
        for i in (1, 2, 3):
            assert f"{base}.x{i - 1}" in deps(f"{base}.s{i}")
        if phase == "B":
            assert f"{base}.s1" in deps(f"{base}.x2")
            assert {f"{base}.s3", f"{base}.x3"} <= deps(f"{base}.merge")
        else:
            assert f"{base}.s1" not in deps(f"{base}.x2")
            assert deps(f"{base}.merge") == {f"{base}.s3"}


def test_without_context_parallelism_there_is_no_ring(small_moe):
    graph, _ = _graph(small_moe, 1)
    assert not any(t.lane is Lane.CP for t in graph.tasks)
    assert not any(".core_attn.s" in t.name for t in graph.tasks)


def test_recomputed_core_attention_runs_the_forward_ring_again(small_moe):
    recomputing = recipe_with(EAGER, recompute_modules=("core_attn",))
    graph, _ = _graph(small_moe, 2, recipe_=recomputing)
    backward = _layer_tasks(graph, "0/B0/")
    assert any(".core_attn.recompute.x0" in t.name and t.lane is Lane.CP for t in backward)
    assert any(".core_attn.recompute.s1" in t.name and t.category == "recompute"
               for t in backward)


def test_ring_messages_carry_one_gpus_keys_and_values(small_moe):
    """GQA: one key and one value per query group held (at least one per TP rank); FP8
    attention halves the message."""
    gqa = replace(small_moe, num_query_groups=2)
    plan = ParallelPlan(num_gpus=16, mbs=1, gbs=32, seq_len=1024, tp=4, cp=2, pp=1, ep=8)
    head_dim = gqa.head_dim
    assert blk.ring_kv_bytes(gqa, plan, EAGER) == 512 * 1 * 2 * head_dim * 2
    fp8 = recipe_with(EAGER, fp8_attention=True)
    assert blk.ring_kv_bytes(gqa, plan, fp8) == blk.ring_kv_bytes(gqa, plan, EAGER) / 2


def test_a_ring_across_nvlink_domains_is_exposed_when_the_network_is_slow(make_scenario):
    """TP8 CP2 on two domains of 8: each CP pair crosses the network, so a slower NIC shows as
    exposed CP time; the same ring inside one domain (TP1 CP2) stays hidden over NVLink."""
    def exposed(nic_gbps: float, tp: int) -> tuple[float, float]:
        scenario = apply_settings(make_scenario(tp=tp, cp=2, ep=8, recipe_=EAGER),
                                  [f"nic_gbps={nic_gbps}", "seq=8192"])
        metrics = run_scenario(scenario).metrics
        return metrics.breakdown_s.get("exposed_cp", 0.0), metrics.step_time_s

    fast, slow = exposed(800.0, 8), exposed(1.0, 8)
    assert slow[0] > fast[0] and slow[1] > fast[1]
    assert exposed(1.0, 1)[0] == 0.0


def test_folded_and_unfolded_rings_take_the_same_time(make_scenario):
    scenario = apply_settings(make_scenario(tp=8, cp=2, ep=8, recipe_=EAGER),
                              ["nic_gbps=5", "seq=8192"])
    folded, unfolded = (run_scenario(scenario, folded=f).metrics for f in (True, False))
    assert folded.breakdown_s["exposed_cp"] > 0
    assert folded.step_time_s == pytest.approx(unfolded.step_time_s, rel=1e-9)
