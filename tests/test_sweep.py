"""Sweeps: the sweep file, the hardware keys it reaches, local and Dask runs giving the same
CSV, resuming after an interruption, failing points, the command line, and the charts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import BarContainer

import simulator.sweep as sweep_module
from reports.sweep_charts import (breakdown_figure, heatmap_figure, lines_figure, points_figure,
                                  sweep_figures, throughput_figure, write_sweep_charts)
from simulator.cli import main
from simulator.overrides import apply_setting, apply_settings
from simulator.scenario import default_scenario, scenario_topology
from simulator.sweep import CSV_NAME, run_sweep
from simulator.sweep_spec import base_scenario, load_sweep, scenario_with
from topologies.builders import build_topology
from topologies.hardware import GBIT, switch_spec
from topologies.systems import system_scale_out_switch
from workloads.recipes import recipe

SWEEPS = Path(__file__).parent / "data" / "sweeps"
NIC_SPEED = SWEEPS / "nic-speed.yaml"
WITH_FAILURE = SWEEPS / "points-with-failure.yaml"
TWO_KEYS = SWEEPS / "nic-nvlink.yaml"
EXAMPLES = Path(__file__).parent.parent / "examples" / "sweeps"


def _write(tmp_path: Path, text: str, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> tuple[pd.DataFrame, Path]:
    """nic-speed.yaml on one local process: (table, out folder)."""
    out = tmp_path_factory.mktemp("local")
    return run_sweep(load_sweep(NIC_SPEED), out_dir=out, jobs=1), out


# --- the sweep file -------------------------------------------------------------------------

def test_a_grid_is_every_combination_first_key_slowest(tmp_path):
    path = _write(tmp_path, "grid:\n  nic_gbps: [400, 800]\n  fabric: [ib, ethernet]\n")
    spec = load_sweep(path)
    assert spec.keys == ("nic_gbps", "fabric")
    assert [dict(p.settings) for p in spec.points] == [
        {"nic_gbps": 400, "fabric": "ib"}, {"nic_gbps": 400, "fabric": "ethernet"},
        {"nic_gbps": 800, "fabric": "ib"}, {"nic_gbps": 800, "fabric": "ethernet"}]


def test_point_ids_are_stable_distinct_and_follow_the_base(tmp_path):
    first, again = load_sweep(NIC_SPEED), load_sweep(NIC_SPEED)
    ids = [p.point_id for p in first.points]
    assert ids == [p.point_id for p in again.points] and len(set(ids)) == len(ids)
    other_base = NIC_SPEED.read_text().replace("seq: 2048", "seq: 4096")
    changed = load_sweep(_write(tmp_path, other_base))
    assert not set(ids) & {p.point_id for p in changed.points}


def test_a_points_list_keeps_its_points_and_the_union_of_keys():
    spec = load_sweep(WITH_FAILURE)
    assert spec.keys == ("failed_trays", "fabric", "tp")
    assert [dict(p.settings) for p in spec.points][2:] == [{"fabric": "ethernet"}, {"tp": 3}]


def test_the_base_reaches_the_scenario():
    scenario = base_scenario(load_sweep(NIC_SPEED))
    plan = scenario.plan
    assert scenario.model.name == "qwen3-30b-a3b" and scenario.domain_size == 8
    assert (plan.num_gpus, plan.pp, plan.vpp, plan.ep, plan.gbs, plan.seq_len) == \
        (16, 1, 1, 8, 32, 2048)
    assert plan.layout is None


def test_a_system_point_keeps_the_domain_size_while_it_fits(make_scenario):
    base = make_scenario(ep=8, domain_size=16)
    assert scenario_with(base, (("system", "gb200-nvl72"),), ".").domain_size == 16
    hopper = scenario_with(base, (("system", "dgx-h100"),), ".")
    assert hopper.system.name == "dgx-h100" and hopper.domain_size == 8
    qwen = scenario_with(make_scenario(ep=8, pp=2, layout="Et|tL"),
                         (("model", "qwen3-30b-a3b"),), ".")
    assert qwen.model.name == "qwen3-30b-a3b" and qwen.plan.layout is None
    llama = scenario_with(base, (("model", "llama3-8b"),), ".")
    assert (llama.plan.ep, llama.plan.etp) == (1, 1)


def test_a_hopper_point_runs_a_block_scaled_recipe_in_fp8_unless_it_sets_the_precision(
        make_scenario):
    base = make_scenario(ep=8, recipe_=recipe("mbridge-26.06"))
    assert base.recipe.precision == "mxfp8"
    assert scenario_with(base, (("system", "dgx-h100"),), ".").recipe.precision == "fp8-cs"
    assert scenario_with(base, (("system", "gb200-nvl72"),), ".").recipe.precision == "mxfp8"
    chosen = scenario_with(base, (("system", "dgx-h100"), ("precision", "bf16")), ".")
    assert chosen.recipe.precision == "bf16"


@pytest.mark.parametrize("text, words", [
    ("grid: {nic_speed: [1]}\n", ["grid", "'nic_speed'", "known are", "nic_gbps"]),
    ("grid: {nic_gbps: 400}\n", ["grid.nic_gbps", "non-empty list"]),
    ("grid: {nic_gbps: [[1]]}\n", ["grid.nic_gbps", "string, a number or true/false"]),
    ("grid: {nic_gbps: [1]}\npoints: [{nic_gbps: 1}]\n", ["exactly one of grid and points"]),
    ("points: []\n", ["points", "list of 1 to"]),
    ("points: [{tp: 1}, {tp: 1}]\n", ["points 0 and 1 are the same"]),
    ("sweep: {}\n", ["unknown key 'sweep'", "base, grid, points"]),
    ("base: {set: [tp]}\ngrid: {tp: [1]}\n", ["base.set", "expected key=value"]),
    ("base: {gpu: 2}\ngrid: {tp: [1]}\n", ["base", "unknown key 'gpu'"]),
    ("base: nowhere.yaml\ngrid: {tp: [1]}\n", ["nowhere.yaml", "cannot read file"]),
], ids=["unknown-key", "not-a-list", "nested-value", "both", "empty-points", "duplicate",
        "unknown-top-key", "bad-set", "unknown-base-key", "missing-base-file"])
def test_a_bad_sweep_file_gets_one_line_naming_the_key(tmp_path, text, words):
    path = _write(tmp_path, text)
    with pytest.raises(ValueError) as error:
        load_sweep(path)
    message = str(error.value)
    assert "\n" not in message and str(path.name) in message
    assert all(word in message for word in words), message


def test_too_many_points_are_refused_before_anything_runs(tmp_path):
    values = list(range(1, 401))
    path = _write(tmp_path, f"grid:\n  tp: {values}\n  ep: {values}\n")
    with pytest.raises(ValueError, match="160000 points: more than 100000"):
        load_sweep(path)


# --- the keys a sweep reaches ---------------------------------------------------------------

@pytest.fixture
def small(make_scenario):
    return make_scenario(ep=8)


def _edge(scenario, src: str, dst: str, what: str = "capacity_bytes_per_s") -> float:
    return float(scenario_topology(scenario).graph.edges[src, dst][what])


def test_nvlink_bandwidth_sets_the_gpu_and_the_switch_ports(small):
    faster = apply_setting(small, "nvlink_gbytes_per_s=1800")
    assert _edge(faster, "gpu0", "nvsw0") == 1800e9 == 2 * _edge(small, "gpu0", "nvsw0")


@pytest.mark.parametrize("gbps", [400, 800, 1600])
def test_nic_speed_sets_the_nic_and_the_wire_to_the_leaf(small, gbps):
    scenario = apply_setting(small, f"nic_gbps={gbps}")
    assert _edge(scenario, "gpu0", "nic0") == _edge(scenario, "nic0", "leaf0") == gbps * GBIT


def test_fabric_swaps_the_switch_protocol_at_the_same_port_speed(small):
    ethernet = apply_setting(small, "fabric=ethernet")
    switch = system_scale_out_switch(ethernet.system)
    assert switch.protocol == "ethernet" and not switch.in_network_reduction
    assert switch.port_bandwidth_bytes_per_s == \
        system_scale_out_switch(small.system).port_bandwidth_bytes_per_s
    assert apply_setting(ethernet, "fabric=ib").system.scale_out_switch == "quantum-x800"
    assert apply_setting(small, "fabric=infiniband") == small
    assert switch_spec("spectrum-x").port_bandwidth_bytes_per_s == 800 * GBIT


def test_latency_keys_set_each_hop(small):
    scenario = apply_setting(small, "link_latency_us=5")
    for src, dst in (("gpu0", "nvsw0"), ("gpu0", "nic0"), ("nic0", "leaf0")):
        assert _edge(scenario, src, dst, "latency_s") == 5e-6
    only_nic = apply_setting(small, "nic_latency_us=3")
    assert _edge(only_nic, "gpu0", "nic0", "latency_s") == 3e-6
    assert _edge(only_nic, "gpu0", "nvsw0", "latency_s") == _edge(small, "gpu0", "nvsw0",
                                                                  "latency_s")


def test_an_nvlink_domain_of_576_gets_the_switch_trays_it_needs(small):
    scenario = apply_setting(small, "nvlink_domain_size=576")
    assert scenario.domain_size == 576 == scenario.system.gpus_per_domain
    topology = build_topology(scenario.system, 576, domain_size=576)
    assert topology.domain_size == 576
    assert apply_setting(small, "nvlink_domain_size=8").system.nvlink_switch == "nvlink5-switch"


def test_part_fields_derive_a_custom_part(small):
    scenario = apply_setting(small, "system.nic.bandwidth_bytes_per_s=2e11")
    assert scenario.system.nic.name == "connectx-8-custom"  # type: ignore[union-attr]
    assert _edge(scenario, "gpu0", "nic0") == 2e11
    peak = apply_setting(small, "system.gpu.peak_flops_per_s.fp8=6e15").system.gpu
    assert peak.peak("fp8") == 6e15 and peak.peak("bf16") == 2.5e15  # type: ignore[union-attr]


def test_plan_keys_change_together_and_a_new_pp_drops_the_layout(make_scenario):
    scenario = make_scenario(ep=8, pp=2, layout="Et|tL")
    changed = apply_settings(scenario, ["gpus=32", "ep=16", "gbs=64"])
    assert (changed.plan.num_gpus, changed.plan.ep, changed.plan.layout) == (32, 16, "Et|tL")
    assert apply_setting(scenario, "pp=1").plan.layout is None
    assert apply_settings(scenario, ["pp=1", "layout=Ett"]).plan.layout == "Ett"


def test_recipe_fields_change_together_in_either_order():
    scenario = default_scenario()
    assert scenario.recipe.a2a_overlap and not scenario.recipe.shared_expert_overlap
    for settings in (["a2a_overlap=false", "recipe.shared_expert_overlap=true"],
                     ["shared_expert_overlap=true", "recipe.a2a_overlap=false"]):
        recipe = apply_settings(scenario, settings).recipe
        assert (recipe.a2a_overlap, recipe.shared_expert_overlap) == (False, True)
    with pytest.raises(ValueError, match="shared_expert_overlap=True: incompatible"):
        apply_setting(scenario, "shared_expert_overlap=true")


@pytest.mark.parametrize("setting, words", [
    ("nic_gbps=-400", ["nic_gbps", "> 0"]), ("fabric=token-ring", ["fabric", "ethernet"]),
    ("oversubscription=0.5", ["oversubscription", ">= 1"]),
    ("nvlink_domain_size=0", ["nvlink_domain_size", ">= 1"]),
    ("link_latency_us=x", ["link_latency_us", "number"]),
    ("system.nic.colour=red", ["system.nic.colour", "unknown key"]),
    ("tp=two", ["tp", "integer"]),
])
def test_a_bad_setting_gets_one_line_naming_it(small, setting, words):
    with pytest.raises(ValueError) as error:
        apply_setting(small, setting)
    assert all(word in str(error.value) for word in words), str(error.value)


# --- running ----------------------------------------------------------------------------------

def test_a_local_run_gives_one_ok_row_per_point_and_writes_csv_and_charts(local_run):
    frame, out = local_run
    spec = load_sweep(NIC_SPEED)
    assert list(frame["point_id"]) == [p.point_id for p in spec.points]
    assert list(frame["status"]) == ["ok"] * 3 and list(frame["nic_gbps"]) == [400, 800, 1600]
    assert {"scenario.num_gpus", "scenario.recipe.precision", "breakdown_s.compute",
            "memory_bytes_per_gpu.total"} <= set(frame.columns)
    tokens = list(frame["tokens_per_s_per_gpu"])
    assert tokens == sorted(tokens) and tokens[0] < tokens[-1]  # a faster NIC never slows
    assert pd.read_csv(out / CSV_NAME, dtype={"point_id": str})["point_id"].tolist() == \
        list(frame["point_id"])
    assert sorted(path.name for path in out.glob("*.png")) == ["breakdown.png", "throughput.png"]


def test_a_dask_local_cluster_gives_the_same_csv_as_the_local_run(local_run, tmp_path):
    from distributed import LocalCluster

    _, local_out = local_run
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster:
        run_sweep(load_sweep(NIC_SPEED), out_dir=tmp_path, scheduler=cluster.scheduler_address)
    assert (tmp_path / CSV_NAME).read_bytes() == (local_out / CSV_NAME).read_bytes()


def test_local_processes_give_the_same_csv_as_one_process(local_run, tmp_path):
    _, local_out = local_run
    run_sweep(load_sweep(NIC_SPEED), out_dir=tmp_path, jobs=2)
    assert (tmp_path / CSV_NAME).read_bytes() == (local_out / CSV_NAME).read_bytes()


def test_an_interrupted_sweep_resumes_without_recomputing_finished_points(
        local_run, tmp_path, monkeypatch):
    original, calls = sweep_module.evaluate_point, []

    def interrupted_after_one(base, point, folder):
        if calls:
            raise KeyboardInterrupt
        calls.append(point.point_id)
        return original(base, point, folder)

    monkeypatch.setattr(sweep_module, "evaluate_point", interrupted_after_one)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(load_sweep(NIC_SPEED), out_dir=tmp_path, jobs=1)
    partial = pd.read_csv(tmp_path / CSV_NAME, dtype={"point_id": str})
    assert list(partial["point_id"]) == calls and list(partial["status"]) == ["ok"]
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind

    def counted(base, point, folder):
        calls.append(point.point_id)
        return original(base, point, folder)

    monkeypatch.setattr(sweep_module, "evaluate_point", counted)
    run_sweep(load_sweep(NIC_SPEED), out_dir=tmp_path, jobs=1)
    assert len(calls) == 3 and len(set(calls)) == 3
    assert (tmp_path / CSV_NAME).read_bytes() == (local_run[1] / CSV_NAME).read_bytes()


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path):
    frame = run_sweep(load_sweep(WITH_FAILURE), out_dir=tmp_path, jobs=1)
    assert list(frame["status"]) == ["ok", "ok", "ok", "failed"]
    failed = frame.iloc[3]
    assert "tp*cp*pp" in failed["error"] and pd.isna(failed["tokens_per_s_per_gpu"])
    assert set(frame["error"].iloc[:3]) == {""}
    healthy, degraded = frame["tokens_per_s_per_gpu"].iloc[:2]
    assert degraded < healthy  # two failed NVLink trays slow the step
    again = []
    original = sweep_module.evaluate_point

    def counted(base, point, folder):
        again.append(point.point_id)
        return original(base, point, folder)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep_module, "evaluate_point", counted)
        run_sweep(load_sweep(WITH_FAILURE), out_dir=tmp_path, jobs=1)
    assert again == [failed["point_id"]]  # a rerun retries failures only


def test_the_asymmetric_what_ifs_reach_the_points(tmp_path):
    base = NIC_SPEED.read_text().split("grid:")[0]
    path = _write(tmp_path, base + """points:
  - {straggler_gpu: none}
  - {straggler_gpu: 3, straggler_slowdown: 1.5}
  - {degraded_link: "nic:3", degraded_link_bandwidth_fraction: 0.25}
""")
    frame = run_sweep(load_sweep(path), jobs=1)
    assert list(frame["status"]) == ["ok"] * 3
    healthy, straggler, degraded = frame["tokens_per_s_per_gpu"]
    assert straggler < healthy and degraded < healthy


def test_the_command_prints_the_table_and_counts_failures(tmp_path, capsys):
    assert main(["sweep", str(WITH_FAILURE), "--jobs", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "4 points, 1 failed" in out and "tp*cp*pp" in out and str(tmp_path) in out
    assert (tmp_path / CSV_NAME).exists()
    assert main(["sweep", str(WITH_FAILURE), "--jobs", "1", "--json"]) == 0
    captured = capsys.readouterr()
    records = json.loads(captured.out)
    assert [r["status"] for r in records] == ["ok", "ok", "ok", "failed"]
    assert records[0]["tp"] is None and records[3]["tp"] == 3
    assert "4 points, 1 failed" in captured.err and "4/4" in captured.err  # the progress bar


@pytest.mark.parametrize("args, words", [
    (["sweep", "missing.yaml"], ["missing.yaml", "cannot read"]),
    (["sweep", str(NIC_SPEED), "--jobs", "0"], ["jobs=0", ">= 1"]),
    (["sweep", str(NIC_SPEED), "--scheduler", "nowhere"], ["scheduler", "nowhere", "port"]),
])
def test_bad_input_gets_one_line_and_exit_2(one_line_error, tmp_path, args, words):
    """Nothing is drawn or written first: a bad scheduler fails before the progress bar and
    the --out folder."""
    out = tmp_path / "out"
    line = one_line_error([*args, "--out", str(out)])
    assert all(word in line for word in words), line
    assert not out.exists()


def test_an_out_folder_holding_another_table_is_refused(tmp_path):
    (tmp_path / CSV_NAME).write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a sweep table"):
        run_sweep(load_sweep(NIC_SPEED), out_dir=tmp_path, jobs=1)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.stem)
def test_the_example_sweeps_load_and_their_base_builds(path):
    spec = load_sweep(path)
    assert spec.points and base_scenario(spec).plan.num_gpus >= 1


# --- charts -----------------------------------------------------------------------------------

def _table(keys: dict[str, list], failed: tuple[int, ...] = ()) -> pd.DataFrame:
    """A sweep-shaped table with made-up outputs: tokens = 10 x row number + 100."""
    rows = len(next(iter(keys.values())))
    tokens = [100.0 + 10 * number for number in range(rows)]
    frame = pd.DataFrame({
        "point_id": [f"p{n}" for n in range(rows)],
        "status": ["failed" if n in failed else "ok" for n in range(rows)], **keys,
        "tokens_per_s_per_gpu": tokens, "tflops_per_gpu": [t / 2 for t in tokens],
        "breakdown_s.compute": [1.0] * rows,
        "breakdown_s.exposed_ep": [0.1 * n for n in range(rows)]})
    frame.loc[list(failed), ["tokens_per_s_per_gpu", "tflops_per_gpu"]] = np.nan
    return frame


def test_the_throughput_chart_has_one_line_per_metric_through_every_point():
    frame = _table({"nic_gbps": [800, 400, 1600]})
    figure = throughput_figure(frame, "nic_gbps")
    tokens, tflops = figure.axes
    (line,) = tokens.get_lines()
    assert list(line.get_xdata()) == [400, 800, 1600]
    assert list(line.get_ydata()) == [110.0, 100.0, 120.0]
    assert list(tflops.get_lines()[0].get_ydata()) == [55.0, 50.0, 60.0]
    assert tokens.get_ylabel() == "tokens/s/GPU"


def test_a_text_key_is_drawn_as_categories_in_table_order():
    figure = throughput_figure(_table({"fabric": ["infiniband", "ethernet"]}), "fabric")
    axes = figure.axes[0]
    assert list(axes.get_lines()[0].get_xdata()) == [0.0, 1.0]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["infiniband", "ethernet"]


def test_the_breakdown_chart_stacks_one_bar_series_per_category():
    figure = breakdown_figure(_table({"failed_trays": [0, 1, 2]}), "failed_trays")
    axes = figure.axes[0]
    bars = [c for c in axes.containers if isinstance(c, BarContainer)]
    assert [c.get_label() for c in bars] == ["compute (model GEMMs, attention)",
                                             "exposed EP all-to-all"]
    tops = [patch.get_y() + patch.get_height() for patch in bars[-1].patches]
    assert tops == pytest.approx([1.0, 1.1, 1.2])


def test_the_heat_map_holds_every_pair_and_blanks_a_failed_point():
    frame = _table({"nic_gbps": [400, 400, 800, 800], "fabric": ["ib", "ethernet"] * 2},
                   failed=(3,))
    figure = heatmap_figure(frame, "nic_gbps", "fabric", "tokens_per_s_per_gpu")
    values = figure.axes[0].images[0].get_array()
    assert values.shape == (2, 2)
    assert values[0, 0] == 100.0 and values[1, 0] == 110.0 and values[0, 1] == 120.0
    assert np.ma.is_masked(values[1, 1])
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == ["400", "800"]


def test_the_lines_chart_has_one_line_per_combination_of_the_other_keys():
    frame = _table({"nic_gbps": [400, 800] * 4, "fabric": ["ib"] * 4 + ["ethernet"] * 4,
                    "tp": [1, 1, 2, 2] * 2})
    figure = lines_figure(frame, "nic_gbps", ["fabric", "tp"], "tflops_per_gpu")
    lines = figure.axes[0].get_lines()
    assert [line.get_label() for line in lines] == [
        "fabric=ib, tp=1", "fabric=ib, tp=2", "fabric=ethernet, tp=1", "fabric=ethernet, tp=2"]
    assert list(lines[1].get_ydata()) == [60.0, 65.0]


def test_a_list_of_unlike_points_gets_one_labelled_bar_per_point_that_ran():
    frame = _table({"failed_trays": pd.array([1, None, None], dtype="Int64"),
                    "fabric": [None, "ethernet", None]}, failed=(2,))
    figure = points_figure(frame, ["failed_trays", "fabric"])
    tokens, tflops = figure.axes
    assert [p.get_width() for p in tokens.patches] == [100.0, 110.0]
    assert [p.get_width() for p in tflops.patches] == [50.0, 55.0]
    labels = [t.get_text() for t in tokens.get_yticklabels()]
    assert labels == ["failed_trays=1", "fabric=ethernet"]
    assert set(sweep_figures(frame, ["failed_trays", "fabric"])) == {"throughput", "breakdown"}


def test_the_charts_follow_the_number_of_keys(tmp_path):
    one = _table({"nic_gbps": [400, 800]})
    assert set(sweep_figures(one, ["nic_gbps"])) == {"throughput", "breakdown"}
    two = _table({"nic_gbps": [400, 800], "tp": [1, 2]})
    assert all(f.axes[0].images for f in sweep_figures(two, ["nic_gbps", "tp"]).values())
    three = _table({"nic_gbps": [400, 800], "tp": [1, 2], "ep": [8, 8]})
    assert set(sweep_figures(three, ["nic_gbps", "tp", "ep"])) == {
        "tokens_per_s_per_gpu", "tflops_per_gpu"}
    assert sweep_figures(_table({"tp": [1]}, failed=(0,)), ["tp"]) == {}
    paths = write_sweep_charts(two, ["nic_gbps", "tp"], tmp_path)
    assert sorted(p.name for p in paths) == ["tflops_per_gpu.png", "tokens_per_s_per_gpu.png"]
    assert all(p.stat().st_size > 0 for p in paths)
