"""A drawing of a cluster's wiring: one horizontal layer per tier, edges coloured by tier.

Input is plain data (simulator.catalog.drawing_data builds it): `system`, `num_gpus`,
`domain_size`, `nodes` (id, kind, and domain / index / rail / switches where they apply) and
`edges` (src, dst, tier, capacity_bytes_per_s per direction, one per linked pair).

Layout, bottom to top: each NVLink domain's aggregated NVLink switch is a bar directly under
its GPUs (so NVLink ticks never cross the GPU -> NIC lines), then GPUs (one slot each, a gap
between domains), NICs above their GPUs, leaves, spine groups and the core, each spread evenly
over the width. Above MAX_DRAWN_GPUS GPUs the drawing is summarised: the first few domains, an
ellipsis naming what is left out, and the last domain, with only the switches they reach.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from reports.files import save_figure
from reports.tables import counted

MAX_DRAWN_GPUS = 256
MAX_DRAWN_DOMAINS = 8
POINTS_PER_LABEL_CHAR = 5.0
X_MARGIN = 3.0
MAX_SWITCH_LABELS = 24
LAYER_Y = {"nvswitch": 0.0, "gpu": 1.0, "nic": 2.0, "leaf": 3.2, "spine": 4.4, "core": 5.6}
LAYER_LABELS = {"nvswitch": "NVLink switch", "gpu": "GPUs", "nic": "NICs",
                "leaf": "leaf switches", "spine": "spine", "core": "core"}
NODE_STYLE = {  # kind: (marker, colour, size in points^2 at most)
    "gpu": ("s", "#404040", 60.0), "nic": ("o", "#1f77b4", 30.0),
    "leaf": ("D", "#ff7f0e", 90.0), "spine": ("s", "#9467bd", 160.0),
    "core": ("s", "#8c564b", 200.0),
}
TIER_STYLE = {  # tier: (colour, legend text before the capacity, after it)
    "nvlink": ("#2ca02c", "NVLink, GPU - NVLink switch", "per GPU"),
    "nic": ("#1f77b4", "scale-out, GPU - NIC - leaf", "per NIC"),
    "leaf": ("#ff7f0e", "leaf - spine", "per leaf"),
    "spine": ("#9467bd", "spine - core", "per spine group"),
}
NVSWITCH_COLOUR = "#b7e4b7"


@dataclass(frozen=True, slots=True, kw_only=True)
class _View:
    """What is drawn: the nodes kept, x of each, and the hidden domains' gap (if any)."""

    nodes: dict[str, Mapping[str, Any]]
    x: dict[str, float]
    domain_spans: dict[int, tuple[float, float]]
    domain_gap: float
    hidden_domains: list[int]
    gap_x: float | None
    width: float


def _shown_domains(domains: Sequence[int], num_gpus: int, domain_size: int) -> list[int]:
    """All domains, or the first few and the last when the system is large."""
    if num_gpus <= MAX_DRAWN_GPUS or len(domains) <= 2:
        return list(domains)
    first = max(1, min(MAX_DRAWN_DOMAINS - 1, MAX_DRAWN_GPUS // domain_size - 1))
    return list(domains[:first]) + [domains[-1]] if first < len(domains) - 1 else list(domains)


def _kept_nodes(data: Mapping[str, Any], shown: set[int]) -> dict[str, Mapping[str, Any]]:
    """Nodes of the shown domains and the switches their links reach, layer by layer."""
    nodes = {node["id"]: node for node in data["nodes"]}
    kept = {key: node for key, node in nodes.items()
            if node["kind"] in ("gpu", "nvswitch", "nic") and node["domain"] in shown}
    for kind in ("leaf", "spine", "core"):
        reached = {edge["dst"] for edge in data["edges"]
                   if edge["src"] in kept and nodes[edge["dst"]]["kind"] == kind}
        kept.update((key, nodes[key]) for key in sorted(reached, key=_node_order))
    return kept


def _node_order(node_id: str) -> tuple[str, int]:
    """Sort "leaf10" after "leaf9": by name prefix, then number."""
    prefix = node_id.rstrip("0123456789")
    return prefix, int(node_id[len(prefix):] or 0)


def _place_gpus(
    gpus: Sequence[Mapping[str, Any]], gap: float, x: dict[str, float]
) -> tuple[dict[int, tuple[float, float]], float | None]:
    """One slot per GPU (its NIC above it), `gap` slots between domains and a wider gap where
    domains are left out. Returns each domain's first and last x and the wide gap's centre."""
    spans: dict[int, tuple[float, float]] = {}
    gap_x, cursor = None, 0.0
    for previous, node in zip([None, *gpus], gpus):
        if previous is not None and previous["domain"] != node["domain"]:
            skipped = node["domain"] - previous["domain"] > 1
            if skipped:
                gap_x = cursor - 0.5 + 2.5 * gap
            cursor += 5 * gap if skipped else gap
        x[node["id"]] = x[f"nic{node['index']}"] = cursor
        spans[node["domain"]] = (spans.get(node["domain"], (cursor,))[0], cursor)
        cursor += 1.0
    return spans, gap_x


def _layout(data: Mapping[str, Any]) -> _View:
    """x positions: GPUs and NICs on slots, NVLink switches centred, other switches spread."""
    size = int(data["domain_size"])
    domains = sorted({n["domain"] for n in data["nodes"] if n["kind"] == "gpu"})
    shown = _shown_domains(domains, int(data["num_gpus"]), size)
    nodes = _kept_nodes(data, set(shown))
    x: dict[str, float] = {}
    gpus = sorted((n for n in nodes.values() if n["kind"] == "gpu"), key=lambda n: n["index"])
    gap = max(2.0, size / 8)
    spans, gap_x = _place_gpus(gpus, gap, x)
    width = max(high for _, high in spans.values())
    for domain, (low, high) in spans.items():
        x[f"nvsw{domain}"] = (low + high) / 2
    for kind in ("leaf", "spine", "core"):
        row = [key for key, node in nodes.items() if node["kind"] == kind]
        for position, key in enumerate(row):
            x[key] = width * (position + 0.5) / len(row)
    hidden = [d for d in domains if d not in set(shown)]
    return _View(nodes=nodes, x=x, domain_spans=spans, domain_gap=gap, hidden_domains=hidden,
                 gap_x=gap_x, width=width)


def _bandwidth(value: float) -> str:
    return f"{value / 1e12:,.3g} TB/s" if value >= 1e12 else f"{value / 1e9:,.3g} GB/s"


def _capacity_text(capacities: Sequence[float]) -> str:
    low, high = min(capacities), max(capacities)
    return _bandwidth(low) if low == high else f"{_bandwidth(low)} - {_bandwidth(high)}"


def _draw_edges(axes: Any, data: Mapping[str, Any], view: _View) -> list[Line2D]:
    """One LineCollection per tier; legend handles that state each tier's capacity."""
    segments: dict[str, list[tuple[tuple[float, float], tuple[float, float]]]] = {}
    capacities: dict[str, list[float]] = {}
    for edge in data["edges"]:
        src, dst = view.nodes.get(edge["src"]), view.nodes.get(edge["dst"])
        if src is None or dst is None:
            continue
        src_y, dst_y = LAYER_Y[src["kind"]], LAYER_Y[dst["kind"]]
        if dst["kind"] == "nvswitch":  # a tick from the GPU down onto its domain's bar
            dst_x = view.x[edge["src"]]
        else:
            dst_x = view.x[edge["dst"]]
        segments.setdefault(edge["tier"], []).append(
            ((view.x[edge["src"]], src_y), (dst_x, dst_y)))
        capacities.setdefault(edge["tier"], []).append(edge["capacity_bytes_per_s"])
    handles = []
    for tier, (colour, text, unit) in TIER_STYLE.items():
        if tier not in segments:
            continue
        width = 1.2 if len(segments[tier]) < 200 else 0.6
        lines = LineCollection(segments[tier], colors=colour, linewidths=width, alpha=0.6,
                               zorder=1)
        lines.set_gid(f"edges-{tier}")
        axes.add_collection(lines)
        label = f"{text}: {_capacity_text(capacities[tier])} {unit} per direction"
        handles.append(Line2D([], [], color=colour, linewidth=2, label=label))
    return handles


def _draw_nvswitches(axes: Any, view: _View, slot_points: float) -> None:
    """A bar under each domain's GPUs, labelled with its chip count, and the domain name."""
    labels = _domain_labels(view, slot_points)
    for node in view.nodes.values():
        if node["kind"] != "nvswitch":
            continue
        low, high = view.domain_spans[node["domain"]]
        bar = Rectangle((low - 0.5, LAYER_Y["nvswitch"] - 0.15), high - low + 1.0, 0.3,
                        facecolor=NVSWITCH_COLOUR, edgecolor="#2ca02c", zorder=2)
        bar.set_gid("nvswitch")
        axes.add_patch(bar)
        axes.text((low + high) / 2, LAYER_Y["nvswitch"], f"{node['switches']} chips",
                  ha="center", va="center", fontsize=8, zorder=4)
        axes.text((low + high) / 2, LAYER_Y["nvswitch"] - 0.25, labels[node["domain"]],
                  ha="center", va="top", fontsize=7, zorder=4)


def _domain_labels(view: _View, slot_points: float) -> dict[int, str]:
    """One label style for every domain, the longest that fits the narrowest domain:
    "NVLink domain d / GPU a-b", "domain d / GPU a-b", or just d."""
    room_points = slot_points * min(high - low + 1.0 + view.domain_gap
                                    for low, high in view.domain_spans.values())
    ranges = _gpu_ranges(view)
    for name in ("NVLink domain", "domain"):
        labels = {domain: f"{name} {domain}\n{ranges[domain]}" for domain in view.domain_spans}
        longest = max(len(line) for label in labels.values() for line in label.split("\n"))
        if longest * POINTS_PER_LABEL_CHAR <= room_points:
            return labels
    return {domain: str(domain) for domain in view.domain_spans}


def _gpu_ranges(view: _View) -> dict[int, str]:
    """ "GPU first-last" of each drawn domain."""
    indices: dict[int, list[int]] = {}
    for node in view.nodes.values():
        if node["kind"] == "gpu":
            indices.setdefault(node["domain"], []).append(node["index"])
    return {domain: f"GPU {min(gpus)}-{max(gpus)}" for domain, gpus in indices.items()}


def _draw_nodes(axes: Any, view: _View, slot_points: float) -> None:
    """One scatter per node kind (gid = kind); labels where there is room."""
    for kind, (marker, colour, largest) in NODE_STYLE.items():
        keys = [key for key, node in view.nodes.items() if node["kind"] == kind]
        if not keys:
            continue
        size = min(largest, (0.8 * slot_points) ** 2) if kind in ("gpu", "nic") else largest
        dots = axes.scatter([view.x[k] for k in keys], [LAYER_Y[kind]] * len(keys), s=size,
                            marker=marker, color=colour, zorder=3, linewidths=0)
        dots.set_gid(kind)
        _label_nodes(axes, view, kind, keys, slot_points)


def _label_nodes(
    axes: Any, view: _View, kind: str, keys: list[str], slot_points: float
) -> None:
    """GPU indices if a slot fits them; switch names and details if there are few switches."""
    digits = len(str(max(view.nodes[key].get("index", 0) for key in keys)))
    if kind == "gpu" and digits * POINTS_PER_LABEL_CHAR <= slot_points:
        for key in keys:
            axes.text(view.x[key], LAYER_Y[kind] - 0.12, str(view.nodes[key]["index"]),
                      ha="center", va="top", fontsize=7, zorder=4,
                      bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
    elif kind in ("leaf", "spine", "core") and len(keys) <= MAX_SWITCH_LABELS:
        for key in keys:
            node = view.nodes[key]
            axes.text(view.x[key], LAYER_Y[kind] + 0.15, f"{key}\n{_switch_detail(node)}",
                      ha="center", va="bottom", fontsize=7, zorder=4)


def _switch_detail(node: Mapping[str, Any]) -> str:
    if node["kind"] == "leaf":
        return f"rail {node['rail']}"
    return counted(node["switches"], "switch", "switches")


def _draw_ellipsis(axes: Any, data: Mapping[str, Any], view: _View) -> None:
    if not view.hidden_domains or view.gap_x is None:
        return
    hidden = set(view.hidden_domains)
    gpus = sum(1 for n in data["nodes"] if n["kind"] == "gpu" and n["domain"] in hidden)
    text = f"...\n{len(hidden):,} more\ndomains\n({gpus:,} GPUs)"
    axes.text(view.gap_x, LAYER_Y["gpu"], text, ha="center", va="center", fontsize=8,
              zorder=4)


def _title(data: Mapping[str, Any], view: _View) -> str:
    num_gpus, size = int(data["num_gpus"]), int(data["domain_size"])
    domains = -(-num_gpus // size)
    domain_word = "NVLink domains" if domains > 1 else "NVLink domain"
    title = f"{data['system']}: {num_gpus:,} GPUs, {domains:,} {domain_word} of up to {size}"
    if view.hidden_domains:
        drawn = [f"{domains - len(view.hidden_domains)} of {domains:,} NVLink domains"]
        for kind, name in (("leaf", "leaves"), ("spine", "spine groups")):
            total = sum(1 for n in data["nodes"] if n["kind"] == kind)
            shown = sum(1 for n in view.nodes.values() if n["kind"] == kind)
            if shown < total:
                drawn.append(f"{shown} of {total:,} {name}")
        title += f"\nsummarised: {', '.join(drawn)} drawn"
    return title


def topology_figure(graph_data: Mapping[str, Any]) -> Figure:
    """The drawing as a matplotlib Figure (not registered with pyplot)."""
    view = _layout(graph_data)
    width_in = min(22.0, max(10.0, 3.0 + 0.1 * view.width))
    slot_points = 72.0 * (width_in - 1.6) / (view.width + 2 * X_MARGIN)
    figure = Figure(figsize=(width_in, 8.0), layout="constrained")
    axes = figure.add_subplot()
    handles = _draw_edges(axes, graph_data, view)
    _draw_nvswitches(axes, view, slot_points)
    _draw_nodes(axes, view, slot_points)
    _draw_ellipsis(axes, graph_data, view)
    kinds = [kind for kind in LAYER_Y if any(n["kind"] == kind for n in view.nodes.values())]
    axes.set_yticks([LAYER_Y[kind] for kind in kinds], [LAYER_LABELS[k] for k in kinds])
    axes.set_xticks([])
    axes.set_xlim(-X_MARGIN, view.width + X_MARGIN)
    axes.set_ylim(LAYER_Y["nvswitch"] - 0.9, max(LAYER_Y[k] for k in kinds) + 0.7)
    for side in ("top", "right", "bottom"):
        axes.spines[side].set_visible(False)
    axes.set_title(_title(graph_data, view), fontsize=12)
    figure.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=9,
                  frameon=False)
    return figure


def draw_topology(graph_data: Mapping[str, Any], path: str | Path) -> Figure:
    """Draw the topology, write it to path (its extension names the format), return the Figure."""
    figure = topology_figure(graph_data)
    save_figure(figure, path)
    return figure
