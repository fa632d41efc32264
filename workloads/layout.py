"""Megatron's pipeline layout (`--pipeline-model-parallel-layout`): which layers each stage holds.

Owns parsing, the default even split and validation. A layout is one tuple of symbols per
virtual stage: "E" embedding, "t" decoder layer, "m" MTP layer, "L" loss (output head + cross
entropy). Grammar (megatron/core/transformer/pipeline_parallel_layer_layout.py): `|` separates
stages, `X*n` repeats a symbol, `(...)*n` repeats a group (which may contain `|`), commas and
whitespace are cosmetic, empty stages are allowed. Nested groups are accepted here too.
The one formula: virtual stage k lives on pipeline rank k % pp, as model chunk k // pp.
"""

from workloads.models import ModelSpec

SYMBOLS = ("E", "t", "m", "L")
SEPARATOR = "|"
_COSMETIC = ", \t\n"

Layout = tuple[tuple[str, ...], ...]


def parse_layout(text: str) -> Layout:
    """Stages of a layout string, e.g. "Et*4|(t*4|)*14tmL" -> 16 stages."""
    tokens, end = _parse_sequence(text, 0)
    if end < len(text):
        raise ValueError(f"layout={text!r}: unbalanced ')' at position {end}")
    stages: list[list[str]] = [[]]
    for token in tokens:
        if token == SEPARATOR:
            stages.append([])
        else:
            stages[-1].append(token)
    return tuple(tuple(stage) for stage in stages)


def _parse_sequence(text: str, pos: int) -> tuple[list[str], int]:
    """Tokens from `pos` up to an unmatched ')' or the end; returns them and the stop position."""
    tokens: list[str] = []
    while pos < len(text) and text[pos] != ")":
        char = text[pos]
        if char in _COSMETIC:
            pos += 1
            continue
        if char == "(":
            atom, end = _parse_sequence(text, pos + 1)
            if end >= len(text):
                raise ValueError(f"layout={text!r}: unbalanced '(' at position {pos}")
            pos = end + 1
        elif char in SYMBOLS or char == SEPARATOR:
            atom, pos = [char], pos + 1
        else:
            raise ValueError(f"layout={text!r}: unknown symbol {char!r} at position {pos}; "
                             f"allowed: {', '.join(SYMBOLS)}, '|', '*n', '(...)*n'")
        count, pos = _parse_repeat(text, pos)
        tokens.extend(atom * count)
    return tokens, pos


def _parse_repeat(text: str, pos: int) -> tuple[int, int]:
    """An optional `*n` after an atom; returns (n, position after it), n = 1 when absent."""
    if pos >= len(text) or text[pos] != "*":
        return 1, pos
    end = pos + 1
    while end < len(text) and text[end].isdigit():
        end += 1
    digits = text[pos + 1:end]
    if not digits or int(digits) < 1:
        raise ValueError(f"layout={text!r}: bad repeat count {digits!r} at position {pos + 1}; "
                         f"'*' must be followed by an integer >= 1")
    return int(digits), end


def default_layout(model: ModelSpec, pp: int, vpp: int) -> Layout:
    """E on the first stage, decoder layers split as evenly as possible over pp·vpp stages, MTP
    layers and L on the last stage. The remainder layers go one each to the interior stages
    (1, 2, ...) and then to stage 0; never to the last stage, which already carries the MTP
    layers and the output head."""
    num_stages = pp * vpp
    if num_stages < 1:
        raise ValueError(f"pp*vpp={num_stages}: must be >= 1")
    base, remainder = divmod(model.num_layers, num_stages)
    priority = list(range(1, num_stages - 1)) + [0]
    extra = set(priority[:remainder])
    stages = [["t"] * (base + (k in extra)) for k in range(num_stages)]
    stages[0].insert(0, "E")
    stages[-1].extend(["m"] * model.mtp_layers + ["L"])
    return tuple(tuple(stage) for stage in stages)


def validate_layout(stages: Layout, model: ModelSpec, pp: int, vpp: int) -> None:
    """Megatron's layout rules (PipelineParallelLayerLayout.validate_layer_layout)."""
    if len(stages) != pp * vpp:
        raise ValueError(f"layout: {len(stages)} stages, must equal pp*vpp={pp}*{vpp}={pp * vpp}")
    flat = [symbol for stage in stages for symbol in stage]
    counts = {symbol: flat.count(symbol) for symbol in SYMBOLS}
    for symbol, wanted, name in (("E", 1, "embedding"), ("L", 1, "loss"),
                                 ("t", model.num_layers, "num_layers"),
                                 ("m", model.mtp_layers, "mtp_layers")):
        if counts[symbol] != wanted:
            raise ValueError(f"layout: {counts[symbol]} '{symbol}' symbols, must be "
                             f"{wanted} ({name})")
    if flat[0] != "E" or flat[-1] != "L":
        raise ValueError(f"layout: must start with 'E' and end with 'L' (got {flat[0]!r} ... "
                         f"{flat[-1]!r})")
    if "m" in flat and "t" in flat[flat.index("m"):]:
        raise ValueError("layout: every 't' must come before the first 'm'")
    _validate_mtp_stage(stages, pp)


def _validate_mtp_stage(stages: Layout, pp: int) -> None:
    """All MTP layers in one stage, in the last model chunk of its pipeline rank."""
    holders = [k for k, stage in enumerate(stages) if "m" in stage]
    if not holders:
        return
    if len(holders) > 1:
        raise ValueError(f"layout: MTP layers spread over stages {holders}, must share one stage")
    stage = holders[0]
    if stage < len(stages) - pp:
        raise ValueError(f"layout: MTP stage {stage} must be in the last model chunk "
                         f"(stages >= {len(stages) - pp})")
