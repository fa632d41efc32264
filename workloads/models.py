"""Model architecture specs (dense or MoE, GQA or MLA, sliding windows, MTP) and parameter counts.

Owns `ModelSpec`, the catalog `MODELS` (built from workloads.model_catalog) and
`model_spec(name)`. Field names follow Megatron-LM's arguments so a Megatron config maps one to
one. The one formula: a transformer layer holds its attention block, two RMSNorms (2h) and
either a dense FFN or an MoE block,

    params(layer) = attention + 2h + (f·h·F                 dense
                                      E·f·h·F_e + f·h·F_s + E·h     MoE: experts + shared + router)

with f = 3 for SwiGLU (gate, up, down) and 2 otherwise. The GEMM weights alone are what model
FLOPs count; biases (`linear_bias`), attention sinks and per-head q/k norms are parameters only.
MTP layers are extra layers of the last layer's type plus their eh_proj and norms; the embedding
and output head are shared with MTP, so they are counted once (the HF checkpoint stores MTP
copies of both: 671B + 14B = 685B).
"""

from dataclasses import dataclass, replace

from workloads.model_catalog import CATALOG

ATTENTION_KINDS = ("mla", "gqa")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer. Fields that do not apply keep their 0/None defaults.

    GQA: `num_query_groups` None = one group per head (MHA); `kv_channels` None =
    hidden_size // num_attention_heads (Megatron's defaults). MLA uses the q/kv LoRA ranks and
    the head dims. `moe_layer_freq` is a 0/1 flag per layer; empty means every layer is dense.
    Group-limited routing: a token's experts come from `moe_router_group_topk` of
    `moe_router_num_groups` equal groups of experts (1 of 1 = no limit).
    `sliding_window` (GQA only, as Megatron counts it) is the keys a query attends to on a
    window layer, itself included (HF's sliding_window); `window_layer_pattern` flags those
    layers (1 = window), empty meaning all; MTP layers attend to the full sequence.
    `attention_sinks` adds one learned logit per head; `linear_bias` a bias to every linear
    (and the router); `qk_layernorm` per-head q and k RMSNorms (GQA). `clamped_glu`: GPT-OSS's
    gated activation, the gate clamped to a limit and the linear half offset by one (Megatron
    activation_func_clamp_value, glu_linear_offset).
    """

    name: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    make_vocab_size_divisible_by: int = 128
    num_attention_heads: int
    attention: str = "gqa"
    num_query_groups: int | None = None
    kv_channels: int | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_head_dim: int = 0
    qk_pos_emb_head_dim: int = 0
    v_head_dim: int = 0
    ffn_hidden_size: int
    swiglu: bool = True
    num_experts: int = 0
    moe_ffn_hidden_size: int = 0
    moe_router_topk: int = 0
    moe_router_num_groups: int = 1
    moe_router_group_topk: int = 1
    moe_shared_expert_intermediate_size: int = 0
    moe_layer_freq: tuple[int, ...] = ()
    sliding_window: int | None = None
    window_layer_pattern: tuple[int, ...] = ()
    attention_sinks: bool = False
    linear_bias: bool = False
    clamped_glu: bool = False
    qk_layernorm: bool = False
    mtp_layers: int = 0
    tie_embeddings: bool = False

    def __post_init__(self) -> None:
        for field in ("hidden_size", "num_layers", "vocab_size", "make_vocab_size_divisible_by",
                      "num_attention_heads", "ffn_hidden_size"):
            _require_positive(self, field)
        for field in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim",
                      "num_experts", "moe_ffn_hidden_size", "moe_router_topk",
                      "moe_shared_expert_intermediate_size", "mtp_layers"):
            _require_non_negative(self, field)
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"attention={self.attention!r}: must be one of {ATTENTION_KINDS}")
        if self.attention == "mla":
            _validate_mla(self)
        else:
            _validate_gqa(self)
        _validate_moe(self)
        _validate_window(self)

    def is_moe_layer(self, layer: int) -> bool:
        """Whether decoder layer `layer` (0-based) has an MoE block instead of a dense FFN."""
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"layer={layer}: must be in [0, {self.num_layers})")
        return bool(self.moe_layer_freq) and self.moe_layer_freq[layer] == 1

    def is_window_layer(self, layer: int) -> bool:
        """Whether attention layer `layer` uses the sliding window; layers num_layers and up
        are the MTP layers, which attend to the full sequence."""
        if not 0 <= layer < self.num_layers + self.mtp_layers:
            raise ValueError(f"layer={layer}: must be in [0, {self.num_layers + self.mtp_layers})")
        if self.sliding_window is None or layer >= self.num_layers:
            return False
        return not self.window_layer_pattern or self.window_layer_pattern[layer] == 1

    @property
    def num_window_layers(self) -> int:
        """Attention layers with the sliding window (MTP layers never have it)."""
        if self.sliding_window is None:
            return 0
        return sum(self.window_layer_pattern) if self.window_layer_pattern else self.num_layers

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_moe_layers(self) -> int:
        """MoE decoder layers, MTP layers not included."""
        return sum(self.moe_layer_freq)

    @property
    def num_dense_layers(self) -> int:
        """Dense decoder layers, MTP layers not included."""
        return self.num_layers - self.num_moe_layers

    @property
    def mtp_is_moe(self) -> bool:
        """MTP layers copy the type of the last decoder layer (Megatron's FLOPs convention)."""
        return self.is_moe_layer(self.num_layers - 1)

    def padded_vocab_size(self, tp: int) -> int:
        """Megatron pads the vocab to a multiple of make_vocab_size_divisible_by x tp."""
        if tp < 1:
            raise ValueError(f"tp={tp}: must be >= 1")
        multiple = self.make_vocab_size_divisible_by * tp
        return -(-self.vocab_size // multiple) * multiple

    def with_mtp(self, mtp_layers: int) -> "ModelSpec":
        """A copy with `mtp_layers` multi-token-prediction layers."""
        return replace(self, mtp_layers=mtp_layers)

    @property
    def ffn_matrices(self) -> int:
        """Weight matrices per FFN: 3 with SwiGLU (gate, up, down), 2 without."""
        return 3 if self.swiglu else 2

    def mlp_weights(self, ffn_hidden_size: int) -> int:
        """GEMM weights of one FFN (dense, expert or shared) of width `ffn_hidden_size`."""
        return self.ffn_matrices * self.hidden_size * ffn_hidden_size

    @property
    def attention_weights_per_layer(self) -> int:
        """Attention GEMM weights of one layer as Megatron's FLOPs count them; MLA's q/kv
        RMSNorms included (its "+1" terms)."""
        h, n = self.hidden_size, self.num_attention_heads
        if self.attention == "gqa":
            query = n * self.head_dim
            kv = self.query_groups * self.head_dim
            return h * (query + 2 * kv) + query * h
        kv = self.kv_lora_rank * (h + n * (self.qk_head_dim + self.v_head_dim) + 1)
        return self._q_params + kv + h * self.qk_pos_emb_head_dim + n * self.v_head_dim * h

    @property
    def attention_params_per_layer(self) -> int:
        """Attention weights plus biases, sinks and q/k norms, where the model has them."""
        extra = self.num_attention_heads if self.attention_sinks else 0
        if self.linear_bias:
            extra += (self.num_attention_heads + 2 * self.query_groups) * self.head_dim
            extra += self.hidden_size
        if self.qk_layernorm:
            extra += 2 * self.head_dim
        return self.attention_weights_per_layer + extra

    @property
    def _q_params(self) -> int:
        """MLA query path: down-proj, q RMSNorm and up-proj with q-LoRA, else one projection."""
        h, n = self.hidden_size, self.num_attention_heads
        q_head = self.qk_head_dim + self.qk_pos_emb_head_dim
        if self.q_lora_rank is None:
            return h * n * q_head
        return self.q_lora_rank * (h + n * q_head + 1)

    @property
    def head_dim(self) -> int:
        """GQA head dim (kv_channels)."""
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def query_key_head_dim(self) -> int:
        """Head dimension of queries and keys: MLA's no-position plus rotary dims, else the
        GQA head dim."""
        if self.attention == "mla":
            return self.qk_head_dim + self.qk_pos_emb_head_dim
        return self.head_dim

    @property
    def query_groups(self) -> int:
        """GQA key/value heads."""
        return self.num_query_groups or self.num_attention_heads

    def _mlp_params(self, ffn_hidden_size: int) -> int:
        """One FFN's weights plus, with linear_bias, its fc1 and fc2 biases."""
        bias = (self.ffn_matrices - 1) * ffn_hidden_size + self.hidden_size
        return self.mlp_weights(ffn_hidden_size) + (bias if self.linear_bias else 0)

    @property
    def dense_mlp_params(self) -> int:
        return self._mlp_params(self.ffn_hidden_size)

    @property
    def expert_params(self) -> int:
        """One routed expert."""
        return self._mlp_params(self.moe_ffn_hidden_size)

    @property
    def shared_expert_params(self) -> int:
        if not self.moe_shared_expert_intermediate_size:
            return 0
        return self._mlp_params(self.moe_shared_expert_intermediate_size)

    @property
    def router_params(self) -> int:
        """Router weight h x E (+ E with linear_bias; DSv3's aux-loss-free expert bias is a
        buffer, not counted)."""
        bias = 1 if self.linear_bias else 0
        return (self.hidden_size + bias) * self.num_experts

    @property
    def embedding_params(self) -> int:
        """Input embedding at the HF (unpadded) vocab size; the untied output head is as large."""
        return self.vocab_size * self.hidden_size

    @property
    def mtp_extra_params(self) -> int:
        """Per MTP layer, beyond its transformer block: eh_proj 2h->h, enorm, hnorm, final norm."""
        h = self.hidden_size
        return 2 * h * h + 3 * h

    def total_params(self) -> int:
        """Unique parameters, MTP layers included (use with_mtp(0) for the main model)."""
        moe_block = (self.num_experts * self.expert_params + self.shared_expert_params
                     + self.router_params)
        return self._params(moe_block)

    def active_params(self) -> int:
        """Parameters one token touches: top-k routed experts instead of all, MTP included."""
        moe_block = (self.moe_router_topk * self.expert_params + self.shared_expert_params
                     + self.router_params)
        return self._params(moe_block)

    def _params(self, moe_block: int) -> int:
        h = self.hidden_size
        layer = self.attention_params_per_layer + 2 * h
        moe_layers = self.num_moe_layers + (self.mtp_layers if self.mtp_is_moe else 0)
        dense_layers = self.num_layers + self.mtp_layers - moe_layers
        head = 0 if self.tie_embeddings else self.embedding_params
        return (self.embedding_params + head + h
                + (self.num_layers + self.mtp_layers) * layer
                + moe_layers * moe_block + dense_layers * self.dense_mlp_params
                + self.mtp_layers * self.mtp_extra_params)


def _require_positive(spec: ModelSpec, field: str) -> None:
    value = getattr(spec, field)
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{field}={value!r}: must be an integer >= 1 (model {spec.name!r})")


def _require_non_negative(spec: ModelSpec, field: str) -> None:
    value = getattr(spec, field)
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{field}={value!r}: must be an integer >= 0 (model {spec.name!r})")


def _validate_mla(spec: ModelSpec) -> None:
    for field in ("kv_lora_rank", "qk_head_dim", "v_head_dim"):
        if getattr(spec, field) < 1:
            raise ValueError(f"{field}={getattr(spec, field)}: must be >= 1 for attention='mla'")
    if spec.q_lora_rank is not None and spec.q_lora_rank < 1:
        raise ValueError(f"q_lora_rank={spec.q_lora_rank}: must be None or >= 1")
    for field in ("linear_bias", "qk_layernorm"):
        if getattr(spec, field):
            raise ValueError(f"{field}=True: only with attention='gqa' (MLA's q/kv norms are "
                             f"part of its LoRA ranks)")


def _validate_gqa(spec: ModelSpec) -> None:
    for field in ("num_query_groups", "kv_channels"):
        value = getattr(spec, field)
        if value is not None and value < 1:
            raise ValueError(f"{field}={value}: must be None or >= 1")
    if spec.num_attention_heads % spec.query_groups != 0:
        raise ValueError(f"num_query_groups={spec.query_groups}: must divide "
                         f"num_attention_heads={spec.num_attention_heads}")


def _validate_layer_flags(field: str, flags: tuple[int, ...], num_layers: int) -> None:
    if any(flag not in (0, 1) for flag in flags):
        raise ValueError(f"{field}={flags}: every entry must be 0 or 1")
    if flags and len(flags) != num_layers:
        raise ValueError(f"{field}: length {len(flags)} must equal num_layers={num_layers}")


def _validate_moe(spec: ModelSpec) -> None:
    freq = spec.moe_layer_freq
    _validate_layer_flags("moe_layer_freq", freq, spec.num_layers)
    if spec.num_experts == 0:
        if any(freq):
            raise ValueError(f"moe_layer_freq={freq}: a dense model (num_experts=0) has no "
                             f"MoE layer")
        return
    if not any(freq):
        raise ValueError(f"moe_layer_freq={freq}: num_experts={spec.num_experts} needs at least "
                         f"one MoE layer")
    if spec.moe_ffn_hidden_size < 1:
        raise ValueError(f"moe_ffn_hidden_size={spec.moe_ffn_hidden_size}: must be >= 1 for MoE")
    if not 1 <= spec.moe_router_topk <= spec.num_experts:
        raise ValueError(f"moe_router_topk={spec.moe_router_topk}: must be in "
                         f"[1, num_experts={spec.num_experts}]")
    groups, chosen = spec.moe_router_num_groups, spec.moe_router_group_topk
    if groups < 1 or spec.num_experts % groups:
        raise ValueError(f"moe_router_num_groups={groups}: must be >= 1 and divide "
                         f"num_experts={spec.num_experts}")
    if not 1 <= chosen <= groups or spec.moe_router_topk > chosen * spec.num_experts // groups:
        raise ValueError(f"moe_router_group_topk={chosen}: must be in [1, "
                         f"moe_router_num_groups={groups}] and hold moe_router_topk="
                         f"{spec.moe_router_topk} experts")


def _validate_window(spec: ModelSpec) -> None:
    window, pattern = spec.sliding_window, spec.window_layer_pattern
    if window is None:
        if pattern:
            raise ValueError(f"window_layer_pattern={pattern}: needs a sliding_window")
        return
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"sliding_window={window!r}: must be None or an integer >= 1")
    if spec.attention != "gqa":
        raise ValueError(f"sliding_window={window}: only attention='gqa' (Megatron's FLOPs "
                         f"count no window for MLA)")
    _validate_layer_flags("window_layer_pattern", pattern, spec.num_layers)


MODELS: dict[str, ModelSpec] = {entry["name"]: ModelSpec(**entry) for entry in CATALOG}


def model_spec(name: str) -> ModelSpec:
    """The catalog model called `name`."""
    if name not in MODELS:
        raise ValueError(f"model={name!r}: unknown model; known: {', '.join(sorted(MODELS))}")
    return MODELS[name]
