"""The catalogs as rows of plain values (`moesim list`) and one built system summarised
(`moesim show system`): summary numbers and the plain node/edge data the topology drawing takes.

Catalog rows use the units people read (TFLOP/s, GB, TB/s, GB/s per direction, billions of
parameters, GFLOP per token); summaries stay SI (bytes/s) with the unit in the key. Catalogs are
read when a function is called, so a model, system or recipe added later shows up by itself.
Model FLOPs per token are Megatron's (workloads.flops) at sequence length 4,096, TP 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from topologies import hardware
from topologies.builders import build_topology
from topologies.systems import (SYSTEM_NAMES, SystemSpec, load_system, system_gpu, system_nic,
                                system_scale_out_switch)
from topologies.topology import NODE_KINDS, Topology
from workloads import models, recipes
from workloads.flops import model_flops_per_token

Row = dict[str, Any]
FLOPS_SEQ_LEN = 4096


def gpu_rows() -> list[Row]:
    """One row per catalog GPU: SMs, dense peaks, usable HBM, NVLink per direction."""
    rows = []
    for gpu in hardware.GPUS.values():
        peaks = gpu.peak_flops_per_s
        rows.append({
            "name": gpu.name,
            "sms": gpu.sm_count,
            "bf16_tflops": peaks["bf16"] / hardware.TFLOPS,
            "fp8_tflops": peaks["fp8"] / hardware.TFLOPS,
            "nvfp4_tflops": peaks["nvfp4"] / hardware.TFLOPS if "nvfp4" in peaks else None,
            "sfu_texp_per_s": gpu.exp_per_s / hardware.TFLOPS,
            "hbm_gb": gpu.hbm_capacity_bytes / hardware.GB,
            "hbm_tb_per_s": gpu.hbm_bandwidth_bytes_per_s / hardware.TB,
            "nvlink_gen": gpu.nvlink_generation,
            "nvlink_gb_per_s_per_dir": gpu.nvlink_bandwidth_bytes_per_s / hardware.GB,
        })
    return rows


def system_rows() -> list[Row]:
    """One row per catalog system (topologies/systems/*.yaml): parts and wiring."""
    rows = []
    for name in SYSTEM_NAMES:
        system = load_system(name)
        rows.append({
            "name": system.name,
            "gpu": system_gpu(system).name,
            "gpus_per_domain": system.gpus_per_domain,
            "nic": system_nic(system).name,
            "scale_out_switch": system_scale_out_switch(system).name,
            "tiers": system.tiers,
            "oversubscription": float(system.oversubscription),
            "rails": system.rails,
        })
    return rows


def model_rows() -> list[Row]:
    """One row per catalog model; parameters of the main model (MTP layers excluded), FLOPs
    per token as the model is configured (MTP included, as Megatron credits it)."""
    rows = []
    for name in sorted(models.MODELS):
        model = models.MODELS[name]
        main = model.with_mtp(0)
        rows.append({
            "name": model.name,
            "attention": model.attention,
            "layers": model.num_layers,
            "hidden": model.hidden_size,
            "experts": model.num_experts or None,
            "top_k": model.moe_router_topk or None,
            "total_params_b": main.total_params() / 1e9,
            "active_params_b": main.active_params() / 1e9,
            "mtp": model.mtp_layers,
            "gflop_per_token": model_flops_per_token(model, FLOPS_SEQ_LEN) / 1e9,
        })
    return rows


def recipe_rows() -> list[Row]:
    """One row per catalog recipe: the software features that matter most."""
    return [{
        "name": recipe.name,
        "precision": recipe.precision,
        "dispatcher": recipe.dispatcher,
        "cuda_graphs": recipe.cuda_graphs,
        "a2a_overlap": recipe.a2a_overlap,
        "schedule": recipe.pipeline_schedule,
        "local_batch": recipe.local_batch_size or None,
        "recompute": "+".join(recipe.recompute_modules) or "none",
    } for recipe in recipes.RECIPES.values()]


CATALOG_TABLES: dict[str, Callable[[], list[Row]]] = {
    "gpus": gpu_rows, "systems": system_rows, "models": model_rows, "recipes": recipe_rows}


def catalog_rows(table: str) -> list[Row]:
    """The rows of one catalog table by name (gpus, systems, models, recipes)."""
    if table not in CATALOG_TABLES:
        raise ValueError(f"unknown catalog {table!r}: known are {', '.join(CATALOG_TABLES)}")
    return CATALOG_TABLES[table]()


def build_system(
    name_or_path: str, num_gpus: int | None = None, domain_size: int | None = None
) -> tuple[SystemSpec, Topology]:
    """A catalog system (or YAML file) built for num_gpus GPUs, domain_size per NVLink domain.

    domain_size defaults to the system's gpus_per_domain; num_gpus to four domains' worth.
    """
    system = load_system(name_or_path)
    size = system.gpus_per_domain if domain_size is None else domain_size
    if num_gpus is None:  # a bad size is left for build_topology to name
        num_gpus = 4 * size if isinstance(size, int) and size > 0 else system.gpus_per_domain
    return system, build_topology(system, num_gpus, domain_size=size)


def summarise(system: SystemSpec, topology: Topology) -> Row:
    """Counts and headline bandwidths (bytes/s per direction) of a built system; a GPU's
    scale-out bandwidth is its slowest NIC-tier hop (NIC line rate or leaf port speed)."""
    summary = topology.summary()
    nic_links = [link.capacity_bytes_per_s for link in topology.links if link.tier == "nic"]
    nics = sum(1 for _, kind in topology.graph.nodes(data="kind") if kind == "nic")
    return {
        "system": system.name,
        "gpu": system_gpu(system).name,
        "nic": system_nic(system).name,
        "scale_out_switch": system_scale_out_switch(system).name,
        "tiers": system.tiers,
        "oversubscription": float(system.oversubscription),
        "rails": system.rails,
        "num_gpus": summary["num_gpus"],
        "domains": summary["domains"],
        "domain_size": summary["domain_size"],
        "last_domain_size": summary["num_gpus"] - (summary["domains"] - 1) * summary["domain_size"],
        "switches_per_tier": summary["switches_per_tier"],
        "nics": nics,
        "bisection_bandwidth_bytes_per_s": summary["bisection_bandwidth_bytes_per_s"],
        "nvlink_bandwidth_per_gpu_bytes_per_s": summary["nvlink_bandwidth_per_gpu_bytes_per_s"],
        "scale_out_bandwidth_per_gpu_bytes_per_s": min(nic_links, default=0.0),
    }


def system_summary(
    name_or_path: str, num_gpus: int | None = None, domain_size: int | None = None
) -> Row:
    """`summarise` of `build_system(name_or_path, num_gpus, domain_size)`."""
    return summarise(*build_system(name_or_path, num_gpus, domain_size))


def _domain_layout(summary: Row) -> str:
    """E.g. "3 x 72 + 1 x 40 GPUs" or "4 x 64 GPUs"."""
    domains, last, size = summary["domains"], summary["last_domain_size"], summary["domain_size"]
    if last == size:
        return f"{domains} x {size} GPUs"
    full = f"{domains - 1} x {size} + " if domains > 1 else ""
    return f"{full}1 x {last} GPUs"


def summary_rows(summary: Row) -> list[Row]:
    """The summary as quantity / value / unit rows for a printed table."""
    switches = summary["switches_per_tier"]
    fabric = (f"{summary['scale_out_switch']}, {summary['tiers']}-tier, "
              f"{summary['oversubscription']:g}:1, {summary['rails']} rails")
    return [
        {"quantity": "system", "value": summary["system"], "unit": fabric},
        {"quantity": "GPUs", "value": summary["num_gpus"], "unit": summary["gpu"]},
        {"quantity": "NVLink domains", "value": summary["domains"],
         "unit": _domain_layout(summary)},
        {"quantity": "NVLink switch chips", "value": switches["nvlink"], "unit": ""},
        {"quantity": "leaf switches", "value": switches["leaf"], "unit": ""},
        {"quantity": "spine switches", "value": switches["spine"], "unit": ""},
        {"quantity": "core switches", "value": switches["core"], "unit": ""},
        {"quantity": "NICs", "value": summary["nics"],
         "unit": summary["nic"] if summary["nics"] else "none: one NVLink domain, no fabric"},
        {"quantity": "bisection bandwidth",
         "value": summary["bisection_bandwidth_bytes_per_s"] / hardware.TB,
         "unit": "TB/s per direction"},
        {"quantity": "NVLink bandwidth per GPU",
         "value": summary["nvlink_bandwidth_per_gpu_bytes_per_s"] / hardware.GB,
         "unit": "GB/s per direction"},
        {"quantity": "scale-out bandwidth per GPU",
         "value": summary["scale_out_bandwidth_per_gpu_bytes_per_s"] / hardware.GB,
         "unit": "GB/s per direction"},
    ]


def drawing_data(system: SystemSpec, topology: Topology) -> Row:
    """Plain nodes and edges for reports.topology_plot.draw_topology.

    Nodes: id, kind, domain (GPUs, NVLink switches, NICs), index (GPUs, NICs), rail (leaves),
    switches (NVLink switch: chips; leaf/spine/core: physical switches). Edges: one per linked
    pair, from the lower kind up (topologies.topology.NODE_KINDS order), with its link tier and
    capacity per direction.
    """
    graph = topology.graph
    nodes = [_drawing_node(node, data, topology) for node, data in graph.nodes(data=True)]
    edges = [{"src": src, "dst": dst, "tier": data["tier"],
              "capacity_bytes_per_s": data["capacity_bytes_per_s"]}
             for src, dst, data in graph.edges(data=True)
             if NODE_KINDS.index(graph.nodes[src]["kind"])
             < NODE_KINDS.index(graph.nodes[dst]["kind"])]
    return {"system": system.name, "num_gpus": topology.num_gpus,
            "domain_size": topology.domain_size, "nodes": nodes, "edges": edges}


def _drawing_node(node: str, data: dict[str, Any], topology: Topology) -> Row:
    kind = data["kind"]
    row: Row = {"id": node, "kind": kind}
    if kind in ("gpu", "nic"):
        row["index"] = data["index"]
        row["domain"] = topology.domain_of(data["index"])
    elif kind == "nvswitch":
        row["domain"] = int(node.removeprefix("nvsw"))
        row["switches"] = data["chips"]
    else:
        row["switches"] = data.get("switches", 1)
        if kind == "leaf":
            row["rail"] = data["rail"]
    return row
