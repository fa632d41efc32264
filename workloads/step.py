"""The task graph of one training step, placed by the pipeline schedule.

For every simulated rank: the units of its 1F1B (interleaved) schedule, each unit the tasks of
the layers of one virtual stage for one micro batch, the whole schedule run once or, with a
local batch (Recipe.local_batch_size), once per local batch; pipeline sends between virtual
stages;
then gradient reduce-scatter, the router-bias all-reduce, the optimizer step and the parameter
all-gather. Folded (the default) simulates one rank per pipeline stage, and each of its
collectives stands for every instance of that collective in the stage, so that the network
carries all of their traffic; unfolded simulates every rank with one group per collective.

Partly unfolded (an asymmetric what-if: a straggler, a degraded link): the positions of a stage
(rank % ranks_per_stage) fall into classes of ranks that behave alike
(workloads.position_classes), and one rank per class and stage is simulated. A collective then
stands for the groups of its kind in the stage whose members fall into the same classes; the
ranks standing for those classes all take part in it. One class is the folded step, one class
per position the unfolded one.

Ordering on a rank: a unit starts when the previous unit's compute is done. With 1F1B
all-to-all overlap, the forward and backward of a steady-state pair start together, and their
layers are issued against each other in the order of Megatron's combined 1F1B
(megatron/core/models/common/model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run):
per layer pair, backward combine | forward attention | forward dispatch | backward experts
and dispatch | forward experts and combine | backward attention, then the forward combine's
unpermute (Megatron runs the combine node on the communication stream). Program order is task
order (the host launches in it, and the compute lane, an in-order stream, runs it), so one's
all-to-all hides under the other's compute, and the host sync before the forward experts
(their token counts) comes after the backward experts are already launched. Each phase of a
paired unit is one of the combined 1F1B's schedule nodes, whose bookkeeping the host runs
before launching it (Task.host_nodes), unless a full-iteration CUDA graph replays the step.

Without interleaving (pp > 1, vpp = 1) Megatron's 1F1B batches each boundary's pipeline
sends and receives into one batch_isend_irecv and then calls torch.cuda.synchronize
(p2p_communication._communicate: batch_p2p_comm, which is on when overlap_p2p_comm is off, as
it is without interleaving, and batch_p2p_sync, on by default). So before a unit that receives
from a peer, or after one that sent to a peer, the host waits for the previous unit, its send
and this unit's receive before it launches anything more (`_p2p_sync`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from workloads import blocks as blk
from workloads.graph import Collective, GraphBuilder, Lane, Op, TaskGraph, Work
from workloads.models import ModelSpec
from workloads.parallelism import (ParallelPlan, all_groups, fsdp_gathers_once_per_step,
                                   group_of, microbatches_per_run, pipeline_layout,
                                   pipeline_runs, stage_of)
from workloads.position_classes import position_classes
from workloads.recipes import (NCCL_DISPATCHERS, Recipe, host_runs_schedule_nodes,
                               static_expert_shapes)
from workloads.routing import dispatch_copies_per_token, dispatch_payload_bytes, routing_of
from workloads.schedules import (LAYER_PHASES, Segments, Unit, chunk_stages, drain, interleave,
                                 rank_of_stage, rank_schedule)
from workloads.step_params import chunk_params, rank_params

ATTENTION_BLOCKS = ("norms", "attn_proj", "core_attn")
# Breakdown buckets of executed work that model FLOPs do not credit; the rest is "compute".
CATEGORIES = {"router": "moe_overhead", "unpermute": "moe_overhead", "norms": "elementwise",
              "embedding": "elementwise", "loss": "elementwise"}
# The groups one collective stands for, and the simulated ranks that take part in it.
_Part = tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepSpec:
    """What one training step runs: a model, a parallel plan, a software recipe."""

    model: ModelSpec
    plan: ParallelPlan
    recipe: Recipe


def build_step(spec: StepSpec, *, folded: bool = True,
               asymmetric: Sequence[Collection[int]] = ()) -> TaskGraph:
    """The task graph of one training step; `asymmetric`: sets of ranks that behave unlike the
    rest (see `position_classes`), simulated apart from the folded ranks when `folded`."""
    return _Step(spec, position_classes(spec.plan, asymmetric, folded=folded)).build()


def syncs_after_p2p(recipe: Recipe, plan: ParallelPlan) -> bool:
    """Whether the host synchronises the device after each pipeline exchange (Megatron's
    non-interleaved 1F1B; see the module docstring; not PyTorch's schedules,
    Recipe.p2p_host_sync), which a full-iteration CUDA graph cannot hold."""
    return (plan.pp > 1 and plan.vpp == 1 and recipe.pipeline_schedule == "1f1b"
            and recipe.cuda_graphs != "full" and recipe.p2p_host_sync)


class _Step:
    """Builds the graph; holds the per-block work and the group lookups."""

    def __init__(self, spec: StepSpec, classes: tuple[int, ...]) -> None:
        self.model, self.plan, self.recipe = spec.model, spec.plan, spec.recipe
        self.classes = classes
        self.first_of: dict[int, int] = {}
        for position, number in enumerate(classes):
            self.first_of.setdefault(number, position)
        self.stages = pipeline_layout(self.plan, self.model)
        self.g = GraphBuilder()
        self._attn: dict[bool, dict[str, blk.BlockWork]] = {}
        self._rings: dict[bool, tuple[blk.BlockWork, blk.BlockWork]] = {}
        self._ring_pairs: dict[int, _Part] = {}
        self.moe = blk.moe_blocks(self.model, self.plan, self.recipe) if self.model.is_moe else {}
        self.mlp = blk.dense_mlp_block(self.model, self.plan, self.recipe)
        self.heads = blk.head_blocks(self.model, self.plan, self.recipe)
        self.tokens = blk.tokens_per_gpu(self.plan)
        self.dispatch_elements = (self.tokens * self.model.hidden_size
                                  * dispatch_copies_per_token(self.model, self.plan, self.recipe)
                                  if self.model.is_moe else 0.0)
        self.expert_routing = (None if self.recipe.dispatcher in NCCL_DISPATCHERS
                               else routing_of(self.model))
        self._parts: dict[tuple[str, int], dict[tuple[int, ...], _Part]] = {}
        self._part_of: dict[tuple[str, int], _Part | None] = {}
        self._pairs: dict[tuple[int, ...], tuple[tuple[int, ...], ...]] = {}
        self.fsdp = self.plan.dp_sharding == "fsdp"
        self.fsdp_per_step = fsdp_gathers_once_per_step(self.plan)
        self.fsdp_gathered: set[tuple[int, int]] = set()
        self.fsdp_reductions: dict[int, list[str]] = defaultdict(list)
        self.p2p_syncs = syncs_after_p2p(self.recipe, self.plan)
        self.runs = pipeline_runs(self.plan, self.recipe.local_batch_size)
        self.per_run = microbatches_per_run(self.plan, self.recipe.local_batch_size)
        self._last_send: dict[int, str] = {}

    def build(self) -> TaskGraph:
        size = self.plan.ranks_per_stage
        ranks = tuple(sorted(stage * size + p for stage in range(self.plan.pp)
                             for p in self.first_of.values()))
        for rank in ranks:
            self._rank(rank)
        members = Counter(self.classes)
        counts = tuple(members[self.classes[rank % size]] for rank in ranks)
        return self.g.build(ranks, counts if len(set(counts)) > 1 else ())

    # --- groups -------------------------------------------------------------------------
    def _collective(self, op: Op, kind: str, rank: int, key: str, nbytes: float,
                    algorithm: str, held_sms: int = 0,
                    expert_routing: tuple[int, int, int, int] | None = None,
                    nvlink_efficiency: float | None = None) -> Collective | None:
        """The collective of group `kind` for `rank`, or None for a group of one."""
        part = self._part(kind, rank)
        if part is None:
            return None
        groups, members = part
        return Collective(op=op, key=f"{members[0]}/{key}", bytes_per_rank=nbytes,
                          groups=groups, members=members, algorithm=algorithm,
                          held_sms=held_sms, graphed=self.recipe.cuda_graphs == "full",
                          expert_routing=expert_routing, nvlink_efficiency=nvlink_efficiency)

    def _part(self, kind: str, rank: int) -> _Part | None:
        """The `kind` groups of `rank`'s stage whose members fall into the classes of `rank`'s
        group's, and the simulated ranks of those classes; None for a group of one."""
        if (kind, rank) not in self._part_of:
            group = group_of(self.plan, kind, rank)
            self._part_of[kind, rank] = None if len(group) < 2 else self._stage_parts(
                kind, stage_of(self.plan, rank))[self._classes_of(group)]
        return self._part_of[kind, rank]

    def _stage_parts(self, kind: str, stage: int) -> dict[tuple[int, ...], _Part]:
        if (kind, stage) not in self._parts:
            parts: dict[tuple[int, ...], list[tuple[int, ...]]] = defaultdict(list)
            for group in all_groups(self.plan, kind, stage):
                parts[self._classes_of(group)].append(group)
            first = stage * self.plan.ranks_per_stage
            self._parts[kind, stage] = {
                classes: (tuple(groups), tuple(sorted(first + self.first_of[c] for c in classes)))
                for classes, groups in parts.items()}
        return self._parts[kind, stage]

    def _classes_of(self, group: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted({self.classes[rank % self.plan.ranks_per_stage] for rank in group}))

    def _virtual(self, rank: int, chunk: int) -> int:
        """The virtual stage chunk `chunk` of `rank` runs."""
        return chunk_stages(self.recipe.pipeline_schedule, stage_of(self.plan, rank),
                            self.plan.pp, self.plan.vpp)[chunk]

    def _runs(self, rank: int, virtual: int) -> int:
        """The rank of `rank`'s pipeline (same position in its stage) that runs `virtual`."""
        stage = rank_of_stage(self.recipe.pipeline_schedule, virtual, self.plan.pp)
        return rank + (stage - stage_of(self.plan, rank)) * self.plan.ranks_per_stage

    def _from_stage(self, rank: int, phase: str, microbatch: int, virtual: int) -> str:
        """What a unit waits for from virtual stage `virtual`: its send, or the end of its
        unit where the same rank runs both (DualPipeV's turn of the V)."""
        peer = self._runs(rank, virtual)
        return f"{peer}/{phase}{microbatch}/v{virtual}/" + ("end" if peer == rank else "send")

    # --- one rank -----------------------------------------------------------------------
    def _rank(self, rank: int) -> None:
        schedule = rank_schedule(self.recipe.pipeline_schedule, stage_of(self.plan, rank),
                                 self.plan.pp, self.plan.vpp, self.per_run,
                                 self.recipe.a2a_overlap, self.runs)
        gathers = self._param_gathers_at_start(rank)
        units = schedule.units
        pairs = schedule.pair_starts if self.recipe.a2a_overlap else ()
        gate: tuple[str, ...] = ()
        previous, index = gate, 0
        last_backward: dict[int, str] = {}
        while index < len(units):
            ends: tuple[str, ...]
            if index in pairs:
                done = units[index:index + 2]
                ends = interleave(
                    self._scheduled(rank, self._unit(rank, done[0], gate, gathers, previous)),
                    self._scheduled(rank, self._unit(rank, done[1], gate, gathers, gate)))
            else:
                done = units[index:index + 1]
                ends = (drain(self._unit(rank, done[0], gate, gathers, previous)),)
            previous, gate, index = gate, ends, index + len(done)
            last_backward.update((u.chunk, end) for u, end in zip(done, ends) if u.phase == "B")
        self._step_tail(rank, last_backward, gathers)

    def _scheduled(self, rank: int, unit: Segments) -> Segments:
        """`unit`'s phases as schedule nodes of the combined 1F1B: the host runs a node's
        bookkeeping before it launches the node's first task (not inside a full-iteration
        CUDA graph)."""
        charged = host_runs_schedule_nodes(self.recipe)
        while True:
            if charged:
                self.g.charge_host_node(rank)
            try:
                next(unit)
            except StopIteration as finished:
                return finished.value
            yield

    def _unit(self, rank: int, unit: Unit, gate: tuple[str, ...],
              gathers: dict[int, tuple[str, ...]], prefetch_after: tuple[str, ...]) -> Segments:
        """Add the tasks of one unit, a layer phase at a time; return the name of its last
        compute task.

        With FSDP the unit's parameters are gathered first (prefetched as soon as the unit
        before it starts) and its gradients reduce-scattered after a backward; under a
        pipeline only the chunk's first unit gathers and its last backward reduces
        (`fsdp_gathers_once_per_step`, the reductions in `_step_tail`)."""
        virtual = self._virtual(rank, unit.chunk)
        prefix = f"{rank}/{unit.phase}{unit.microbatch}/v{virtual}"
        after = list(gate)
        if self.fsdp and (rank, unit.chunk) not in self.fsdp_gathered:
            after.extend(self._chunk_collectives(rank, f"{prefix}/fsdp_ag", Op.ALL_GATHER,
                                                 virtual, prefetch_after))
            if self.fsdp_per_step:
                self.fsdp_gathered.add((rank, unit.chunk))
        if unit.phase == "F":
            receives = virtual > 0
            if receives:
                after.append(self._from_stage(rank, "F", unit.microbatch, virtual - 1))
            if unit.chunk in gathers:
                after.extend(gathers[unit.chunk])
            symbols = self.stages[virtual]
        else:
            after.append(f"{rank}/F{unit.microbatch}/v{virtual}/end")
            receives = virtual < len(self.stages) - 1
            if receives:
                after.append(self._from_stage(rank, "B", unit.microbatch, virtual + 1))
            symbols = tuple(reversed(self.stages[virtual]))
        after.extend(self._p2p_sync(rank, unit, prefix, after, receives))
        last = yield from self._symbols(rank, unit, prefix, symbols, tuple(after))
        end = self.g.add(f"{prefix}/end", after=(last,), rank=rank, lane=Lane.COMPUTE,
                         category="compute", work=_EMPTY, microbatch=unit.microbatch,
                         chunk=unit.chunk)
        self._send(rank, unit, virtual, prefix, end)
        if self.fsdp and not self.fsdp_per_step and unit.phase == "B":
            self.fsdp_reductions[rank].extend(self._chunk_collectives(
                rank, f"{prefix}/fsdp_rs", Op.REDUCE_SCATTER, virtual, (end,)))
        return end

    def _chunk_collectives(self, rank: int, name: str, op: Op, virtual: int,
                           after: tuple[str, ...]) -> list[str]:
        """All-gather of a chunk's parameters or reduce-scatter of its gradients, over
        attention DP (dense parameters) and expert DP (expert parameters)."""
        dense, expert = chunk_params(self.model, self.plan, self.stages, virtual)
        element = (self.recipe.grad_reduce_dtype_bytes if op is Op.REDUCE_SCATTER
                   else 1 if self.recipe.fp8_param_gather else blk.BF16_BYTES)
        names = [self._dp(rank, f"{name}/{kind}", op, kind, count * element, after)
                 for kind, count in (("dp", dense), ("edp", expert)) if count > 0]
        return [n for n in names if n is not None]

    def _p2p_sync(self, rank: int, unit: Unit, prefix: str, after: list[str],
                  receives: bool) -> tuple[str, ...]:
        """The host synchronisation that ends the pipeline exchange before `unit` (see the
        module docstring; `receives`: the unit takes its input from another virtual stage), as
        a task to wait for; none where there is no exchange."""
        sent = self._last_send.pop(rank, None)
        if not self.p2p_syncs or not (sent or receives):
            return ()
        waits = tuple(after) + ((sent,) if sent else ())
        return (self.g.add(f"{prefix}/p2p_sync", after=waits, rank=rank, lane=Lane.COMPUTE,
                           category="compute", work=_EMPTY, microbatch=unit.microbatch,
                           chunk=unit.chunk, host_sync=True),)

    def _send(self, rank: int, unit: Unit, virtual: int, prefix: str, end: str) -> None:
        last_virtual = len(self.stages) - 1
        if (unit.phase == "F" and virtual == last_virtual) or (unit.phase == "B" and virtual == 0):
            return
        peer = self._runs(rank, virtual + 1 if unit.phase == "F" else virtual - 1)
        if peer == rank:
            return
        nbytes = self.plan.mbs * self.plan.seq_len / (self.plan.cp * self.plan.tp) \
            * self.model.hidden_size * blk.BF16_BYTES
        pairs = self._pp_pairs(rank, peer)
        collective = Collective(op=Op.SEND_RECV, key=f"{prefix}/send", bytes_per_rank=nbytes,
                                groups=pairs, members=(rank,), algorithm="p2p",
                                graphed=self.recipe.cuda_graphs == "full")
        self._last_send[rank] = self.g.add(
            f"{prefix}/send", after=(end,), rank=rank, lane=Lane.PP, category="pp",
            collective=collective, microbatch=unit.microbatch, chunk=unit.chunk)

    def _pp_pairs(self, rank: int, peer: int) -> tuple[tuple[int, ...], ...]:
        """(sender, receiver) of every send of the stage that `rank`'s send stands for."""
        size = self.plan.ranks_per_stage
        offset, first = peer - rank, rank - rank % size
        number = self.classes[rank - first]
        key = (first, offset, number)
        if key not in self._pairs:
            self._pairs[key] = tuple((r, r + offset) for r in range(first, first + size)
                                     if self.classes[r - first] == number)
        return self._pairs[key]

    # --- layers -------------------------------------------------------------------------
    def _symbols(self, rank: int, unit: Unit, prefix: str, symbols: tuple[str, ...],
                 after: tuple[str, ...]) -> Segments:
        layer = self._first_layer(self._virtual(rank, unit.chunk))
        numbers = self._layer_numbers(symbols, layer, unit.phase)
        last = after
        for position, (symbol, number) in enumerate(zip(symbols, numbers)):
            last = ((yield from self._symbol(rank, unit, f"{prefix}/{position}{symbol}", symbol,
                                             number, last)),)
        return last[0]

    def _first_layer(self, virtual: int) -> int:
        return sum(stage.count("t") for stage in self.stages[:virtual])

    @staticmethod
    def _layer_numbers(symbols: tuple[str, ...], first: int, phase: str) -> list[int]:
        forward = symbols if phase == "F" else tuple(reversed(symbols))
        numbers, layer = [], first
        for symbol in forward:
            numbers.append(layer)
            layer += symbol == "t"
        return numbers if phase == "F" else numbers[::-1]

    def _symbol(self, rank: int, unit: Unit, name: str, symbol: str, layer: int,
                after: tuple[str, ...]) -> Segments:
        """One symbol of the layout in its LAYER_PHASES phases (embedding, logits and loss
        all in the first)."""
        if symbol == "E":
            last = self._compute(rank, unit, f"{name}.embedding", self.heads["embedding"], after)
        elif symbol == "L":
            logits = self._compute(rank, unit, f"{name}.logits", self.heads["logits"], after)
            last = self._compute(rank, unit, f"{name}.loss", self.heads["loss"], (logits,))
        elif symbol == "m":
            return (yield from self._mtp(rank, unit, name, after))
        else:
            return (yield from self._layer(rank, unit, name, self.model.is_moe_layer(layer),
                                           layer, after))
        for _ in range(LAYER_PHASES):
            yield
        return last

    def _mtp(self, rank: int, unit: Unit, name: str, after: tuple[str, ...]) -> Segments:
        forward = unit.phase == "F"
        steps = [("proj", "mtp_proj"), ("layer", None), ("logits", "logits"), ("loss", "loss")]
        last = after
        for label, block in (steps if forward else steps[::-1]):
            if block is None:
                last = ((yield from self._layer(rank, unit, f"{name}.{label}",
                                                self.model.mtp_is_moe, self.model.num_layers,
                                                last)),)
            else:
                last = (self._compute(rank, unit, f"{name}.{label}", self.heads[block], last),)
        return last[0]

    def _layer(self, rank: int, unit: Unit, name: str, moe: bool, layer: int,
               after: tuple[str, ...]) -> Segments:
        """A transformer layer, yielding after each of Megatron's combined-1F1B phases
        (LAYER_PHASES): forward attention and router | dispatch | experts and combine;
        backward combine | experts and dispatch | router and attention. A dense layer's MLP
        takes the experts' phase."""
        if unit.phase == "F":
            last = self._attention(rank, unit, name, layer, after)
            if moe:
                return (yield from self._moe_forward(rank, unit, name, (last,)))
            yield
            yield
            last = self._dense(rank, unit, name, (last,))
        else:
            if moe:
                last = yield from self._moe_backward(rank, unit, name, after)
            else:
                yield
                last = self._dense(rank, unit, name, after)
                yield
            last = self._attention(rank, unit, name, layer, (last,))
        yield
        return last

    def _attention_blocks(self, layer: int) -> dict[str, blk.BlockWork]:
        """The attention blocks of `layer`; sliding-window layers cost less than full ones."""
        window = self.model.is_window_layer(layer)
        if window not in self._attn:
            self._attn[window] = blk.attention_blocks(self.model, self.plan, self.recipe, layer)
        return self._attn[window]

    def _attention(self, rank: int, unit: Unit, name: str, layer: int,
                   after: tuple[str, ...]) -> str:
        order = ATTENTION_BLOCKS if unit.phase == "F" else ATTENTION_BLOCKS[::-1]
        last = after
        for block in order:
            work = self._attention_blocks(layer)[block]
            if block == "attn_proj":
                last = self._projections(rank, unit, name, work, last)
            elif block == "core_attn" and self.plan.cp > 1:
                last = (self._ring_attention(rank, unit, f"{name}.{block}", layer, last),)
            else:
                last = (self._compute(rank, unit, f"{name}.{block}", work, last),)
        return last[0]

    def _overlaps_tp(self) -> bool:
        return self.recipe.tp_comm_overlap and self.plan.tp > 1

    def _projections(self, rank: int, unit: Unit, name: str, work: blk.BlockWork,
                     after: tuple[str, ...]) -> tuple[str, ...]:
        """The attention projections with their TP collective: an all-gather before them
        forward, a reduce-scatter after them backward; with TP comm overlap, beside them
        (`_reduce_scatter_beside`)."""
        forward = unit.phase == "F"
        op, collective = ((Op.ALL_GATHER, f"{name}.attn.ag") if forward
                          else (Op.REDUCE_SCATTER, f"{name}.attn.rs"))
        if self._overlaps_tp():
            proj = self._compute(rank, unit, f"{name}.attn_proj", work, after)
            if forward:
                return (proj, *self._tp(rank, unit, collective, op, after))
            return self._reduce_scatter_beside(rank, unit, collective, (proj,), after)
        if forward:
            after = self._tp(rank, unit, collective, op, after)
        proj = self._compute(rank, unit, f"{name}.attn_proj", work, after)
        return (proj,) if forward else self._tp(rank, unit, collective, op, (proj,))

    def _ring_blocks(self, layer: int) -> tuple[blk.BlockWork, blk.BlockWork]:
        """One ring step of `layer`'s core attention and the kernels that merge the steps."""
        window = self.model.is_window_layer(layer)
        if window not in self._rings:
            core = self._attention_blocks(layer)["core_attn"]
            self._rings[window] = blk.ring_attention(core, self.model, self.plan, self.recipe)
        return self._rings[window]

    def _ring_attention(self, rank: int, unit: Unit, name: str, layer: int,
                        after: tuple[str, ...]) -> str:
        """Core attention under context parallelism: its steps around the CP ring, each on
        the keys and values the previous exchange brought (blocks.RING_STEP_KERNELS);
        backward, after the recomputed forward ring when core attention is recomputed."""
        step, merge = self._ring_blocks(layer)
        if unit.phase == "B" and step.recompute is not None and merge.recompute is not None:
            after = (self._ring(rank, unit, f"{name}.recompute", (step.recompute,
                                                                  merge.recompute),
                                False, "recompute", after),)
        works = ((step.forward, merge.forward) if unit.phase == "F"
                 else (step.backward, merge.backward))
        return self._ring(rank, unit, name, works, unit.phase == "B", "compute", after)

    def _ring(self, rank: int, unit: Unit, name: str, works: tuple[Work, Work],
              backward: bool, category: str, after: tuple[str, ...]) -> str:
        """One pass of the ring: exchange i runs beside step i and brings step i+1's keys
        and values; backward it also carries the partial dK, dV of step i-1. The merge
        kernels follow the last step (and, backward, the last exchange)."""
        step_work, merge_work = works
        kv_bytes = blk.ring_kv_bytes(self.model, self.plan, self.recipe)
        exchanges = blk.ring_exchanges(self.plan.cp, backward)
        step: str | None = None
        incoming: str | None = None
        for i in range(self.plan.cp):
            waits = after if incoming is None else (incoming,)
            outgoing = incoming
            if i < len(exchanges):
                carried = (step,) if backward and step is not None else ()
                outgoing = self._cp_exchange(rank, unit, f"{name}.x{i}",
                                             exchanges[i] * kv_bytes, waits + carried)
            step = self.g.add(f"{name}.s{i}", after=waits, rank=rank, lane=Lane.COMPUTE,
                              category=category, work=step_work, microbatch=unit.microbatch,
                              chunk=unit.chunk)
            incoming = outgoing
        assert step is not None and incoming is not None
        tail = (step, incoming) if backward else (step,)
        return self.g.add(f"{name}.merge", after=tail, rank=rank, lane=Lane.COMPUTE,
                          category="recompute" if category == "recompute" else "elementwise",
                          work=merge_work, microbatch=unit.microbatch, chunk=unit.chunk)

    def _cp_exchange(self, rank: int, unit: Unit, name: str, nbytes: float,
                     after: tuple[str, ...]) -> str:
        """One exchange of the CP ring: every member sends `nbytes` to its successor."""
        pairs, members = self._ring_pairs_of(rank)
        collective = Collective(op=Op.SEND_RECV, key=f"{members[0]}/{name.split('/', 1)[1]}",
                                bytes_per_rank=nbytes, groups=pairs, members=members,
                                algorithm="p2p", graphed=self.recipe.cuda_graphs == "full")
        return self.g.add(name, after=after, rank=rank, lane=Lane.CP, category="cp",
                          collective=collective, microbatch=unit.microbatch, chunk=unit.chunk)

    def _ring_pairs_of(self, rank: int) -> _Part:
        """(sender, successor) of every CP ring `rank`'s exchanges stand for, and the
        simulated ranks that take part."""
        if rank not in self._ring_pairs:
            part = self._part("cp", rank)
            assert part is not None
            groups, members = part
            pairs = tuple((group[j], group[(j + 1) % len(group)]) for group in groups
                          for j in range(len(group)))
            self._ring_pairs[rank] = (pairs, members)
        return self._ring_pairs[rank]

    def _dense(self, rank: int, unit: Unit, name: str, after: tuple[str, ...]) -> str:
        """The dense MLP between its TP all-gather and reduce-scatter; with TP comm overlap,
        the gather beside it and the reduce-scatter pipelined with it (`_reduce_scatter_beside`)."""
        if self._overlaps_tp():
            mlp = self._compute(rank, unit, f"{name}.mlp", self.mlp, after)
            gather = self._tp(rank, unit, f"{name}.mlp.ag", Op.ALL_GATHER, after)
            return self._reduce_scatter_beside(rank, unit, f"{name}.mlp.rs", (mlp, *gather),
                                               after)[0]
        last = self._tp(rank, unit, f"{name}.mlp.ag", Op.ALL_GATHER, after)
        last = (self._compute(rank, unit, f"{name}.mlp", self.mlp, last),)
        return self._tp(rank, unit, f"{name}.mlp.rs", Op.REDUCE_SCATTER, last)[0]

    def _moe_forward(self, rank: int, unit: Unit, name: str, after: tuple[str, ...]) -> Segments:
        m = self.moe
        # Megatron computes the shared expert before routing; overlapped, it is launched with
        # the dispatch instead and runs under it; before the graph scope that captures it
        # (recipe.graph_shared_expert off), after the dispatch, with the routed experts.
        where = self._shared_expert_place() if "shared_expert" in m else None
        shared = (self._compute(rank, unit, f"{name}.shared_expert", m["shared_expert"], after)
                  if where == "first" else None)
        router = self._compute(rank, unit, f"{name}.router", m["router"], after)
        if where == "with_dispatch":
            shared = self._compute(rank, unit, f"{name}.shared_expert", m["shared_expert"],
                                   (router,))
        yield
        dispatch = self._a2a(rank, unit, f"{name}.dispatch", (router,))
        yield
        # The host waits for the dispatch before it launches the experts (no dispatch task,
        # and so no wait, when the expert-parallel group is one GPU). Megatron reads the token
        # counts earlier, before the tokens move (`before_ep_alltoall`, DeepEP's notify), but
        # a wait there fits the measured runs worse (docs/accuracy.md, "The rows that miss"):
        # this one also stands for a cost of eager MoE layers that moesim does not otherwise
        # model.
        sync = (dispatch != router and self.recipe.cuda_graphs != "full"
                and not static_expert_shapes(self.recipe))
        if where == "with_experts":
            shared = self._compute(rank, unit, f"{name}.shared_expert", m["shared_expert"],
                                   (dispatch,), host_sync=sync)
            sync = False
        experts = self._compute(rank, unit, f"{name}.experts", m["experts"], (dispatch,),
                                host_sync=sync)
        combine = self._a2a(rank, unit, f"{name}.combine", (experts,))
        # The combine's post-processing is launched after the phase: in the combined 1F1B the
        # paired backward's attention runs while the combine is in flight.
        yield
        out = self._compute(rank, unit, f"{name}.unpermute", m["unpermute"], (combine,))
        if shared is not None:
            out = self._join(rank, name, (out, shared), unit.microbatch, unit.chunk)
        return out

    def _shared_expert_place(self) -> str:
        """Where a MoE layer's forward computes its shared expert: "with_dispatch" (overlapped
        with it), "first" (before the router: Megatron-LM's MoELayer.shared_experts_compute,
        which the TE-scoped moe_router graph captures, Megatron-LM PR 1920) or "with_experts"
        (after the dispatch's host sync, ahead of the routed experts: the earlier
        MoELayer.experts_compute, recipe.graph_shared_expert off)."""
        if self.recipe.shared_expert_overlap:
            return "with_dispatch"
        return "first" if self.recipe.graph_shared_expert else "with_experts"

    def _moe_backward(self, rank: int, unit: Unit, name: str,
                      after: tuple[str, ...]) -> Segments:
        m = self.moe
        out = self._compute(rank, unit, f"{name}.unpermute", m["unpermute"], after)
        combine = self._a2a(rank, unit, f"{name}.combine", (out,))
        yield
        experts = self._compute(rank, unit, f"{name}.experts", m["experts"], (combine,))
        tail = [self._a2a(rank, unit, f"{name}.dispatch", (experts,))]
        if "shared_expert" in m:
            tail.append(self._compute(rank, unit, f"{name}.shared_expert", m["shared_expert"],
                                      after))
        yield
        return self._compute(rank, unit, f"{name}.router", m["router"], tuple(tail))

    def _join(self, rank: int, name: str, parts: tuple[str, ...], microbatch: int = -1,
              chunk: int = -1) -> str:
        """A zero-work task that waits for all `parts`."""
        return self.g.add(f"{name}.join", after=parts, rank=rank, lane=Lane.COMPUTE,
                          category="compute", work=_EMPTY, microbatch=microbatch, chunk=chunk)

    # --- task helpers -------------------------------------------------------------------
    def _compute(self, rank: int, unit: Unit, name: str, block: blk.BlockWork,
                 after: tuple[str, ...], host_sync: bool = False) -> str:
        if unit.phase == "B" and block.recompute is not None:
            after = (self.g.add(f"{name}.recompute", after=after, rank=rank, lane=Lane.COMPUTE,
                                category="recompute", work=block.recompute,
                                microbatch=unit.microbatch, chunk=unit.chunk),)
        work = block.forward if unit.phase == "F" else block.backward
        category = CATEGORIES.get(name.rsplit(".", 1)[-1], "compute")
        return self.g.add(name, after=after, rank=rank, lane=Lane.COMPUTE, category=category,
                          work=work, microbatch=unit.microbatch, chunk=unit.chunk,
                          host_sync=host_sync)

    def _a2a(self, rank: int, unit: Unit, name: str, after: tuple[str, ...]) -> str:
        dispatcher = self.recipe.dispatcher
        to_experts = name.endswith("dispatch") == (unit.phase == "F")
        nbytes = self.dispatch_elements * dispatch_payload_bytes(self.recipe, to_experts)
        op = Op.ALL_TO_ALL
        if dispatcher == "allgather":
            op = Op.ALL_GATHER if to_experts else Op.REDUCE_SCATTER
            nbytes = self.tokens * self.plan.ep * self.model.hidden_size * blk.BF16_BYTES
        collective = self._collective(
            op, "ep", rank, name.split("/", 1)[1], nbytes, dispatcher, self.recipe.dispatcher_sms,
            self.expert_routing,
            self.recipe.deepep_nvlink_efficiency if dispatcher == "deepep" else None)
        if collective is None:
            return after[0]
        return self.g.add(name, after=after, rank=rank, lane=Lane.EP, category="ep",
                          collective=collective, microbatch=unit.microbatch, chunk=unit.chunk)

    def _reduce_scatter_beside(self, rank: int, unit: Unit, name: str, gemm: tuple[str, ...],
                               after: tuple[str, ...]) -> tuple[str, ...]:
        """A reduce-scatter pipelined with the GEMM whose output it reduces, in TP chunks:
        all but the last chunk's share run beside the GEMM, the last after it."""
        share = 1 / self.plan.tp
        beside = self._tp(rank, unit, name, Op.REDUCE_SCATTER, after, 1 - share)
        return self._tp(rank, unit, f"{name}.last", Op.REDUCE_SCATTER, (*gemm, *beside), share)

    def _tp(self, rank: int, unit: Unit, name: str, op: Op, after: tuple[str, ...],
            share: float = 1.0) -> tuple[str, ...]:
        """A TP collective of the layer's sequence-parallel activations (`share` of them)."""
        if self.plan.tp == 1:
            return after
        nbytes = self.plan.mbs * self.plan.seq_len / self.plan.cp * self.model.hidden_size \
            * blk.BF16_BYTES * share
        collective = self._collective(op, "tp", rank, name.split("/", 1)[1], nbytes, "nccl")
        assert collective is not None
        return (self.g.add(name, after=after, rank=rank, lane=Lane.TP, category="tp",
                           collective=collective, microbatch=unit.microbatch,
                           chunk=unit.chunk),)

    # --- data parallelism and the optimizer ---------------------------------------------
    def _param_gathers_at_start(self, rank: int) -> dict[int, tuple[str, ...]]:
        """With overlapped parameter gathering, each chunk's all-gather opens the step."""
        if not self.recipe.overlap_param_gather or self.fsdp:
            return {}
        return self._param_gathers(rank, ())

    def _param_gathers(self, rank: int, after: tuple[str, ...]) -> dict[int, tuple[str, ...]]:
        """Each chunk's parameter all-gathers; the chunk's forwards wait for them where they
        start, not where the gathers are launched."""
        names = {}
        for chunk in range(self.plan.vpp):
            virtual = self._virtual(rank, chunk)
            parts = self._chunk_collectives(rank, f"{rank}/ag/c{chunk}", Op.ALL_GATHER, virtual,
                                            after)
            if parts:
                names[chunk] = tuple(parts)
        return names

    def _dp(self, rank: int, name: str, op: Op, kind: str, nbytes: float,
            after: tuple[str, ...]) -> str | None:
        collective = self._collective(op, kind, rank, name.split("/", 1)[1], nbytes, "nccl")
        if collective is None:
            return None
        return self.g.add(name, after=after, rank=rank, lane=Lane.DP, category="dp",
                          collective=collective)

    def _step_tail(self, rank: int, last_backward: dict[int, str],
                   gathers: dict[int, tuple[str, ...]]) -> None:
        # FSDP reduces at its post-backward hook, the distributed optimizer when its buckets
        # are ready (overlapped) or after the last backward of all.
        overlap = self.recipe.overlap_grad_reduce or self.fsdp
        everything = tuple(last_backward.values())
        reductions = list(self.fsdp_reductions[rank])
        per_chunk = not self.fsdp or self.fsdp_per_step
        for chunk, end in (sorted(last_backward.items()) if per_chunk else []):
            virtual = self._virtual(rank, chunk)
            reductions.extend(self._chunk_collectives(
                rank, f"{rank}/rs/c{chunk}", Op.REDUCE_SCATTER, virtual,
                (end,) if overlap else everything))
        reductions.extend(self._router_bias(rank, everything))
        dense, expert = rank_params(self.model, self.plan, self.stages,
                                    self.recipe.pipeline_schedule, stage_of(self.plan, rank))
        shard = dense / self.plan.dp + expert / self.plan.expert_dp
        optimizer = self.g.add(f"{rank}/optimizer", after=tuple(reductions) + everything,
                               rank=rank, lane=Lane.COMPUTE, category="optimizer",
                               work=blk.optimizer_work(shard, self.recipe,
                                                       self.recipe.cuda_graphs == "full"))
        if not gathers and not self.fsdp:
            self._param_gathers(rank, (optimizer,))

    def _router_bias(self, rank: int, after: tuple[str, ...]) -> list[str]:
        """Aux-loss-free routing: tokens-per-expert summed over data parallelism each step."""
        if not self.model.is_moe:
            return []
        nbytes = 4.0 * self.model.num_experts * self.model.num_moe_layers
        name = self._dp(rank, f"{rank}/router_bias", Op.ALL_REDUCE, "dp", nbytes, after)
        return [name] if name is not None else []


_EMPTY = Work(flops=0.0, hbm_bytes=0.0, kernel_class=blk.KernelClass.MEMORY, precision="bf16",
              kernels=0, graphed=True)
