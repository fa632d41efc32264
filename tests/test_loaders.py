"""YAML loaders with `extends`: systems (and derived parts), models, recipes, whole scenarios.

Each round-trips its catalog (a file that only says `extends: X` is X), takes one-field
changes, and turns every malformed input into one ValueError line naming the file and the key;
property tests check that random input gives a valid object or such a line, never another
exception type.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.calibration import FIRST_PRINCIPLES
from simulator.scenario import Scenario, default_scenario
from simulator.scenario_files import load_scenario_file
from topologies.hardware import GPUSpec, gpu_spec
from topologies.systems import (SYSTEM_NAMES, SystemSpec, load_system, system_from_mapping,
                                system_gpu, system_nvlink_switch, system_with)
from workloads.model_files import Origin, load_model_file, model_from_mapping
from workloads.models import MODELS, ModelSpec
from workloads.recipe_files import load_recipe_file, recipe_from_mapping
from workloads.recipes import RECIPES, Recipe, recipe_with

SCENARIOS = Path(__file__).parent / "data" / "scenarios"
LOADERS: dict[str, Callable[[Path], Any]] = {
    "system": lambda path: load_system(str(path)), "model": load_model_file,
    "recipe": load_recipe_file, "scenario": load_scenario_file}


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def one_line_error(load: Callable[[Path], Any], path: Path, *fragments: str) -> str:
    """The ValueError message of load(path), asserted one line naming the file and fragments."""
    with pytest.raises(ValueError) as error:
        load(path)
    message = str(error.value)
    assert "\n" not in message and str(path) in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


# --- round trips and one-field changes --------------------------------------------------------

@pytest.mark.parametrize("name", SYSTEM_NAMES)
def test_a_system_file_extending_a_catalog_system_is_that_system(tmp_path: Path,
                                                                 name: str) -> None:
    assert load_system(str(write(tmp_path, "s.yaml", f"extends: {name}\n"))) == load_system(name)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_model_file_extending_a_catalog_model_is_that_model(tmp_path: Path, name: str) -> None:
    assert load_model_file(write(tmp_path, "m.yaml", f"extends: {name}\n")) == MODELS[name]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_a_recipe_file_extending_a_catalog_recipe_is_that_recipe(tmp_path: Path,
                                                                 name: str) -> None:
    assert load_recipe_file(write(tmp_path, "r.yaml", f"extends: {name}\n")) == RECIPES[name]


def test_a_scenario_file_extending_default_is_the_default(tmp_path: Path) -> None:
    assert load_scenario_file(write(tmp_path, "s.yaml", "extends: default\n")) == \
        default_scenario()


def test_the_full_example_spells_out_the_default_scenario() -> None:
    """Everything but the cost parameters, which the file gives at their first-principles
    values (the default is the shipped calibration)."""
    loaded = load_scenario_file(SCENARIOS / "dsv3-gb300-full.yaml")
    assert loaded == replace(default_scenario(), params=loaded.params)
    assert loaded.params.host_launch_s == FIRST_PRINCIPLES.host_launch_s


def test_one_field_changes(tmp_path: Path) -> None:
    text = "extends: gb300-nvl72\nnic: connectx-7\n"
    system = load_system(str(write(tmp_path, "cx7.yaml", text)))
    assert system == system_with(load_system("gb300-nvl72"), nic="connectx-7", name="cx7")
    model = load_model_file(write(tmp_path, "nomtp.yaml", "extends: deepseek-v3\nmtp_layers: 0\n"))
    assert model == replace(MODELS["deepseek-v3"], mtp_layers=0, name="nomtp")
    recipe = load_recipe_file(write(tmp_path, "r.yaml", "extends: mbridge-26.06\n"
                                    "name: no-overlap\na2a_overlap: false\n"))
    assert recipe == recipe_with(RECIPES["mbridge-26.06"], a2a_overlap=False, name="no-overlap")
    scenario = load_scenario_file(SCENARIOS / "gbs-8192.yaml")
    assert scenario == replace(default_scenario(),
                               plan=replace(default_scenario().plan, gbs=8192))


def test_the_gb300_rack_with_36_tbs_nvlink_derives_gpu_and_switch(tmp_path: Path) -> None:
    scenario = load_scenario_file(SCENARIOS / "gb300-nvlink-3.6tbs.yaml")
    gpu, switch = system_gpu(scenario.system), system_nvlink_switch(scenario.system)
    assert (gpu.name, gpu.nvlink_bandwidth_bytes_per_s) == ("gb300-nvlink3.6", 1.8e12)
    assert replace(gpu, name="gb300", nvlink_bandwidth_bytes_per_s=900e9) == gpu_spec("gb300")
    assert (switch.name, switch.port_bandwidth_bytes_per_s) == ("nvlink-switch-100g", 100e9)
    assert hash(scenario.system) and replace(scenario, system=load_system("gb300-nvl72")) == \
        default_scenario()


def test_a_derived_part_merges_peaks_and_names_itself(tmp_path: Path) -> None:
    path = write(tmp_path, "fp4.yaml", "extends: gb300-nvl72\ngpu:\n  peak_flops_per_s:\n"
                 "    nvfp4: 2.0e+16\n")
    gpu = system_gpu(load_system(str(path)))
    assert gpu.name == "gb300-custom" and gpu.peak("nvfp4") == 2e16 and gpu.peak("bf16") == 2.5e15
    assert load_system(str(path)).gpu == gpu and load_system(str(path)).name == "fp4"


def test_extends_chains_resolve_relative_to_each_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "base.yaml", "extends: mbridge-26.02\nfp8_attention: true\n")
    top = write(tmp_path, "top.yaml", "extends: sub/base.yaml\nname: top\n")
    assert load_recipe_file(top) == recipe_with(RECIPES["mbridge-26.02"], fp8_attention=True,
                                                name="top")
    write(tmp_path / "sub", "base-model.yaml", "extends: llama3-8b\nnum_layers: 16\n")
    scenario = load_scenario_file(write(tmp_path, "sc.yaml", (
        "extends: default\nmodel: sub/base-model.yaml\nrecipe: sub/base.yaml\n"
        "plan: {tp: 1, ep: 1, vpp: 1, gbs: 256}\n")))
    assert scenario.model.num_layers == 16 and scenario.plan.layout is None  # layers changed
    assert scenario.recipe.fp8_attention


def test_model_files_take_megatrons_layer_frequency_forms(tmp_path: Path) -> None:
    text = "extends: deepseek-v3\nmoe_layer_freq: '([0]*3+[1]*58)'\n"
    assert load_model_file(write(tmp_path, "a.yaml", text)) == MODELS["deepseek-v3"]
    every_other = load_model_file(write(tmp_path, "b.yaml", "extends: deepseek-v3\n"
                                        "moe_layer_freq: 2\n"))
    assert every_other.moe_layer_freq[:4] == (1, 0, 1, 0) and every_other.name == "b"


def test_a_system_without_extends_needs_every_key_and_parts_may_be_new(tmp_path: Path) -> None:
    text = (SCENARIOS.parents[2] / "topologies/systems/dgx-h100.yaml").read_text()
    text = text.replace("nic: connectx-7", "nic: {name: cx9, bandwidth_bytes_per_s: 200e9, "
                        "latency_s: 1e-6}")
    system = load_system(str(write(tmp_path, "h.yaml", text)))
    assert system.nic.name == "cx9" and system.nic.bandwidth_bytes_per_s == 200e9


# --- malformed input --------------------------------------------------------------------------

HOSTILE = '!!python/object/apply:os.system ["echo pwned"]\n'


@pytest.mark.parametrize("kind", sorted(LOADERS))
@pytest.mark.parametrize("text, fragments", [
    (HOSTILE, ("safe_load",)),
    ("a: [1, 2\n", ("safe_load",)),
    ("- extends: default\n", ("mapping", "list")),
    ("extends: no-such-entry\n", ("extends", "no-such-entry")),
    ("extends: ./missing.yaml\n", ("missing.yaml", "cannot read file")),
    ("extends: default\nbogus_key: 1\n", ("bogus_key", "allowed are")),
    ("\xff\xfe", ("cannot read file",)),
])
def test_malformed_files_are_one_line_errors(tmp_path: Path, kind: str, text: str,
                                             fragments: tuple[str, ...]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(text.encode("latin-1") if text == "\xff\xfe" else text.encode("utf-8"))
    if "extends: default" in text and kind != "scenario":
        path.write_text(text.replace("default", {"system": "gb300-nvl72", "model": "deepseek-v3",
                                                 "recipe": "mbridge-26.06"}[kind]))
    one_line_error(LOADERS[kind], path, *fragments)


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_extends_cycles_are_one_line_errors(tmp_path: Path, kind: str) -> None:
    write(tmp_path, "a.yaml", "extends: b.yaml\n")
    write(tmp_path, "b.yaml", "extends: a.yaml\n")
    one_line_error(LOADERS[kind], tmp_path / "a.yaml", "cycle", "a.yaml")
    write(tmp_path, "self.yaml", "extends: self.yaml\n")
    one_line_error(LOADERS[kind], tmp_path / "self.yaml", "cycle")


@pytest.mark.parametrize("kind, text, fragments", [
    ("model", "extends: deepseek-v3\nhidden_size: big\n", ("hidden_size='big'", "an integer")),
    ("model", "extends: deepseek-v3\nhidden_size: -1\n", ("hidden_size=-1", ">= 1")),
    ("model", "extends: deepseek-v3\nswiglu: 1\n", ("swiglu=1", "true or false")),
    ("model", "name: tiny\nhidden_size: 64\n", ("missing key 'num_layers'",)),
    ("model", "extends: deepseek-v3\nmoe_layer_freq: '[1]*999999999'\n", ("moe_layer_freq",)),
    ("model", "extends: deepseek-v3\nmoe_layer_freq: 2\nnum_layers: 9999999\n",
     ("moe_layer_freq", "num_layers=9999999")),
    ("recipe", "extends: mbridge-26.06\ndispatcher: carrier-pigeon\n",
     ("dispatcher='carrier-pigeon'", "must be one of")),
    ("recipe", "extends: mbridge-26.06\nrecompute_modules: mlp\n", ("recompute_modules='mlp'",)),
    ("recipe", "extends: mbridge-26.06\nexpert_capacity_factor: .inf\n",
     ("expert_capacity_factor=inf", "finite number or null")),
    ("system", "extends: gb300-nvl72\ngpus_per_domain: -8\n", ("gpus_per_domain", "-8")),
    ("system", "extends: gb300-nvl72\ngpu: h999\n", ("unknown gpu 'h999'",)),
    ("system", "extends: gb300-nvl72\ngpu: {extends: h999}\n", ("unknown gpu 'h999'",)),
    ("system", "extends: gb300-nvl72\ngpu: {sm_count: many}\n", ("sm_count must be a positive",)),
    ("system", "extends: gb300-nvl72\ngpu: {hbm_gb: 9}\n",
     ("gpu: unknown key 'hbm_gb'", "nvlink_bandwidth_bytes_per_s")),
    ("system", "extends: gb300-nvl72\ngpu: {peak_flops_per_s: {fp64: 1}}\n",
     ("peak_flops_per_s",)),
    ("system", "extends: gb300-nvl72\nnic: {latency_s: fast}\n", ("nic.latency_s", "'fast'")),
    ("system", "extends: gb300-nvl72\noversubscription: 1e999\n", ("oversubscription",)),
    ("scenario", "extends: default\nplan: {tp: -2}\n", ("plan", "tp=-2", "an integer")),
    ("scenario", "extends: default\nplan: {tp: 3}\n", ("plan", "tp*cp*pp")),
    ("scenario", "extends: default\nplan: {gpus: 256, num_gpus: 256}\n", ("given twice",)),
    ("scenario", "extends: default\nplan: {vpp: 100000000, gbs: 200000000}\n", ("pp*vpp",)),
    ("scenario", "extends: default\nplan: {layout: 't*9999999999999'}\n", ("layout",)),
    ("scenario", "extends: default\ndomain_size: 0\n", ("domain_size=0", "1..72")),
    ("scenario", "extends: default\nfailed_trays: 9\n", ("failed_trays=9", "0..8")),
    ("scenario", "extends: default\nmodel: gpt-7\n", ("model", "'gpt-7'", "unknown model")),
    ("scenario", "extends: default\nrecipe: {extends: nemo-1}\n", ("recipe", "nemo-1")),
    ("scenario", "extends: default\nsystem: nvl999\n", ("system", "unknown system 'nvl999'")),
    ("scenario", "extends: default\nsystem: {extends: gb300-nvl72, rails: 0}\n",
     ("system", "rails must be a positive int")),
    ("scenario", "extends: default\ncalibration: {gemm_efficiency: {fp9: 0.5}}\n",
     ("calibration", "gemm_efficiency.fp9", "known are")),
    ("scenario", "extends: default\ncalibration: {memory_efficiency: 2}\n",
     ("calibration", "memory_efficiency")),
    ("scenario", "extends: default\ncalibration: {host_launch_s: soon}\n",
     ("host_launch_s='soon'",)),
    ("scenario", "extends: default\nmodel: {extends: deepseek-v3, num_experts: 120}\n",
     ("plan", "num_experts=120")),
    ("scenario", "system: gb300-nvl72\nmodel: deepseek-v3\nrecipe: mbridge-26.06\n",
     ("missing key 'plan'",)),
    ("scenario", "system: gb300-nvl72\nmodel: deepseek-v3\nrecipe: mbridge-26.06\n"
     "plan: {tp: 1}\n", ("missing key 'num_gpus'",)),
    ("scenario", "extends: 7\n", ("extends=7", "unknown scenario; known are default")),
])
def test_bad_values_name_the_file_the_key_and_the_value(
        tmp_path: Path, kind: str, text: str, fragments: tuple[str, ...]) -> None:
    one_line_error(LOADERS[kind], write(tmp_path, "bad.yaml", text), *fragments)


def test_models_come_from_hugging_face_config_files_too(tmp_path: Path) -> None:
    pytest.importorskip("workloads.hf_config")
    hf = SCENARIOS.parent / "hf" / "deepseek-v3.json"
    assert load_model_file(hf) == MODELS["deepseek-v3"]
    model = load_model_file(write(tmp_path, "m.yaml", f"extends: {hf}\nmtp_layers: 0\n"))
    assert model == replace(MODELS["deepseek-v3"], mtp_layers=0, name="m")
    scenario = load_scenario_file(write(tmp_path, "s.yaml", f"extends: default\nmodel: {hf}\n"))
    assert scenario == default_scenario()
    one_line_error(load_model_file, write(tmp_path, "config.json", "[1]"), "JSON object")


# --- property-based: a valid object or one ValueError line, nothing else -----------------------

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**6), st.integers(),
                    st.floats(allow_nan=True), st.text(max_size=12),
                    st.sampled_from(["gb300", "gb300-nvl72", "deepseek-v3", "mbridge-26.06",
                                     "default", "x.yaml", "1.8e12", "([0]*3+[1]*58)", "mla",
                                     "hybridep", "Et*4|(t*4|)*14tmL", "distributed-optimizer",
                                     "nic:17", "nvlink:300"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=8)


def mappings(keys: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.one_of(st.sampled_from(keys), st.text(max_size=6)), VALUES,
                           max_size=6)


def valid_or_one_line(build: Callable[[], Any], kind: type) -> None:
    try:
        result = build()
    except ValueError as error:
        assert "\n" not in str(error), str(error)
        return
    assert isinstance(result, kind)
    hash(result) if kind is not Scenario else None


MODEL_KEYS = ("extends", "name", "hidden_size", "num_layers", "moe_layer_freq", "num_experts",
              "attention", "q_lora_rank", "mtp_layers", "sliding_window", "num_query_groups")
RECIPE_KEYS = ("extends", "name", "precision", "dispatcher", "dispatcher_sms", "cuda_graphs",
               "recompute_modules", "expert_capacity_factor", "a2a_overlap")
SYSTEM_KEYS = ("extends", "name", "gpu", "gpus_per_domain", "nvlink_switch", "nic", "tiers",
               "oversubscription", "rails", "scale_out_switch")
PART_KEYS = ("extends", "name", "sm_count", "nvlink_bandwidth_bytes_per_s", "peak_flops_per_s",
             "hbm_capacity_bytes", "port_bandwidth_bytes_per_s", "trays_per_rack", "latency_s")
PLAN_KEYS = ("gpus", "tp", "pp", "vpp", "ep", "etp", "cp", "mbs", "gbs", "seq_len", "layout",
             "dp_sharding")
SCENARIO_KEYS = ("extends", "system", "model", "plan", "recipe", "domain_size", "failed_trays",
                 "calibration", "straggler_gpu", "straggler_slowdown", "degraded_link",
                 "degraded_link_bandwidth_fraction")
HERE = Origin(Path("memory.yaml"))
FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@FUZZ
@given(mappings(MODEL_KEYS))
def test_random_model_mappings(data: dict[str, Any]) -> None:
    valid_or_one_line(lambda: model_from_mapping(data, HERE), ModelSpec)


@FUZZ
@given(mappings(RECIPE_KEYS))
def test_random_recipe_mappings(data: dict[str, Any]) -> None:
    valid_or_one_line(lambda: recipe_from_mapping(data, HERE), Recipe)


@FUZZ
@given(mappings(SYSTEM_KEYS), st.sampled_from(["gpu", "nvlink_switch", "nic"]),
       mappings(PART_KEYS))
def test_random_system_mappings(data: dict[str, Any], part: str, spec: dict[str, Any]) -> None:
    valid_or_one_line(lambda: system_from_mapping(data, Path("memory.yaml")), SystemSpec)
    derived = {"extends": "gb300-nvl72", part: spec}
    valid_or_one_line(lambda: system_from_mapping(derived, Path("memory.yaml")), SystemSpec)


@FUZZ
@given(st.dictionaries(st.sampled_from(SCENARIO_KEYS), VALUES, max_size=4),
       st.dictionaries(st.sampled_from(PLAN_KEYS), st.one_of(st.integers(-2, 600), VALUES),
                       max_size=5))
def test_random_scenario_files(data: dict[str, Any], plan: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "scenario.yaml"
        path.write_text(yaml.safe_dump({"extends": "default", **data, "plan": plan}),
                        encoding="utf-8")
        valid_or_one_line(lambda: load_scenario_file(path), Scenario)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(sorted(LOADERS)), st.text(max_size=80))
def test_random_text_files(kind: str, text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "random.yaml"
        path.write_text(text, encoding="utf-8")
        valid_or_one_line(lambda: LOADERS[kind](path), object)


def test_a_derived_gpu_keeps_the_system_hashable_and_comparable() -> None:
    derived = system_from_mapping({"extends": "gb300-nvl72",
                                   "gpu": {"nvlink_bandwidth_bytes_per_s": 1.8e12}},
                                  Path("x.yaml"))
    assert isinstance(derived.gpu, GPUSpec) and derived.gpu.name == "gb300-custom"
    assert {derived: 1}[derived] == 1 and derived != load_system("gb300-nvl72")
