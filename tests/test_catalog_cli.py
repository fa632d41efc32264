"""`moesim list` and `moesim show system`: catalog rows, system summaries, the topology drawing,
the table formatter, and one-line errors for bad input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from reports.tables import counted, format_table
from reports.topology_plot import draw_topology
from simulator.catalog import build_system, drawing_data, summarise, system_summary
from simulator.cli import main
from topologies.builders import build_topology
from topologies.hardware import GPUS, SWITCHES
from topologies.systems import SYSTEM_NAMES, load_system, system_with
from workloads import models
from workloads.recipes import RECIPES

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
GB = 1e9
THREE_TIER_YAML = """\
name: h100-3tier
gpu: h100
gpus_per_domain: 8
nvlink_switch: nvswitch3
nic: connectx-7
scale_out_switch: quantum-2
tiers: 3
oversubscription: 2.0
rails: 8
"""


def _json(capsys, *args: str) -> dict:
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _gids(figure: Figure, kind: type) -> dict[str, object]:
    axes = figure.axes[0]
    artists = axes.collections if kind is not Rectangle else axes.patches
    return {artist.get_gid(): artist for artist in artists if isinstance(artist, kind)}


# --- moesim list -------------------------------------------------------------------------

def test_list_prints_every_entry_of_every_catalog(capsys):
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    for title in ("gpus", "systems", "models", "recipes"):
        assert f"{title}\n" in text
    for name in [*GPUS, *SYSTEM_NAMES, *models.MODELS, *RECIPES]:
        assert any(line.split()[:1] == [name] for line in text.splitlines()), name


def test_list_json_rows_match_the_catalogs(capsys):
    tables = _json(capsys, "list")
    assert [row["name"] for row in tables["gpus"]] == list(GPUS)
    assert [row["name"] for row in tables["systems"]] == list(SYSTEM_NAMES)
    assert [row["name"] for row in tables["models"]] == sorted(models.MODELS)
    assert [row["name"] for row in tables["recipes"]] == list(RECIPES)
    gpus = {row["name"]: row for row in tables["gpus"]}
    assert gpus["h100"]["bf16_tflops"] == pytest.approx(989.4)
    assert gpus["h100"]["nvfp4_tflops"] is None
    assert gpus["h800"]["nvlink_gb_per_s_per_dir"] == pytest.approx(200)
    assert gpus["gb300"]["hbm_gb"] == pytest.approx(279)
    schedules = {row["name"]: row["schedule"] for row in tables["recipes"]}
    assert (schedules["deepseek-2024"], schedules["mbridge-26.06"]) == ("dualpipev", "1f1b")
    local = {row["name"]: row["local_batch"] for row in tables["recipes"]}
    assert (local["automodel-2026"], local["mbridge-26.06"]) == (8, None)


def test_model_rows_give_published_sizes_and_megatron_flops(capsys):
    deepseek = {row["name"]: row for row in _json(capsys, "list", "models")["models"]}[
        "deepseek-v3"]
    # DeepSeek-V3: 671B total, 37B active (main model); Megatron 259.4-260.0 GFLOP/token with
    # MTP at seq 4096 (research doc §2).
    assert deepseek["total_params_b"] == pytest.approx(671, abs=0.5)
    assert deepseek["active_params_b"] == pytest.approx(37.5, abs=0.5)
    assert (deepseek["experts"], deepseek["top_k"], deepseek["mtp"]) == (256, 8, 1)
    assert deepseek["gflop_per_token"] == pytest.approx(259.7, abs=0.5)


def test_a_model_added_to_the_catalog_is_listed(capsys, monkeypatch):
    extra = replace(models.MODELS["llama3-8b"], name="llama3-8b-copy")
    monkeypatch.setitem(models.MODELS, extra.name, extra)
    names = [row["name"] for row in _json(capsys, "list", "models")["models"]]
    assert "llama3-8b-copy" in names


# --- moesim show system ------------------------------------------------------------------

@pytest.mark.parametrize("extra, domains, size, last, layout", [
    ([], 4, 72, 40, "3 x 72 + 1 x 40 GPUs"),
    (["--domain-size", "64"], 4, 64, 64, "4 x 64 GPUs"),
], ids=["default-domain-72", "domain-64"])
def test_show_gb300_at_256_gpus_counts_domains(capsys, tmp_path, extra, domains, size, last,
                                               layout):
    png = str(tmp_path / "gb300.png")
    summary = _json(capsys, "show", "system", "gb300-nvl72", "--gpus", "256", "--png", png,
                    *extra)
    assert (summary["num_gpus"], summary["domains"], summary["domain_size"],
            summary["last_domain_size"]) == (256, domains, size, last)
    assert summary["nics"] == 256 and summary["png"] == png
    assert main(["show", "system", "gb300-nvl72", "--gpus", "256", "--png", png, *extra]) == 0
    text = capsys.readouterr().out
    assert layout in text and f"written to {png}" in text


def test_gb300_bisection_and_switch_counts_by_hand():
    # 256 GB300, 72 per domain, 4 rails: each rail has 18+18+18+10 = 64 GPUs, one leaf of a
    # 144-port Quantum-X800 (72 down). NIC injection 256 x 100 GB/s = 25.6 TB/s; 4 leaf
    # uplinks of 64 x 100 GB/s = 25.6 TB/s; bisection = 25.6 / 2 = 12.8 TB/s. Spine: 256
    # uplink ports / 144 ports per switch -> 2 switches. NVLink: 4 domains x 18 chips.
    summary = system_summary("gb300-nvl72", 256)
    assert summary["bisection_bandwidth_bytes_per_s"] == pytest.approx(12_800 * GB)
    assert summary["switches_per_tier"] == {"nvlink": 72, "leaf": 4, "spine": 2, "core": 0}
    assert summary["nvlink_bandwidth_per_gpu_bytes_per_s"] == pytest.approx(900 * GB)
    assert summary["scale_out_bandwidth_per_gpu_bytes_per_s"] == pytest.approx(100 * GB)


def test_three_tier_4096_gpu_system_builds_and_shows(capsys, tmp_path):
    # 4,096 H100 on a 2:1 oversubscribed 3-tier Quantum-2 fat tree: 128 leaves of 32 GPUs,
    # leaf uplinks 32 x 50 / 2 = 800 GB/s (102.4 TB/s in all) -> bisection 51.2 TB/s;
    # 4 spine groups of 32 leaves x 16 uplink ports / 32 down = 16 switches; core 2,048
    # ports / 64 = 32 switches.
    path = tmp_path / "h100-3tier.yaml"
    path.write_text(THREE_TIER_YAML)
    png = tmp_path / "big.png"
    summary = _json(capsys, "show", "system", str(path), "--gpus", "4096", "--png", str(png))
    assert summary["domains"] == 512
    assert summary["switches_per_tier"] == {"nvlink": 2048, "leaf": 128, "spine": 64,
                                            "core": 32}
    assert summary["bisection_bandwidth_bytes_per_s"] == pytest.approx(51_200 * GB)
    assert png.read_bytes()[:8] == PNG_SIGNATURE


def test_show_writes_the_default_png_in_the_current_folder(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["show", "system", "dgx-h100"]) == 0
    assert "written to dgx-h100-32.png" in capsys.readouterr().out
    assert (tmp_path / "dgx-h100-32.png").read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.parametrize("name", SYSTEM_NAMES)
@pytest.mark.parametrize("switch", SWITCHES)
def test_every_system_builds_on_every_scale_out_switch(name, switch):
    system = system_with(load_system(name), scale_out_switch=switch)
    topology = build_topology(system, 4 * system.gpus_per_domain)
    assert topology.num_domains == 4


def test_new_systems_carry_their_cited_parts():
    h800 = system_summary("hgx-h800", 16)
    assert h800["nvlink_bandwidth_per_gpu_bytes_per_s"] == pytest.approx(200 * GB)
    assert h800["scale_out_bandwidth_per_gpu_bytes_per_s"] == pytest.approx(50 * GB)
    b300 = system_summary("dgx-b300", 16)
    assert (b300["gpu"], b300["nic"], b300["scale_out_switch"]) == (
        "b300", "connectx-8", "quantum-x800")
    assert b300["scale_out_bandwidth_per_gpu_bytes_per_s"] == pytest.approx(100 * GB)
    # An 800G ConnectX-8 on a 400G Quantum-2 port runs at the port's 50 GB/s.
    slow = system_with(load_system("dgx-b300"), scale_out_switch="quantum-2")
    summary = summarise(slow, build_topology(slow, 16))
    assert summary["scale_out_bandwidth_per_gpu_bytes_per_s"] == pytest.approx(50 * GB)


# --- the drawing -------------------------------------------------------------------------

def test_drawing_of_gb300_at_256_has_every_gpu_and_domain(tmp_path):
    path = tmp_path / "gb300.png"
    figure = draw_topology(drawing_data(*build_system("gb300-nvl72", 256)), path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    dots = _gids(figure, PathCollection)
    assert {"gpu", "nic", "leaf", "spine"} <= set(dots)
    assert len(dots["gpu"].get_offsets()) == 256 and len(dots["leaf"].get_offsets()) == 4
    assert len([bar for bar in figure.axes[0].patches if bar.get_gid() == "nvswitch"]) == 4
    edges = _gids(figure, LineCollection)
    assert len(edges["edges-nvlink"].get_segments()) == 256
    assert len(edges["edges-leaf"].get_segments()) == 4
    assert "gb300-nvl72: 256 GPUs" in figure.axes[0].get_title()


def test_large_drawing_is_summarised(tmp_path):
    path = tmp_path / "big.png"
    figure = draw_topology(drawing_data(*build_system("dgx-h100", 1024)), path)
    gpus = len(_gids(figure, PathCollection)["gpu"].get_offsets())
    assert gpus == 8 * 8  # the first 7 domains and the last
    texts = [text.get_text() for text in figure.axes[0].texts]
    assert any("120 more" in text and "960 GPUs" in text for text in texts)
    assert "summarised" in figure.axes[0].get_title()


def test_failed_png_write_leaves_no_file(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(Figure, "savefig", fail)
    with pytest.raises(OSError):
        draw_topology(drawing_data(*build_system("dgx-h100", 16)), tmp_path / "x.png")
    assert list(tmp_path.iterdir()) == []


# --- errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["list", "gadgets"], ["'gadgets'", "gpus, systems, models, recipes"]),
    (["show", "model", "deepseek-v3"], ["'model'", "system"]),
    (["show", "system", "nvl999"], ["'nvl999'", "gb300-nvl72", "hgx-h800"]),
    (["show", "system", "gb300-nvl72", "--domain-size", "80"], ["domain_size", "1..72", "80"]),
    (["show", "system", "dgx-h100", "--gpus", "0"], ["num_gpus", "0"]),
    (["show", "system", "dgx-h100", "--png", "missing/x.png"], ["missing", "does not exist"]),
], ids=["list-table", "show-subject", "system-name", "domain-size", "gpus", "png-folder"])
def test_bad_input_gets_one_line_error_and_no_file(one_line_error, tmp_path, monkeypatch, args,
                                                   words):
    monkeypatch.chdir(tmp_path)
    line = one_line_error(args)
    assert all(word in line for word in words)
    assert list(Path(tmp_path).rglob("*.png")) == []


# --- format_table ------------------------------------------------------------------------

def test_format_table_aligns_text_left_and_numbers_right():
    rows = [{"name": "h100", "tb_per_s": 3.35, "gpus": 1024, "nvfp4": None, "ok": True},
            {"name": "gb300", "tb_per_s": 8.0, "gpus": 8, "ok": False}]
    lines = format_table(rows).splitlines()
    assert lines[0].split() == ["name", "tb_per_s", "gpus", "nvfp4", "ok"]
    assert set(lines[1]) == {"-", " "}
    assert lines[2].split() == ["h100", "3.35", "1,024", "-", "yes"]
    assert lines[3].split() == ["gb300", "8.00", "8", "-", "no"]
    gpus_end = lines[0].index("gpus") + len("gpus")  # numbers and their header end together
    assert lines[2].index("1,024") + len("1,024") == gpus_end
    assert lines[3].index(" 8 ") + 2 == gpus_end
    assert lines[3].index("8.00") == lines[2].index("3.35")  # decimal points line up
    assert lines[3].index("no") == lines[2].index("yes") == lines[0].index("ok")


def test_format_table_picks_columns_and_rounds_to_four_digits():
    rows = [{"a": 1978.9, "b": "x"}, {"a": 989.4, "b": "y"}]
    assert format_table(rows, ["b"]).splitlines()[2] == "x"
    assert [line.split()[0] for line in format_table(rows).splitlines()[2:]] == [
        "1,978.9", "989.4"]
    assert format_table([{"a": 1978.9}]).splitlines()[2].strip() == "1,979"


def test_a_count_takes_the_plural_unless_it_is_one():
    assert [counted(n, "row") for n in (0, 1, 2)] == ["0 rows", "1 row", "2 rows"]
    assert counted(3, "switch", "switches") == "3 switches"
