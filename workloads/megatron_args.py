"""Megatron-LM / Megatron-Bridge command lines as ModelSpec, ParallelPlan and Recipe fields.

`parse_megatron_args(text)` reads a command line as Megatron's argparse would. Nothing is dropped
silently: what is not mapped is `ignored` (may matter for speed but is not modelled, or has no
effect on this line; with the reason) or `irrelevant` (no effect on step time: --lr, --save,
--data-path, --tokenizer-*, --log-*, --seed, program names). A bad value is a one-line
ValueError naming the flag, the value and what is allowed.

Tokens: `--flag value`, `--flag=value`, store_true `--flag`, list flags `--flag a b`;
Bridge/Hydra overrides `section.key=value`, read as `--key value`
(`model.tensor_model_parallel_size=2`, `ddp.overlap_grad_reduce=false`); environment
assignments `NAME=value` (NCCL_NVLS_ENABLE); shell quoting, `\\`-newline and `#` comments.

Megatron requires --num-layers, --hidden-size and --num-attention-heads, so a line giving all
three is *complete*: every flag it leaves out takes Megatron's default, as in Megatron (no
--swiglu: GeLU; no --num-experts: dense; no --overlap-grad-reduce: no overlap; dispatcher
allgather). Any other line (Bridge overrides, a few flags) lists *changes* to a base. A flag
that needs another (a dispatcher's SM count needs that dispatcher; --recompute-modules needs
--recompute-granularity selective) acts only with it on the same line, else it is ignored.
Assumptions the import makes (FP32 run as BF16, plain DDP as the distributed optimizer) are
`notes`. With --use-precision-aware-optimizer,

    optimizer_state_bytes_per_param = main params + exp_avg + exp_avg_sq  (fp32 4, bf16 2, fp8 1)
"""

import math
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.layout import parse_layout
from workloads.model_files import (UNSET, FlagValues, bounded_layout, model_fields_from_flags,
                                   parse_moe_layer_freq)
from workloads.recipe_files import BRIDGE_PRECISIONS, recipe_fields_from_flags

Parser = Callable[[str, tuple[str, ...]], Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class MegatronImport:
    """What a command line says, as moesim fields; `complete` as in the module docstring.
    model_fields["moe_layer_freq"] is always a tuple (an int N is expanded on the line)."""

    model_fields: dict[str, Any]
    plan_fields: dict[str, Any]
    recipe_fields: dict[str, Any]
    num_gpus: int | None
    complete: bool
    ignored: tuple[str, ...]
    irrelevant: tuple[str, ...]
    notes: tuple[str, ...]


def read_megatron_args(value: str) -> str:
    """`value` itself, or the text of FILE when `value` is "@FILE" (for --megatron-args)."""
    if not value.startswith("@"):
        return value
    try:
        return Path(value[1:]).read_text(encoding="utf-8")
    except (OSError, ValueError) as error:
        detail = getattr(error, "strerror", None) or " ".join(str(error).split())
        raise ValueError(f"--megatron-args {value!r}: cannot read file: {detail}") from None


# --- value parsers: (flag as written, its values) -> value ------------------------------------

def _one(name: str, values: tuple[str, ...]) -> str:
    if len(values) != 1:
        raise ValueError(f"{name}: expects one value, got {len(values)}")
    return values[0]


def _integer(low: int) -> Parser:
    def parse(name: str, values: tuple[str, ...]) -> int:
        text = _one(name, values)
        number = int(text) if re.fullmatch(r"\s*[+-]?\d{1,18}\s*", text) else low - 1
        if number < low:
            raise ValueError(f"{name}={text!r}: must be an integer >= {low}")
        return number
    return parse


def _gpus_per_node(name: str, values: tuple[str, ...]) -> int:
    """Slurm also writes TYPE:COUNT (--gpus-per-node gb300:4)."""
    return _integer(1)(name, (_one(name, values).rpartition(":")[2],))


def _factor(name: str, values: tuple[str, ...]) -> float | None:
    text = _one(name, values)
    if text.strip().lower() in ("none", "null"):
        return None
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name}={text!r}: must be a number > 0 (or None: dropless)")
    return number


def _switch(name: str, values: tuple[str, ...]) -> bool:
    """store_true: the bare flag is true; `=value` (Bridge, environment) says which."""
    if not values:
        return True
    text = _one(name, values).strip().lower()
    if text in ("true", "1", "yes", "on", "false", "0", "no", "off"):
        return text in ("true", "1", "yes", "on")
    raise ValueError(f"{name}={values[0]!r}: must be true or false (1/0), or the bare flag")


def _choice(*allowed: str) -> Parser:
    def parse(name: str, values: tuple[str, ...]) -> str:
        text = _one(name, values)
        if text not in allowed:
            raise ValueError(f"{name}={text!r}: must be one of {', '.join(allowed)}")
        return text
    return parse


def _words(name: str, values: tuple[str, ...]) -> tuple[str, ...]:
    """A list flag's values; a Bridge list arrives as one "[a,b]" value."""
    text = re.sub(r"[\[\],'\"]", " ", " ".join(values))
    return tuple(text.split())


_DTYPE_BYTES = {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2,
                "fp8": 1, "uint8": 1}


def _dtype_bytes(name: str, values: tuple[str, ...]) -> int:
    text = _one(name, values)
    key = text.strip().lower().removeprefix("torch.")
    if key not in _DTYPE_BYTES:
        raise ValueError(f"{name}={text!r}: must be one of fp32, fp16, bf16, fp8")
    return _DTYPE_BYTES[key]


def _frequency(name: str, values: tuple[str, ...]) -> int | tuple[int, ...]:
    text = _one(name, values)
    try:
        return parse_moe_layer_freq(text)
    except ValueError as error:
        raise ValueError(f"{name}={text!r}: {error}") from None


def _layout(name: str, values: tuple[str, ...]) -> str:
    text = _one(name, values)
    try:
        parse_layout(bounded_layout(text))
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None
    return text


# --- the flags moesim maps, their spellings and Megatron's defaults ---------------------------

_POSITIVE, _COUNT = _integer(1), _integer(0)
_SWITCHES = """--group-query-attention --multi-latent-attention --swiglu
    --untie-embeddings-and-output-weights --share-embeddings-and-output-weights
    --use-distributed-optimizer --use-megatron-fsdp --use-torch-fsdp2 --bf16 --fp16
    --moe-enable-deepep --enable-cuda-graph --external-cuda-graph --delay-wgrad-compute
    --overlap-moe-expert-parallel-comm --moe-shared-expert-overlap --overlap-grad-reduce
    --overlap-param-gather --tp-comm-overlap --recompute-activations --fp8-dot-product-attention
    --fp8-param-gather
    --grad-reduce-in-bf16 --grad-reduce-in-fp32 --accumulate-allreduce-grads-in-fp32
    --use-precision-aware-optimizer --qk-layernorm --disable-bias-linear --add-bias-linear
    --moe-router-fusion --moe-permute-fusion NCCL_NVLS_ENABLE NVTE_NORM_FWD_USE_CUDNN
    --cpu-offloading --use-transformer-engine-op-fuser --moe-pad-expert-input-to-capacity""".split()
_FLAGS: dict[str, Parser] = {
    **dict.fromkeys("""--hidden-size --num-layers --ffn-hidden-size --num-attention-heads
        --num-query-groups --kv-channels --q-lora-rank --kv-lora-rank --qk-head-dim --v-head-dim
        --moe-ffn-hidden-size --moe-router-topk --moe-router-num-groups --moe-router-group-topk
        --vocab-size --make-vocab-size-divisible-by
        --seq-length --tensor-model-parallel-size --pipeline-model-parallel-size
        --num-virtual-stages-per-pipeline-rank --num-layers-per-virtual-pipeline-stage
        --expert-model-parallel-size --expert-tensor-parallel-size --context-parallel-size
        --micro-batch-size --global-batch-size --moe-deepep-num-sms --moe-hybridep-num-sms
        --recompute-num-layers --nnodes --nproc-per-node --num-gpus""".split(),
                    _POSITIVE),
    **dict.fromkeys(["--qk-pos-emb-head-dim", "--num-experts", "--mtp-num-layers",
                     "--moe-shared-expert-intermediate-size", "--cpu-offloading-num-layers"],
                    _COUNT),
    **dict.fromkeys(_SWITCHES, _switch),
    **dict.fromkeys(["--main-grads-dtype", "--main-params-dtype", "--exp-avg-dtype",
                     "--exp-avg-sq-dtype"], _dtype_bytes),
    **dict.fromkeys(["--moe-expert-capacity-factor", "--moe-expert-rank-capacity-factor"],
                    _factor),
    "--gpus-per-node": _gpus_per_node,
    "--moe-layer-freq": _frequency,
    "--pipeline-model-parallel-layout": _layout,
    "--data-parallel-sharding-strategy": _choice("no_shard", "optim", "optim_grads",
                                                 "optim_grads_params"),
    "--mixed-precision": _choice(*BRIDGE_PRECISIONS),
    "--softmax-type": _choice("vanilla", "learnable", "off-by-one"),
    "--fp8-format": _choice("e4m3", "hybrid"),
    "--fp8-recipe": _choice("tensorwise", "delayed", "mxfp8", "blockwise", "custom"),
    "--fp4-format": _choice("e2m1"),
    "--fp4-recipe": _choice("nvfp4", "custom"),
    "--moe-token-dispatcher-type": _choice("allgather", "alltoall", "flex"),
    "--moe-flex-dispatcher-backend": _choice("deepep", "hybridep"),
    "--cuda-graph-impl": _choice("none", "local", "transformer_engine", "full_iteration"),
    "--cuda-graph-scope": _words,
    "--recompute-granularity": _choice("full", "selective"),
    "--recompute-method": _choice("uniform", "block"),
    "--recompute-modules": _words,
}
_ALIASES = {  # older Megatron, Bridge config names and launchers -> the _FLAGS spelling
    "--virtual-pipeline-model-parallel-size": "--num-virtual-stages-per-pipeline-rank",
    "--cuda-graph-modules": "--cuda-graph-scope", "--num-moe-experts": "--num-experts",
    "--sequence-length": "--seq-length", "--fp8": "--fp8-format", "--fp4": "--fp4-format",
    "--moe-a2a-overlap": "--overlap-moe-expert-parallel-comm", "--gated-linear-unit": "--swiglu",
    "--nodes": "--nnodes", "-N": "--nnodes", "-ng": "--num-gpus", "-gn": "--gpus-per-node",
}
_DEFAULTS: dict[str, Any] = {  # megatron/training/arguments.py; store_true flags default False
    "--make-vocab-size-divisible-by": 128, "--mtp-num-layers": 0, "--kv-lora-rank": 32,
    "--qk-head-dim": 128, "--qk-pos-emb-head-dim": 64, "--v-head-dim": 128,
    "--num-query-groups": 1, "--num-experts": 0, "--moe-router-topk": 2,
    "--moe-router-num-groups": 1, "--moe-router-group-topk": 1,
    "--moe-shared-expert-intermediate-size": 0, "--moe-layer-freq": 1,
    "--tensor-model-parallel-size": 1, "--pipeline-model-parallel-size": 1,
    "--expert-model-parallel-size": 1, "--context-parallel-size": 1, "--micro-batch-size": 1,
    "--moe-token-dispatcher-type": "allgather", "--moe-flex-dispatcher-backend": "deepep",
    "--moe-deepep-num-sms": 20, "--moe-hybridep-num-sms": 16, "--cuda-graph-impl": "none",
    "--add-bias-linear": True, "--softmax-type": "vanilla",
    "NCCL_NVLS_ENABLE": True,  # NCCL's own default: NVLS where the fabric has it
}
_REQUIRED = ("--num-layers", "--hidden-size", "--num-attention-heads")
_IRRELEVANT_WORDS = """--lr --lr- --min-lr --weight-decay --start-weight-decay
    --end-weight-decay --weight-decay-incr-style --adam- --sgd- --clip-grad --init-method-std
    --init-method-xavier-uniform --seed --save --save- --load --no-load- --no-save- --data-path
    --data-args-path --data-cache-path --data-parallel-random-init --train-data-path
    --valid-data-path --test-data-path --split --mock-data --tokenizer- --vocab-file --merge-file
    --log- --tensorboard- --wandb- --eval- --train-iters --train-samples --exit- --ckpt-
    --dist-ckpt- --use-dist-ckpt --async-save --timing-log- --finetune --pretrained-checkpoint
    --auto-detect-ckpt-format --use-checkpoint- --distributed-timeout- --num-workers
    --dataloader-type --no-mmap-bin-files --no-create-attention-mask-in-dataloader
    --reset-position-ids --reset-attention-mask --eod-mask-loss --norm-epsilon --rotary-base
    --rotary-scaling-factor --rope-scaling-factor --mscale --mscale-all-dim --beta-fast
    --beta-slow --original-max-position-embeddings --max-position-embeddings
    --mtp-loss-scaling-factor --moe-aux-loss-coeff --moe-z-loss-coeff
    --moe-router-bias-update-rate --moe-router-topk-scaling-factor --moe-per-layer-logging
    --no-check-for-nan-in-loss-and-grad --check-for- --rerun-mode --enable-ft-package
    --calc-ft-timeouts --one-logger- --no-one-logger --app-tag- --override-opt-param-scheduler
    --master-addr --master-port --node-rank --rdzv- --max-restarts --standalone --local-rank
    --tiktoken- --legacy-tokenizer --trust-remote-code --job-name --account --partition --time
    --output --error --container- -p -A -t -J -o""".split()
_IRRELEVANT = frozenset(word for word in _IRRELEVANT_WORDS if not word.endswith("-"))
_IRRELEVANT_PREFIXES = tuple(word for word in _IRRELEVANT_WORDS if word.endswith("-"))
_IRRELEVANT_SECTIONS = ("logger", "checkpoint", "tokenizer", "scheduler", "rng")


# --- tokens and options -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Option:
    flag: str                     # canonical: "--kebab-case", a short "-N" or an environment NAME
    name: str                     # as written, without its value
    values: tuple[str, ...]
    written: str                  # as written, with its values
    section: str = ""             # a Bridge override's section ("model", "ddp", ...)


_ASSIGNMENT = re.compile(r"\+{0,2}[A-Za-z_][\w.]*=")
_ENVIRONMENT = re.compile(r"[A-Z_][A-Z0-9_]*")
_NUMBER = re.compile(r"-(\d|\.\d|inf|nan)", re.IGNORECASE)


def _tokens(text: str) -> list[str]:
    joined = text.replace("\\\r\n", " ").replace("\\\n", " ")
    try:
        return shlex.split(joined, comments=True)
    except ValueError as error:
        raise ValueError(f"megatron args: cannot split the command line ({error})") from None


def _is_flag(token: str) -> bool:
    return token.startswith("-") and token != "--" and len(token) > 1 \
        and not _NUMBER.match(token)


def _canonical(name: str) -> str:
    flag = "--" + name[2:].replace("_", "-") if name.startswith("--") else name
    return _ALIASES.get(flag, flag)


def _options(tokens: list[str]) -> tuple[list[_Option], list[str]]:
    """The options in order, and the positional tokens (program names) left over."""
    options: list[_Option] = []
    positionals: list[str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if _is_flag(token):
            option, index = _flag_option(token, tokens, index)
            options.append(option)
        elif _ASSIGNMENT.match(token):
            key, _, value = token.lstrip("+").partition("=")
            section, _, leaf = key.rpartition(".")
            options.append(_Option(key, key, (value,), token) if _ENVIRONMENT.fullmatch(key)
                           else _Option(_canonical("--" + leaf), key, (value,), token,
                                        section.split(".")[0]))
        else:
            positionals.append(token)
    return options, positionals


def _flag_option(token: str, tokens: list[str], index: int) -> tuple[_Option, int]:
    """A switch takes no value, a scalar flag one, a list or unknown flag all up to the next
    flag or assignment."""
    name, sep, value = token.partition("=")
    flag = _canonical(name)
    if sep:
        return _Option(flag, name, (value,), token), index
    parser, end = _FLAGS.get(flag), index
    while parser is not _switch and end < len(tokens) and not _is_flag(tokens[end]) \
            and not _ASSIGNMENT.match(tokens[end]):
        end += 1
        if parser not in (None, _words):
            break
    values = tuple(tokens[index:end])
    return _Option(flag, name, values, " ".join((token, *values))), end


# --- reading the options ----------------------------------------------------------------------

def _read(options: list[_Option]) -> tuple[FlagValues, list[str]]:
    """The mapped flags' values, and the options moesim knows have no effect on step time."""
    values: dict[str, Any] = {}
    written: dict[str, str] = {}
    ignored, irrelevant = [], []
    for option in options:
        if option.flag in _FLAGS:
            values[option.flag] = _FLAGS[option.flag](option.name, option.values)
            written[option.flag] = option.written
        elif option.section in _IRRELEVANT_SECTIONS or option.flag in _IRRELEVANT \
                or option.flag.startswith(_IRRELEVANT_PREFIXES):
            irrelevant.append(option.written)
        else:
            ignored.append(option.written)
    dashed = {option.flag for option in options if option.name.startswith("-")}
    complete = all(flag in dashed for flag in _REQUIRED)
    defaults = {**dict.fromkeys(_SWITCHES, False), **_DEFAULTS}
    return FlagValues(values, written, defaults, complete, ignored), irrelevant


def parse_megatron_args(text: str) -> MegatronImport:
    """A Megatron-LM / Megatron-Bridge command line as moesim fields (module docstring)."""
    options, positionals = _options(_tokens(text))
    flags, irrelevant = _read(options)
    model, plan = model_fields_from_flags(flags), _plan_fields(flags)
    recipe, gpus = recipe_fields_from_flags(flags), _num_gpus(flags)
    shell = [f"{token} (an unexpanded shell variable)" for token in positionals if "$" in token]
    return MegatronImport(
        model_fields=model, plan_fields=plan, recipe_fields=recipe, num_gpus=gpus,
        complete=flags.complete, ignored=tuple(flags.ignored + shell),
        irrelevant=tuple(irrelevant + [token for token in positionals if "$" not in token]),
        notes=tuple(flags.notes))


def _num_gpus(flags: FlagValues) -> int | None:
    """--num-gpus, or nodes (--nnodes, -N) x GPUs per node (--nproc-per-node, --gpus-per-node)."""
    total, nodes = flags.get("--num-gpus"), flags.get("--nnodes")
    per_node = flags.get("--nproc-per-node", flags.get("--gpus-per-node"))
    if nodes is None or per_node is None:
        flags.ignore("needs the GPUs per node too", "--nnodes")
        flags.ignore("needs the node count too", "--nproc-per-node", "--gpus-per-node")
        return total  # type: ignore[no-any-return]
    if total is not None and total != nodes * per_node:
        raise ValueError(f"{flags.written['--num-gpus']}: disagrees with {nodes} nodes x "
                         f"{per_node} GPUs per node")
    return int(nodes * per_node)


# --- plan -------------------------------------------------------------------------------------

_PLAN = {"--tensor-model-parallel-size": "tp", "--pipeline-model-parallel-size": "pp",
         "--expert-model-parallel-size": "ep", "--expert-tensor-parallel-size": "etp",
         "--context-parallel-size": "cp", "--micro-batch-size": "mbs",
         "--global-batch-size": "gbs", "--seq-length": "seq_len"}


def _plan_fields(flags: FlagValues) -> dict[str, Any]:
    fields = {name: flags.setting(flag) for flag, name in _PLAN.items()
              if flags.setting(flag) not in (UNSET, None)}
    if flags.complete:  # Megatron: expert TP defaults to TP (no experts: moesim's etp=1)
        fields.setdefault("etp", fields["tp"] if flags.setting("--num-experts") else 1)
    return {**fields, **_virtual_pipeline(flags), **_sharding(flags)}


def _virtual_pipeline(flags: FlagValues) -> dict[str, Any]:
    """vpp from the layout's stage count, the explicit flag or layers per virtual stage."""
    names = ("--pipeline-model-parallel-layout", "--num-virtual-stages-per-pipeline-rank",
             "--num-layers-per-virtual-pipeline-stage")
    present = [flags.written[name] for name in names if flags.has(name)]
    if len(present) > 1:
        raise ValueError(f"{' and '.join(present)}: Megatron accepts only one of them")
    pp = flags.setting("--pipeline-model-parallel-size")
    layout, per_stage = flags.get(names[0]), flags.get(names[2])
    if flags.has(names[1]):
        return {"vpp": flags.get(names[1])}
    if (layout or per_stage) and pp is UNSET:
        raise ValueError(f"{present[0]}: needs --pipeline-model-parallel-size on the same line")
    if layout is not None:
        stages = len(parse_layout(layout))
        if stages % pp:
            raise ValueError(f"{present[0]}: {stages} stages, must be a multiple of pp={pp}")
        return {"layout": layout, "vpp": stages // pp}
    if per_stage is not None:
        layers = flags.get("--num-layers")
        if layers is None or layers % pp or layers // pp % per_stage:
            raise ValueError(f"{present[0]}: needs --num-layers on the line, divisible by "
                             f"pp={pp} into stages of {per_stage} layers")
        return {"vpp": layers // pp // per_stage}
    return {"vpp": 1, "layout": None} if flags.complete else {}


def _sharding(flags: FlagValues) -> dict[str, Any]:
    """FSDP (torch FSDP2, or Megatron FSDP with optim_grads_params) or the distributed
    optimizer; a sharding strategy acts on a complete line only with --use-megatron-fsdp."""
    strategy, megatron_fsdp = (flags.get("--data-parallel-sharding-strategy"),
                               flags.get("--use-megatron-fsdp"))
    if flags.get("--use-torch-fsdp2"):
        return {"dp_sharding": "fsdp"}
    if strategy and (megatron_fsdp or not flags.complete):
        if strategy == "optim_grads_params":
            return {"dp_sharding": "fsdp"}
        if strategy == "optim_grads":
            flags.notes.append(f"{flags.written['--data-parallel-sharding-strategy']}: "
                               f"simulated as the distributed optimizer (state sharded only)")
        if strategy != "no_shard":
            return {"dp_sharding": "distributed-optimizer"}
    else:
        flags.ignore("needs --use-megatron-fsdp", "--data-parallel-sharding-strategy")
    if flags.get("--use-distributed-optimizer"):
        return {"dp_sharding": "distributed-optimizer"}
    if flags.complete or strategy == "no_shard" or megatron_fsdp:
        flags.notes.append("plain DDP (no --use-distributed-optimizer or FSDP sharding) is not "
                           "modelled: simulated with the distributed optimizer")
        return {"dp_sharding": "distributed-optimizer"}
    return {}
