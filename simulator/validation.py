"""Predicted vs measured: run every row of a measurements CSV and report the signed error.

A row (its columns: the README's "Your own runs") becomes a Scenario: the system its `system` column
names or else the catalog system of its GPU, the model (a catalog name or a model file) with the
row's MTP depth, the row's plan, and its release's recipe (or a recipe file's) with the row's
explicit flags on top. A long step is extrapolated from short ones once they have settled, else
simulated whole (simulator.steady_state). Predicted TFLOP/s count FLOPs with the row's own
`flops_formula`. The error is on tokens/s where the row measured it, else on TFLOP/s:

    error_pct = 100 * (predicted / measured - 1)

A row moesim cannot run is reported with its reason and counted, never skipped. Rows that give
moesim the same scenario (`scenario_key`: one configuration measured in several containers)
share one simulation.
"""

from __future__ import annotations

import math
import re
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from topologies.systems import SystemSpec, load_system, system_gpu
from workloads.flops import FLOPS_FORMULAS, reported_flops_per_token
from workloads.model_presets import model_preset
from workloads.model_files import YAML_SUFFIXES, load_model, names_file
from workloads.models import MODELS, ModelSpec
from workloads.parallelism import ParallelPlan
from workloads.recipe_files import load_recipe
from workloads.recipes import (GB200_GUIDE, RECIPES, Recipe, guide_step_recipe, recipe,
                               recipe_with)

from reports.tables import counted
from simulator.calibration import DEFAULT_PARAMS, CostParams
from simulator.metrics import StepMetrics
from simulator.scenario import Scenario, default_domain_size
from simulator.steady_state import run_steady_state

SYSTEM_OF_GPU = {"gb200": "gb200-nvl72", "gb300": "gb300-nvl72", "b200": "dgx-b200",
                 "b300": "dgx-b300", "h100": "dgx-h100", "h800": "hgx-h800", "h200": "hgx-h200"}
# SMs the EP dispatcher kernels hold when a row names the dispatcher but not its SMs:
# HybridEP 32 (Megatron-Bridge DSv3 recipes), DeepEP 24 (Megatron GB200 guide §2.2.1).
DISPATCHER_SMS = {"alltoall": 0, "allgather": 0, "deepep": 24, "hybridep": 32}
REQUIRED_COLUMNS = ("name", "model", "gpu", "num_gpus", "precision", "tp", "pp", "vpp", "ep",
                    "etp", "cp", "mbs", "gbs", "seq_len", "release")
# Columns a CSV may leave out, read as empty: the release's default flags, the model's own MTP
# depth, no FSDP; one of the measurements must be there.
OPTIONAL_COLUMNS = {"fsdp": "0", "mtp_layers": "", "recompute": "", "dispatcher": "",
                    "cuda_graphs": "", "a2a_overlap": "", "fp8_attention": "", "routing": "",
                    "measured_tokens_per_s_per_gpu": "", "measured_tflops_per_gpu": "",
                    "flops_formula": ""}
# The FLOPs count of a row that measured tokens/s and names no formula (its predicted TFLOP/s).
DEFAULT_FLOPS_FORMULA = "megatron-causal"
# An optimisation ladder's row: `ladder-<ladder>-<NN>-<slug>` (data/README.md "Names"); the
# GB200 guide's is ladder "gb200" (simulator.ladders reports every ladder).
LADDER_ROW = re.compile(r"ladder-([a-z0-9]+)-(\d\d)\b")
# Megatron-Bridge's token-drop MoE (moe_token_drop.py): capacity factor 1, padded to capacity.
TOKEN_DROP_CAPACITY_FACTOR = 1.0
# Containers whose recipe differs from their release's (data/README.md: the `release` maps
# 26.06.01 to mbridge-26.06 and the `name` keeps the exact container).
CONTAINER_RECIPES = {"mb260601-": "mbridge-26.06.01"}
INTEGER_COLUMNS = ("num_gpus", "tp", "pp", "vpp", "ep", "etp", "cp", "mbs", "gbs", "seq_len",
                   "fsdp", "mtp_layers")
MEASURED_COLUMNS = ("measured_tokens_per_s_per_gpu", "measured_tflops_per_gpu")
# The metric of a row whose error is on tokens/s (simulator.validation.error_metric).
TOKENS = "tokens/s"
# Columns with a closed vocabulary (data/README.md): the values each may take.
VOCABULARY = {"fsdp": ("0", "1"), "a2a_overlap": ("", "0", "1"), "fp8_attention": ("", "0", "1"),
              "routing": ("", "balanced", "dropless", "tokendrop")}


@dataclass(frozen=True, slots=True, kw_only=True)
class RowResult:
    """One row's outcome; `status` is "ok" or "failed" (then `reason` says why). A row that
    ran also carries its predicted step and where that step's time went (the `run` summary's
    breakdown, mean over GPUs), to see which part a miss is in."""

    name: str
    gpu: str
    model: str
    status: str
    reason: str
    predicted_tokens_per_s_per_gpu: float | None
    predicted_tflops_per_gpu: float | None
    measured_tokens_per_s_per_gpu: float | None
    measured_tflops_per_gpu: float | None
    error_pct: float | None
    predicted_step_time_s: float | None = None
    predicted_breakdown_s: dict[str, float] | None = None


def read_measurements(path: str | Path) -> list[dict[str, Any]]:
    """The CSV's rows as dicts; a one-line error names the file, row and column at fault."""
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read as CSV ({' '.join(str(error).split())})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if not set(MEASURED_COLUMNS) & set(frame.columns):
        missing.append(" or ".join(MEASURED_COLUMNS))
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
    rows = [{**OPTIONAL_COLUMNS, **row} for row in frame.to_dict("records")]
    if not rows:
        raise ValueError(f"{path}: no rows under the header; give at least one measured run")
    first_line: dict[str, int] = {}
    for number, row in enumerate(rows, start=2):
        where = f"{path}: line {number} ({row['name'] or 'no name'})"
        if row["name"] in first_line:
            raise ValueError(f"{where}: name={row['name']!r} is already on line "
                             f"{first_line[row['name']]}; row names must be unique")
        first_line[row["name"]] = number
        _check_vocabulary(row, where)
        _check_integers(row, where)
        _check_measured(row, where)
        row["flops_formula"] = _flops_formula(row, where)
    return rows


def _check_vocabulary(row: dict[str, Any], where: str) -> None:
    """A row has a name, and each closed-vocabulary column one of its values."""
    if not row["name"].strip():
        raise ValueError(f"{where}: name is empty; every row needs a unique name")
    for column, allowed in VOCABULARY.items():
        value = row.get(column, "").strip()
        if value not in allowed:
            shown = ", ".join(repr(a) for a in allowed)
            raise ValueError(f"{where}: {column}={value!r} must be one of {shown}")


def _check_integers(row: dict[str, Any], where: str) -> None:
    """The plan's columns are whole numbers; an empty `mtp_layers` is the model's own depth."""
    for column in INTEGER_COLUMNS:
        value = row[column].strip()
        if column == "mtp_layers" and not value:
            continue
        if not value.isdigit():
            allowed = "a non-negative integer" + (", or empty" if column == "mtp_layers" else "")
            raise ValueError(f"{where}: {column}={row[column]!r} must be {allowed}")


def _flops_formula(row: dict[str, Any], where: str) -> str:
    """The row's FLOPs formula; Megatron's where it names none and measured tokens/s."""
    formula = row["flops_formula"].strip()
    if formula:
        return formula
    if not row["measured_tokens_per_s_per_gpu"].strip():
        raise ValueError(f"{where}: flops_formula is empty; a row measured in TFLOP/s alone "
                         f"must say how its source counted FLOPs ({', '.join(FLOPS_FORMULAS)})")
    return DEFAULT_FLOPS_FORMULA


def _check_measured(row: dict[str, Any], where: str) -> None:
    """A row's measurements: each given one a positive number, at least one given."""
    given = [column for column in MEASURED_COLUMNS if row[column].strip()]
    if not given:
        raise ValueError(f"{where}: needs {' or '.join(MEASURED_COLUMNS)}")
    for column in given:
        try:
            value = float(row[column])
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{where}: {column}={row[column]!r} must be a positive number")


def _number(text: str) -> float | None:
    return float(text) if text.strip() else None


def _flag(text: str) -> bool | None:
    return None if not text.strip() else text.strip() == "1"


def row_files(rows: list[dict[str, Any]]) -> tuple[str, ...]:
    """The model, recipe and system files that `rows` name (not the files those extend), each
    once, in the order met."""
    named = [row["model"] for row in rows if names_file(row["model"], MODELS)]
    named += [row["release"] for row in rows if names_file(row["release"], RECIPES)]
    systems = [row.get("system", "").strip() for row in rows]
    named += [name for name in systems if name.endswith(YAML_SUFFIXES)]
    return tuple(dict.fromkeys(named))


def row_model(row: dict[str, Any]) -> ModelSpec:
    """The row's `model`: a catalog name, or a model file (a path as `--model` takes it)."""
    return load_model(row["model"])


def _release_recipe(row: dict[str, Any], model: ModelSpec | None) -> Recipe:
    """The row's release with its performance scripts' preset for its model (`model`, read
    here if None) and GPU (workloads.model_presets); a GB200-guide ladder row
    (`ladder-gb200-NN-...`: the step is in the name, data/README.md) gets the guide's recipe
    after step NN, a row of a container with a recipe of its own (CONTAINER_RECIPES, by name)
    that recipe. A release given as a recipe file is taken as written, as `moesim run --recipe
    FILE` takes it."""
    written = load_recipe(row["release"], field="release")
    if names_file(row["release"], RECIPES):
        return written
    ladder = LADDER_ROW.match(row["name"])
    if row["release"] == GB200_GUIDE and ladder and ladder[1] == "gb200":
        return guide_step_recipe(int(ladder[2]))
    release = next((name for prefix, name in CONTAINER_RECIPES.items()
                    if row["name"].startswith(prefix)), row["release"])
    return recipe_with(recipe(release), **model_preset(
        release, (model or row_model(row)).name, row["gpu"], row["precision"]))


def row_recipe(row: dict[str, Any], model: ModelSpec | None = None) -> Recipe:
    """The release's recipe with the row's explicit flags applied; `model` is the row's
    (`row_model`), passed where it is already read."""
    changes: dict[str, Any] = {"precision": row["precision"]}
    if row["recompute"]:
        changes["recompute_modules"] = (() if row["recompute"] == "none"
                                        else tuple(row["recompute"].split("+")))
    if row["dispatcher"]:
        # An unknown dispatcher is refused by the Recipe's own check, which names the known.
        changes["dispatcher"] = row["dispatcher"]
        changes["dispatcher_sms"] = DISPATCHER_SMS.get(row["dispatcher"], 0)
    if row["cuda_graphs"]:
        changes["cuda_graphs"] = row["cuda_graphs"]
    for column, field in (("a2a_overlap", "a2a_overlap"), ("fp8_attention", "fp8_attention")):
        if _flag(row[column]) is not None:
            changes[field] = _flag(row[column])
    base = _release_recipe(row, model)
    if changes.get("a2a_overlap"):
        changes["shared_expert_overlap"] = False
    if changes["precision"] == "bf16":
        changes.update(fp8_attention=False, fp8_param_gather=False)
    if changes.get("cuda_graphs", base.cuda_graphs) != "full":
        changes["rank_capacity_factor"] = None
    if row.get("routing") == "tokendrop":
        changes["expert_capacity_factor"] = TOKEN_DROP_CAPACITY_FACTOR
    return recipe_with(base, **changes)


def row_system(row: dict[str, Any]) -> SystemSpec:
    """The row's `system` (a catalog name or a .yaml file, as `--system` takes it), else its
    GPU's usual system; the system's GPU must be the row's `gpu`, which the presets and the
    statistics go by."""
    name = row.get("system", "").strip()
    if not name:
        if row["gpu"] not in SYSTEM_OF_GPU:
            raise ValueError(f"gpu={row['gpu']!r}: known are {', '.join(SYSTEM_OF_GPU)} (or "
                             f"name the row's system in a `system` column)")
        return load_system(SYSTEM_OF_GPU[row["gpu"]])
    system = load_system(name)
    gpu = system_gpu(system).name
    if gpu != row["gpu"]:
        raise ValueError(f"system={name!r} has gpu {gpu!r}, not the row's gpu={row['gpu']!r}")
    return system


def row_scenario(row: dict[str, Any]) -> Scenario:
    """The Scenario a measured row describes."""
    system = row_system(row)
    integers = {c: int(row[c]) for c in INTEGER_COLUMNS if row[c].strip()}
    model = row_model(row)
    recipe_ = row_recipe(row, model)
    plan = ParallelPlan(num_gpus=integers["num_gpus"], tp=integers["tp"], pp=integers["pp"],
                        vpp=_chunks_per_rank(integers["vpp"], recipe_),
                        ep=integers["ep"], etp=integers["etp"],
                        cp=integers["cp"], mbs=integers["mbs"], gbs=integers["gbs"],
                        seq_len=integers["seq_len"],
                        dp_sharding="fsdp" if integers["fsdp"] else "distributed-optimizer")
    domain = default_domain_size(system)
    if "mtp_layers" in integers:
        model = model.with_mtp(integers["mtp_layers"])
    return Scenario(system=system, model=model,
                    plan=plan, recipe=recipe_, domain_size=domain)


def _chunks_per_rank(vpp: int, recipe_: Recipe) -> int:
    """The row's vpp, except under DualPipe: its rows count no virtual stages (vpp = 1), but
    each of its ranks runs two stages, as the DualPipeV that moesim runs for it does (vpp = 2)."""
    return 2 if recipe_.pipeline_schedule == "dualpipev" and vpp == 1 else vpp


def _measured(row: dict[str, Any]) -> tuple[float | None, float | None]:
    return _number(row["measured_tokens_per_s_per_gpu"]), _number(row["measured_tflops_per_gpu"])


def find_row(spec: str) -> dict[str, Any]:
    """The row `NAME` of `FILE.csv` from "FILE.csv:NAME" (the CSV checked as `validate` does)."""
    path, colon, name = spec.rpartition(":")
    if not colon or not path or not name:
        raise ValueError(f"--row {spec!r}: give FILE.csv:NAME, a measurements CSV and the name "
                         f"of one of its rows")
    rows = read_measurements(path)
    for row in rows:
        if row["name"] == name:
            return row
    raise ValueError(f"--row {spec!r}: {path} has no row named {name!r} "
                     f"({counted(len(rows), 'row')}; `moesim validate {path}` lists them)")


def row_comparison(row: dict[str, Any], scenario: Scenario,
                   predicted_tokens_per_s_per_gpu: float) -> dict[str, Any]:
    """A prediction for `scenario` set against `row`'s measurement: the row's name, source (if
    the CSV has the column) and measurements, the predicted TFLOP/s counted with the row's
    `flops_formula`, and the signed error (on tokens/s where measured, else on TFLOP/s; module
    docstring)."""
    tokens, tflops = _measured(row)
    flops_per_token = reported_flops_per_token(scenario.model, scenario.plan.seq_len,
                                               row["flops_formula"], scenario.plan.tp)
    predicted_tflops = predicted_tokens_per_s_per_gpu * flops_per_token / 1e12
    if tokens is not None:
        error = 100 * (predicted_tokens_per_s_per_gpu / tokens - 1)
    else:
        assert tflops is not None
        error = 100 * (predicted_tflops / tflops - 1)
    return {"name": row["name"], "source": row.get("source") or None,
            "measured_tokens_per_s_per_gpu": tokens,
            "measured_tflops_per_gpu": tflops, "flops_formula": row["flops_formula"],
            "predicted_tokens_per_s_per_gpu": predicted_tokens_per_s_per_gpu,
            "predicted_tflops_per_gpu": predicted_tflops, "error_pct": error}


def error_metric(result: RowResult, row: dict[str, Any]) -> str:
    """The metric `result`'s error is on: tokens/s where measured, else TFLOP/s counted with
    the row's `flops_formula`."""
    if result.measured_tokens_per_s_per_gpu is not None:
        return TOKENS
    return f"TFLOP/s ({row['flops_formula']})"


def metric_values(result: RowResult, metric: str) -> tuple[float | None, float | None]:
    """`result`'s measured and predicted value on `metric` (see `error_metric`)."""
    if metric == TOKENS:
        return result.measured_tokens_per_s_per_gpu, result.predicted_tokens_per_s_per_gpu
    return result.measured_tflops_per_gpu, result.predicted_tflops_per_gpu


def scenario_or_none(row: dict[str, Any]) -> Scenario | None:
    """The row's scenario, or None where moesim cannot build it (`built_scenarios`)."""
    [built] = built_scenarios([row])
    return None if isinstance(built, str) else built


def scenario_key(row: dict[str, Any]) -> str:
    """What moesim simulates for `row`, without the name of the row's recipe (which no part of
    the simulation reads): rows with equal keys get the same step."""
    return _key(row_scenario(row))


def _key(scenario: Scenario) -> str:
    return repr(replace(scenario, recipe=replace(scenario.recipe, name="")))


def built_scenarios(rows: list[dict[str, Any]],
                    params: CostParams = DEFAULT_PARAMS) -> list[Scenario | str]:
    """Each row's scenario under `params`, or why it cannot be built (a ValueError's message:
    bad plan, unknown name, a file that cannot be read); each row's files are read once."""
    built: list[Scenario | str] = []
    for row in rows:
        try:
            built.append(replace(row_scenario(row), params=params))
        except ValueError as failure:
            built.append(str(failure))
    return built


def first_alike(built: list[Scenario | str]) -> list[int]:
    """For each of `built_scenarios` the index of the first with its key (`scenario_key`); its
    own index where it could not be built."""
    first: dict[str, int] = {}
    return [index if isinstance(scenario, str) else first.setdefault(_key(scenario), index)
            for index, scenario in enumerate(built)]


def _steady_or_reason(built: Scenario | str) -> StepMetrics | str:
    """`run_steady_state` of a built scenario, or why it cannot run (its build's reason, or a
    ValueError's message: no fit for the plan)."""
    if isinstance(built, str):
        return built
    try:
        return run_steady_state(built)
    except ValueError as failure:
        return str(failure)


def _result(row: dict[str, Any], built: Scenario | str,
            outcome: StepMetrics | str) -> RowResult:
    """The row's result from its scenario and its simulated step (`_steady_or_reason`)."""
    tokens, tflops = _measured(row)
    common = dict(name=row["name"], gpu=row["gpu"], model=row["model"],
                  measured_tokens_per_s_per_gpu=tokens, measured_tflops_per_gpu=tflops)
    if isinstance(outcome, str):
        return _failed(outcome, common)
    assert not isinstance(built, str)
    try:
        comparison = row_comparison(row, built, outcome.tokens_per_s_per_gpu)
    except ValueError as failure:
        return _failed(str(failure), common)
    return RowResult(status="ok", reason="",
                     predicted_tokens_per_s_per_gpu=comparison["predicted_tokens_per_s_per_gpu"],
                     predicted_tflops_per_gpu=comparison["predicted_tflops_per_gpu"],
                     error_pct=comparison["error_pct"], predicted_step_time_s=outcome.step_time_s,
                     predicted_breakdown_s=dict(outcome.breakdown_s), **common)


def _failed(reason: str, common: dict[str, Any]) -> RowResult:
    return RowResult(status="failed", reason=reason, predicted_tokens_per_s_per_gpu=None,
                     predicted_tflops_per_gpu=None, error_pct=None, **common)


def validate_row(row: dict[str, Any], params: CostParams = DEFAULT_PARAMS) -> RowResult:
    """Run one row; a row that cannot run becomes a failed row with the reason."""
    [built] = built_scenarios([row], params)
    return _result(row, built, _steady_or_reason(built))


def validate_rows(rows: list[dict[str, Any]], params: CostParams = DEFAULT_PARAMS,
                  jobs: int = 1, progress: bool = False, client: Any = None) -> list[RowResult]:
    """Every row's result, in the rows' order; rows with the same `scenario_key` (the same
    configuration measured in several containers) share one simulation; `jobs` > 1 runs the
    simulations in parallel processes, a Dask `client` (simulator.dask_cluster) on its
    cluster's workers; `progress` shows a progress bar on stderr. Each row's scenario is built
    here, once, so the files that rows name are read here and the scenarios travel whole."""
    built = built_scenarios(rows, params)
    first = first_alike(built)
    alike = Counter(first)
    todo = {index: built[index] for index in range(len(rows)) if first[index] == index}
    outcomes: dict[int, StepMetrics | str] = {}
    bar = tqdm(total=len(rows), unit="row", disable=not progress, file=sys.stderr)
    with bar:
        for index, outcome in _outcomes(todo, jobs, client):
            outcomes[index] = outcome
            bar.update(alike[index])
    return [_result(row, built[index], outcomes[first[index]])
            for index, row in enumerate(rows)]


def _outcomes(todo: dict[int, Scenario | str], jobs: int,
              client: Any) -> Iterator[tuple[int, StepMetrics | str]]:
    """(index, outcome) of each scenario of `todo` as it finishes: on a Dask `client`'s
    cluster, in `jobs` local processes, or here one after another."""
    if client is not None:
        yield from _on_dask(client, todo)
    elif jobs <= 1:
        for index, scenario in todo.items():
            yield index, _steady_or_reason(scenario)
    else:
        # Leaving the block terminates the workers: an interrupt stops the rows in flight.
        with Pool(processes=jobs, initializer=_worker_signals) as pool:
            yield from pool.imap_unordered(_steady_indexed, todo.items())


def _on_dask(client: Any, todo: dict[int, Scenario | str]
             ) -> Iterator[tuple[int, StepMetrics | str]]:
    """(index, outcome) of each scenario as the cluster finishes it; leaving early cancels the
    rows still queued."""
    from distributed import as_completed as dask_completed

    futures = {}
    for index, scenario in todo.items():
        if isinstance(scenario, str):
            yield index, scenario
        else:
            futures[client.submit(_steady_or_reason, scenario, pure=False)] = index
    try:
        for future in dask_completed(futures, loop=client.loop):
            yield futures[future], future.result()
    finally:
        client.cancel(list(futures))


def _worker_signals() -> None:
    """A worker leaves Ctrl-C to its parent and dies quietly when the pool terminates it,
    whatever handlers the parent had installed when it forked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _steady_indexed(item: tuple[int, Scenario | str]) -> tuple[int, StepMetrics | str]:
    index, scenario = item
    return index, _steady_or_reason(scenario)


def error_stats(errors: list[float]) -> dict[str, float | None]:
    """Median, mean and max absolute error, and the mean signed error (the bias: + when
    moesim predicts faster than measured); None (JSON null) for each when no row ran."""
    absolute = sorted(abs(e) for e in errors)
    if not absolute:
        return {"median_abs_error_pct": None, "mean_abs_error_pct": None,
                "max_abs_error_pct": None, "mean_error_pct": None}
    return {"median_abs_error_pct": float(pd.Series(absolute).median()),
            "mean_abs_error_pct": sum(absolute) / len(absolute),
            "max_abs_error_pct": absolute[-1], "mean_error_pct": sum(errors) / len(errors)}


def _label_order(label: str) -> tuple[int, float, str]:
    """Numbers first, by value (pp = 2 before 16), then other labels alphabetically."""
    try:
        return (0, float(label), "")
    except ValueError:
        return (1, 0.0, label)


def _groups(labels: list[str], errors: list[float]) -> dict[str, dict[str, Any]]:
    """The statistics of the errors of each label, labels in `_label_order`."""
    return {label: {"n": labels.count(label),
                    **error_stats([e for other, e in zip(labels, errors) if other == label])}
            for label in sorted(set(labels), key=_label_order)}


def summarize(results: list[RowResult], rows: list[dict[str, Any]] | None = None,
              by: tuple[str, ...] = ()) -> dict[str, Any]:
    """Overall, per-GPU and per-model error statistics, and per value of each CSV column in
    `by` (`rows`: the measured rows, matched to `results` by name); failures are counted."""
    row_of = {row["name"]: row for row in rows or []}
    if by and any(r.name not in row_of for r in results):
        raise ValueError(f"summarize: by={by} needs the measured row of every result")
    ok = [i for i, r in enumerate(results) if r.status == "ok" and r.error_pct is not None]
    errors = [float(results[i].error_pct or 0.0) for i in ok]
    summary: dict[str, Any] = {"n": len(results), "n_failed": len(results) - len(ok),
                               **error_stats(errors)}
    for key in ("gpu", "model"):
        summary[f"by_{key}"] = _groups([getattr(results[i], key) for i in ok], errors)
    for column in by:
        summary[f"by_{column}"] = _groups([str(row_of[results[i].name][column]) for i in ok],
                                          errors)
    return summary
