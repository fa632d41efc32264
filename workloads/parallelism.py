"""Parallel plans (TP, CP, DP, PP, VPP, EP, ETP, expert DP), their validation and rank groups.

Owns `ParallelPlan`, `validate_plan` and the mapping of global ranks to parallel coordinates.
Megatron's default order (RankGenerator "tp-cp-ep-dp-pp"): TP fastest, then CP, then DP, PP
outermost; the MoE layers fold their own groups over the same GPUs (Parallel Folding), ETP
fastest, then EP, then expert DP, PP outermost. The one formula, with sizes fastest first:

    rank = tp_i + tp·(cp_i + cp·(dp_i + dp·pp_i)) = etp_i + etp·(ep_i + ep·(edp_i + edp·pp_i))

    dp = num_gpus / (tp·cp·pp),   expert_dp = num_gpus / (etp·ep·pp)
"""

from dataclasses import dataclass
from math import prod

from workloads.layout import Layout, default_layout, parse_layout, validate_layout
from workloads.models import ModelSpec
from workloads.pipeline_layouts import known_layout

DP_SHARDINGS = ("distributed-optimizer", "fsdp")
GROUP_KINDS = ("tp", "cp", "dp", "pp", "etp", "ep", "edp")
_DEGREES = ("num_gpus", "tp", "pp", "vpp", "ep", "etp", "cp", "mbs", "gbs", "seq_len")


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelPlan:
    """How one job splits a model and a batch over `num_gpus` GPUs (model-independent rules)."""

    num_gpus: int
    tp: int = 1
    pp: int = 1
    vpp: int = 1
    ep: int = 1
    etp: int = 1
    cp: int = 1
    mbs: int = 1
    gbs: int
    seq_len: int
    dp_sharding: str = "distributed-optimizer"
    layout: str | None = None

    def __post_init__(self) -> None:
        for field in _DEGREES:
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{field}={value!r}: must be an integer >= 1")
        if self.dp_sharding not in DP_SHARDINGS:
            raise ValueError(f"dp_sharding={self.dp_sharding!r}: must be one of {DP_SHARDINGS}")
        _check_gpu_split(self)
        _check_sequence(self)
        _check_pipeline(self)
        if self.layout is not None:
            parse_layout(self.layout)

    @property
    def dp(self) -> int:
        """Attention data-parallel degree."""
        return self.num_gpus // (self.tp * self.cp * self.pp)

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel degree (the MoE layers' replicas of each expert)."""
        return self.num_gpus // (self.etp * self.ep * self.pp)

    @property
    def num_microbatches(self) -> int:
        """Microbatches each pipeline runs per iteration."""
        return self.gbs // (self.mbs * self.dp)

    @property
    def tokens_per_microbatch(self) -> int:
        return self.mbs * self.seq_len

    @property
    def ranks_per_stage(self) -> int:
        """GPUs of one pipeline rank (all tp x cp x dp of it)."""
        return self.num_gpus // self.pp


def _check_gpu_split(plan: ParallelPlan) -> None:
    attention = plan.tp * plan.cp * plan.pp
    if plan.num_gpus % attention != 0:
        raise ValueError(f"num_gpus={plan.num_gpus}: must be divisible by tp*cp*pp="
                         f"{plan.tp}*{plan.cp}*{plan.pp}={attention}")
    expert = plan.etp * plan.ep * plan.pp
    if plan.num_gpus % expert != 0:
        raise ValueError(f"num_gpus={plan.num_gpus}: must be divisible by etp*ep*pp="
                         f"{plan.etp}*{plan.ep}*{plan.pp}={expert}")


def _check_sequence(plan: ParallelPlan) -> None:
    """Context parallelism splits each sequence into 2·cp chunks for causal load balance."""
    if plan.cp > 1 and plan.seq_len % (2 * plan.cp) != 0:
        raise ValueError(f"seq_len={plan.seq_len}: must be divisible by 2*cp={2 * plan.cp} "
                         f"when cp > 1")


def _check_pipeline(plan: ParallelPlan) -> None:
    if plan.gbs % (plan.mbs * plan.dp) != 0:
        raise ValueError(f"gbs={plan.gbs}: must be divisible by mbs*dp={plan.mbs}*{plan.dp}="
                         f"{plan.mbs * plan.dp}")
    if plan.vpp > 1 and plan.pp == 1:
        raise ValueError(f"vpp={plan.vpp}: vpp > 1 requires pp > 1")
    if plan.num_microbatches < plan.pp:
        raise ValueError(f"gbs={plan.gbs}: num_microbatches=gbs/(mbs*dp)={plan.num_microbatches} "
                         f"must be >= pp={plan.pp}")


def pipeline_runs(plan: ParallelPlan, local_batch_size: int) -> int:
    """How many times each pipeline rank runs its schedule in a step: once, unless the recipe
    puts each DP rank's batch through the pipeline `local_batch_size` sequences at a time
    (Recipe.local_batch_size; 0 = all at once), which must then be whole micro batches and
    divide the rank's batch (a one-line error naming the field). Without a pipeline there is
    no schedule to repeat."""
    if plan.pp == 1 or local_batch_size == 0:
        return 1
    sequences = plan.num_microbatches * plan.mbs
    if local_batch_size % plan.mbs or sequences % local_batch_size:
        raise ValueError(f"local_batch_size={local_batch_size}: must be a multiple of mbs="
                         f"{plan.mbs} that divides each DP rank's gbs/dp={sequences} sequences")
    return sequences // local_batch_size


def microbatches_per_run(plan: ParallelPlan, local_batch_size: int) -> int:
    """Micro batches in one run of the pipeline schedule (`pipeline_runs`)."""
    return plan.num_microbatches // pipeline_runs(plan, local_batch_size)


def fsdp_gathers_once_per_step(plan: ParallelPlan) -> bool:
    """Whether FSDP keeps each chunk's gathered parameters (and its unreduced gradients) for
    the whole step, gathering before the chunk's first forward and reducing after its last
    backward: so under a pipeline. PyTorch's pipeline stage turns resharding after backward
    and the gradient sync off for every backward but the last (torch.distributed.pipelining,
    `backward_maybe_with_nosync`); TorchTitan's and NeMo AutoModel's parallelizers do not
    reshard after forward with pp > 1 ("to avoid per-microbatch all-gathers"); Meta's Llama 3
    does not reshard after forward (arXiv 2407.21783, §3.3.2). Without a pipeline every micro
    batch gathers and reduces."""
    return plan.dp_sharding == "fsdp" and plan.pp > 1


def validate_plan(plan: ParallelPlan, model: ModelSpec) -> None:
    """The rules that need the model; the model-independent ones ran when the plan was built."""
    if model.is_moe and model.num_experts % plan.ep != 0:
        raise ValueError(f"ep={plan.ep}: num_experts={model.num_experts} must be divisible by ep")
    if not model.is_moe and (plan.ep, plan.etp) != (1, 1):
        raise ValueError(f"ep={plan.ep}, etp={plan.etp}: a dense model ({model.name}) needs "
                         f"ep=1 and etp=1")
    if model.num_attention_heads % plan.tp != 0:
        raise ValueError(f"tp={plan.tp}: num_attention_heads={model.num_attention_heads} "
                         f"must be divisible by tp")
    if model.attention == "gqa" and model.query_groups % plan.tp != 0:
        raise ValueError(f"tp={plan.tp}: num_query_groups={model.query_groups} must be "
                         f"divisible by tp")
    validate_layout(pipeline_layout(plan, model), model, plan.pp, plan.vpp)


def pipeline_layout(plan: ParallelPlan, model: ModelSpec) -> Layout:
    """The plan's layout string parsed; without one, the layout the published recipes use for
    this model and pipeline shape, else the default even split."""
    if plan.layout is not None:
        return parse_layout(plan.layout)
    published = known_layout(model, plan.pp, plan.vpp)
    if published is not None:
        stages = parse_layout(published)
        try:
            validate_layout(stages, model, plan.pp, plan.vpp)
            return stages
        except ValueError:
            pass
    return default_layout(model, plan.pp, plan.vpp)


def _sizes(plan: ParallelPlan, kind: str) -> tuple[int, int, int, int]:
    """Group sizes fastest first, for the attention or the expert view of the ranks."""
    if kind in ("etp", "ep", "edp"):
        return plan.etp, plan.ep, plan.expert_dp, plan.pp
    return plan.tp, plan.cp, plan.dp, plan.pp


def _coords(plan: ParallelPlan, kind: str, rank: int) -> tuple[int, int, int, int]:
    if not isinstance(rank, int) or not 0 <= rank < plan.num_gpus:
        raise ValueError(f"rank={rank!r}: must be in [0, num_gpus={plan.num_gpus})")
    coords = []
    for size in _sizes(plan, kind):
        rank, index = divmod(rank, size)
        coords.append(index)
    return coords[0], coords[1], coords[2], coords[3]


def _axis(kind: str) -> int:
    if kind not in GROUP_KINDS:
        raise ValueError(f"kind={kind!r}: unknown group kind; known: {', '.join(GROUP_KINDS)}")
    return {"tp": 0, "etp": 0, "cp": 1, "ep": 1, "dp": 2, "edp": 2, "pp": 3}[kind]


def group_of(plan: ParallelPlan, kind: str, rank: int) -> tuple[int, ...]:
    """Global ranks, ascending, that share every coordinate with `rank` except `kind`'s."""
    axis = _axis(kind)
    sizes = _sizes(plan, kind)
    stride = prod(sizes[:axis])
    first = rank - _coords(plan, kind, rank)[axis] * stride
    return tuple(first + i * stride for i in range(sizes[axis]))


def attention_coords(plan: ParallelPlan, rank: int) -> tuple[int, int, int, int]:
    """(tp, cp, dp, pp) indices of `rank`."""
    return _coords(plan, "tp", rank)


def expert_coords(plan: ParallelPlan, rank: int) -> tuple[int, int, int, int]:
    """(etp, ep, edp, pp) indices of `rank` in the MoE layers."""
    return _coords(plan, "ep", rank)


def tp_group(plan: ParallelPlan, rank: int) -> tuple[int, ...]:
    return group_of(plan, "tp", rank)


def cp_group(plan: ParallelPlan, rank: int) -> tuple[int, ...]:
    return group_of(plan, "cp", rank)


def dp_group(plan: ParallelPlan, rank: int) -> tuple[int, ...]:
    """Attention data-parallel group: same tp, cp and pp indices."""
    return group_of(plan, "dp", rank)


def pp_group(plan: ParallelPlan, rank: int) -> tuple[int, ...]:
    return group_of(plan, "pp", rank)


def etp_group(plan: ParallelPlan, rank: int) -> tuple[int, ...]:
    return group_of(plan, "etp", rank)


def ep_group(plan: ParallelPlan, rank: int) -> tuple[int, ...]:
    """Expert-parallel group: same etp, expert-dp and pp indices."""
    return group_of(plan, "ep", rank)


def expert_dp_group(plan: ParallelPlan, rank: int) -> tuple[int, ...]:
    """Expert data-parallel group: the ranks holding the same experts."""
    return group_of(plan, "edp", rank)


def stage_of(plan: ParallelPlan, rank: int) -> int:
    """Pipeline rank of `rank` (it runs virtual stages k with k % pp equal to it)."""
    return attention_coords(plan, rank)[3]


def all_groups(plan: ParallelPlan, kind: str, stage: int) -> tuple[tuple[int, ...], ...]:
    """Every `kind` group among the ranks of pipeline rank `stage` (all of them for "pp"),
    each ascending, ordered by first rank: the instances of one folded collective."""
    axis = _axis(kind)
    if kind == "pp":
        ranks = range(plan.num_gpus)
    elif 0 <= stage < plan.pp:
        ranks = range(stage * plan.ranks_per_stage, (stage + 1) * plan.ranks_per_stage)
    else:
        raise ValueError(f"stage={stage}: must be in [0, pp={plan.pp})")
    return tuple(group_of(plan, kind, rank) for rank in ranks
                 if _coords(plan, kind, rank)[axis] == 0)
