"""Tests for topologies: catalog, builders, Topology routing/validation, system YAML loading."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import networkx as nx
import pytest

from topologies.builders import build_topology, nvlink_domain
from topologies.hardware import (
    GPUS,
    NICS,
    NVLINK_SWITCHES,
    SWITCHES,
    gpu_spec,
    nic_spec,
    nvlink_switch_spec,
    switch_spec,
)
from topologies.systems import SYSTEM_NAMES, load_system, system_with
from topologies.topology import Topology

GB = 1e9


def test_catalog_lookups_return_the_cited_numbers() -> None:
    assert gpu_spec("gb200").peak("bf16") == 2.5e15
    assert gpu_spec("gb300").peak("nvfp4") == 15e15
    assert gpu_spec("gb300").hbm_capacity_bytes == 279 * GB
    assert gpu_spec("h800").nvlink_bandwidth_bytes_per_s == 200 * GB
    assert nic_spec("connectx-8").bandwidth_bytes_per_s == 100 * GB
    assert switch_spec("quantum-x800").radix == 144
    assert nvlink_switch_spec("nvlink5-switch").chips == 18
    assert {"gb200", "gb300", "h100", "h800", "h200", "b200", "b300"} <= set(GPUS)


@pytest.mark.parametrize("lookup, catalog", [
    (gpu_spec, GPUS), (nic_spec, NICS), (switch_spec, SWITCHES),
    (nvlink_switch_spec, NVLINK_SWITCHES),
])
def test_unknown_names_list_the_known_ones(lookup, catalog) -> None:
    with pytest.raises(ValueError, match="known are") as error:
        lookup("h999")
    assert "'h999'" in str(error.value) and all(name in str(error.value) for name in catalog)


def test_missing_precision_and_bad_spec_values_raise() -> None:
    with pytest.raises(ValueError, match="'nvfp4'"):
        gpu_spec("h100").peak("nvfp4")
    with pytest.raises(ValueError, match="hbm_capacity_bytes"):
        dataclasses.replace(gpu_spec("gb200"), hbm_capacity_bytes=0)
    with pytest.raises(ValueError, match="fp16"):
        dataclasses.replace(gpu_spec("gb200"), peak_flops_per_s={"bf16": 1.0, "fp16": 1.0})
    with pytest.raises(ValueError, match="exp_per_s must be a positive number, got 0"):
        dataclasses.replace(gpu_spec("gb200"), exp_per_s=0)


def test_specs_are_immutable_hashable_and_pickle() -> None:
    gpu = gpu_spec("gb200")
    with pytest.raises(TypeError):
        gpu.peak_flops_per_s["bf16"] = 1.0  # type: ignore[index]
    assert pickle.loads(pickle.dumps(gpu)) == gpu
    assert len({gpu, gpu_spec("gb200")}) == 1


def test_full_nvl72_rack_is_one_domain_with_one_hop_nvlink_routes() -> None:
    topology = build_topology(load_system("gb200-nvl72"), 72)
    assert (topology.num_domains, topology.domain_size) == (1, 72)
    for dst in range(1, 72):
        route = topology.route(0, dst)
        assert len(route) == 2
        assert all(topology.links[i].tier == "nvlink" for i in route)
    assert topology.links[topology.route(5, 6)[0]].capacity_bytes_per_s == 900 * GB
    assert topology.in_switch_reduction(0)
    assert topology.summary()["bisection_bandwidth_bytes_per_s"] == 0.0


def test_256_gpus_in_domains_of_64_route_across_domains_over_nics_only() -> None:
    topology = build_topology(load_system("gb200-nvl72"), 256, domain_size=64)
    assert topology.num_domains == 4
    assert [topology.domain_of(i) for i in (0, 63, 64, 255)] == [0, 0, 1, 3]
    route = topology.route(0, 64)  # same rail, neighbouring domains: same leaf
    assert [topology.links[i].tier for i in route] == ["nic"] * 4
    for dst in range(64, 256):
        tiers = {topology.links[i].tier for i in topology.route(3, dst)}
        assert "nvlink" not in tiers and "nic" in tiers
    assert all(link.capacity_bytes_per_s > 0 for link in topology.links)
    assert all(topology.graph.edges[l.src, l.dst]["index"] == i
               for i, l in enumerate(topology.links))


def test_route_latency_counts_nics_and_switch_hops() -> None:
    topology = build_topology(load_system("gb200-nvl72"), 256, domain_size=64)
    same_leaf = topology.route(0, 64)
    cross_leaf = topology.route(0, 65)  # rail 0 -> rail 1: leaf -> spine -> leaf
    assert topology.path_latency_s(same_leaf) == pytest.approx(2 * 1.25e-6 + 300e-9)
    assert topology.path_latency_s(cross_leaf) == pytest.approx(2 * 1.25e-6 + 3 * 300e-9)
    assert topology.path_latency_s(topology.route(0, 1)) == pytest.approx(1e-6)


def test_failed_tray_leaves_eight_ninths_of_nvlink_in_domain_zero() -> None:
    topology = build_topology(load_system("gb300-nvl72"), 144, failed_trays=1)
    degraded = topology.links[topology.route(0, 1)[0]].capacity_bytes_per_s
    healthy = topology.links[topology.route(72, 73)[0]].capacity_bytes_per_s
    assert degraded == pytest.approx(900 * GB * 8 / 9)
    assert healthy == 900 * GB
    assert topology.graph.nodes["nvsw0"]["failed_trays"] == 1
    with pytest.raises(ValueError, match="failed_trays"):
        build_topology(load_system("gb300-nvl72"), 72, failed_trays=9)


def test_domain_size_and_gpu_count_are_checked() -> None:
    system = load_system("gb200-nvl72")
    with pytest.raises(ValueError, match="domain_size must be an int in 1..72"):
        build_topology(system, 256, domain_size=96)
    with pytest.raises(ValueError, match="num_gpus"):
        build_topology(system, 0)


def test_validate_rejects_domains_without_a_fabric() -> None:
    graph = nx.DiGraph()
    gpu, switch = gpu_spec("h100"), nvlink_switch_spec("nvswitch3")
    nvlink_domain(graph, 0, [0, 1], gpu, switch)
    nvlink_domain(graph, 1, [2, 3], gpu, switch)
    with pytest.raises(ValueError, match="not connected"):
        Topology(graph, gpu=gpu, domain_size=2)


def test_validate_rejects_a_non_positive_capacity() -> None:
    graph = nx.DiGraph()
    gpu, switch = gpu_spec("h100"), nvlink_switch_spec("nvswitch3")
    nvlink_domain(graph, 0, [0, 1], gpu, switch)
    graph.edges["gpu0", "nvsw0"]["capacity_bytes_per_s"] = 0.0
    with pytest.raises(ValueError, match="link gpu0->nvsw0: capacity_bytes_per_s"):
        Topology(graph, gpu=gpu, domain_size=2)


def test_capacity_scaling_returns_a_new_topology_with_the_same_indices() -> None:
    topology = build_topology(load_system("dgx-h100"), 16)
    route = topology.route(0, 8)
    slowed = topology.with_capacity_scaled(route[:1], 0.25)
    assert slowed.links[route[0]].capacity_bytes_per_s == 50 * GB * 0.25
    assert topology.links[route[0]].capacity_bytes_per_s == 50 * GB
    assert slowed.route(0, 8) == route
    assert pickle.loads(pickle.dumps(slowed)).links == slowed.links


def test_summary_bisection_matches_a_hand_computed_fat_tree() -> None:
    # 4 DGX H100 nodes = 32 GPUs, 8 rails -> 8 leaves of 4 GPUs. NIC injection 32 x 50 GB/s
    # = 1.6 TB/s; leaf uplinks at 2:1 oversubscription 0.8 TB/s; bisection = 0.8 / 2 TB/s.
    system = system_with(load_system("dgx-h100"), oversubscription=2.0)
    summary = build_topology(system, 32).summary()
    assert summary["domains"] == 4
    assert summary["switches_per_tier"] == {"nvlink": 16, "leaf": 8, "spine": 1, "core": 0}
    assert summary["bisection_bandwidth_bytes_per_s"] == pytest.approx(400 * GB)
    assert summary["nvlink_bandwidth_per_gpu_bytes_per_s"] == 450 * GB


def test_three_tier_fabric_routes_through_the_core() -> None:
    # Quantum-2: 32 GPUs per leaf, 32 leaves per spine group; 2,112 H100 with 1 rail = 66
    # leaves -> 3 spine groups; gpu0 (leaf0, group 0) to gpu2048 (leaf64, group 2) crosses core0.
    system = system_with(load_system("dgx-h100"), tiers=3, rails=1)
    topology = build_topology(system, 2112)
    nodes = [topology.links[i].dst for i in topology.route(0, 2048)]
    assert nodes == ["nic0", "leaf0", "spine0", "core0", "spine2", "leaf64", "nic2048", "gpu2048"]
    assert [topology.links[i].tier for i in topology.route(0, 2048)].count("spine") == 2


def test_catalog_systems_load_and_build() -> None:
    assert {"gb200-nvl72", "gb300-nvl72"} <= set(SYSTEM_NAMES)
    for name in SYSTEM_NAMES:
        system = load_system(name)
        assert system.name == name
        assert build_topology(system, 2 * system.gpus_per_domain).num_domains == 2
    gb300 = load_system("gb300-nvl72")
    assert (gb300.gpu, gb300.nic, gb300.scale_out_switch, gb300.rails) == (
        "gb300", "connectx-8", "quantum-x800", 4)


def test_system_overrides_are_validated() -> None:
    gb200 = load_system("gb200-nvl72")
    assert system_with(gb200, nic="connectx-8").nic == "connectx-8"
    with pytest.raises(ValueError, match="unknown nic 'cx9'"):
        system_with(gb200, nic="cx9")
    with pytest.raises(ValueError, match="unknown system field 'nics'"):
        system_with(gb200, nics="connectx-8")
    with pytest.raises(ValueError, match="oversubscription"):
        system_with(gb200, oversubscription=0.5)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _gb200_yaml() -> str:
    return (Path(__file__).parents[1] / "topologies/systems/gb200-nvl72.yaml").read_text()


def test_yaml_missing_key_is_a_one_line_error_naming_file_and_key(tmp_path: Path) -> None:
    path = _write(tmp_path, _gb200_yaml().replace("rails: 4\n", ""))
    with pytest.raises(ValueError, match="missing key 'rails'") as error:
        load_system(str(path))
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_yaml_unknown_gpu_lists_the_known_ones(tmp_path: Path) -> None:
    path = _write(tmp_path, _gb200_yaml().replace("gpu: gb200", "gpu: h999"))
    with pytest.raises(ValueError, match="unknown gpu 'h999': known are gb200, gb300"):
        load_system(str(path))


def test_yaml_wrong_type_is_reported(tmp_path: Path) -> None:
    path = _write(tmp_path, _gb200_yaml().replace("tiers: 2", "tiers: two"))
    with pytest.raises(ValueError, match="tiers must be 2 or 3, got 'two'"):
        load_system(str(path))


def test_yaml_python_tags_are_refused_by_safe_load(tmp_path: Path) -> None:
    path = _write(tmp_path, '!!python/object/apply:os.system ["echo hi"]\n')
    with pytest.raises(ValueError, match="safe_load") as error:
        load_system(str(path))
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_unknown_system_name_lists_the_catalog() -> None:
    with pytest.raises(ValueError, match="unknown system 'nvl999': known are .*gb200-nvl72"):
        load_system("nvl999")
