"""Task and TaskGraph: the work of one training step as a dependency graph over lanes.

A task runs on one lane of one simulated rank. A compute task carries `Work` (FLOPs and bytes,
never seconds); a communication task carries a `Collective` (an operation, a payload and the
groups of global ranks it stands for). Tasks on different simulated ranks that share a
`Collective.key` are the same collective instance: it starts when all of them have arrived.

Vocabulary: a *rank* is a position in the parallel plan and equals the index of the GPU it is
placed on; a *simulated rank* is a rank the engine replays (one representative per pipeline
stage when folded, every rank when not, one per class of alike ranks when an asymmetric
what-if partly unfolds the step) and stands for `gpus_per_rank` GPUs.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from enum import StrEnum

import networkx as nx


class Lane(StrEnum):
    """The independent queues of one GPU: compute, and one stream per kind of communication."""

    COMPUTE = "compute"
    TP = "tp"
    CP = "cp"
    EP = "ep"
    PP = "pp"
    DP = "dp"


class Op(StrEnum):
    """Collective operations."""

    ALL_TO_ALL = "all_to_all"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_REDUCE = "all_reduce"
    SEND_RECV = "send_recv"


class KernelClass(StrEnum):
    """What bounds a compute kernel, for the cost model's efficiencies."""

    GEMM = "gemm"
    LOGITS = "logits"
    GROUPED_GEMM = "grouped_gemm"
    FUSED_GROUPED_MLP = "fused_grouped_mlp"
    ATTENTION = "attention"
    WINDOW_ATTENTION = "window_attention"
    MEMORY = "memory"
    UNFUSED_PERMUTE = "unfused_permute"


@dataclass(frozen=True, slots=True, kw_only=True)
class Work:
    """Executed work of a compute task: FLOPs at a precision, HBM bytes, kernel launches
    (`graphed`: replayed from a CUDA graph; `pdl`: launched with programmatic dependent
    launch, so the gap before each kernel hides as it does inside a graph).
    `streaming_hbm_bytes`: bytes that the task's memory-bound kernels (activation function,
    quantisation) move before or after its GEMMs, in series with them. `exponentials`: the
    softmax exponentials of fused attention, which the special-function units compute in
    series with its matmuls. `head_dim`: fused attention's query/key head dimension, for the
    efficiencies measured per head dimension (0: not attention)."""

    flops: float
    hbm_bytes: float
    kernel_class: KernelClass
    precision: str
    kernels: int
    graphed: bool
    pdl: bool = False
    streaming_hbm_bytes: float = 0.0
    exponentials: float = 0.0
    head_dim: int = 0

    def __post_init__(self) -> None:
        if (self.flops < 0 or self.hbm_bytes < 0 or self.kernels < 0
                or self.streaming_hbm_bytes < 0 or self.exponentials < 0 or self.head_dim < 0):
            raise ValueError(f"work: flops={self.flops}, hbm_bytes={self.hbm_bytes}, "
                             f"streaming_hbm_bytes={self.streaming_hbm_bytes}, "
                             f"exponentials={self.exponentials}, head_dim={self.head_dim}, "
                             f"kernels={self.kernels} must be >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class Collective:
    """A collective instance. `groups` are every instance this task stands for (folding).

    `bytes_per_rank`: for all-to-all the bytes each rank sends in all; for reduce-scatter,
    all-gather and all-reduce the full buffer size on each rank; for send/recv the message.
    `expert_routing`: (experts, top-k, groups, chosen groups) of an EP all-to-all whose
    dispatcher sends a token once
    per destination rank and, to another NVLink domain, once per destination domain, to be
    forwarded over NVLink there (DeepEP internode and HybridEP kernels); None = plain pairwise.
    `nvlink_efficiency`: a measured share of NVLink line rate for this collective's NVLink
    flows, in place of the calibrated efficiency of its algorithm; None = calibrated.
    """

    op: Op
    key: str
    bytes_per_rank: float
    groups: tuple[tuple[int, ...], ...]
    members: tuple[int, ...]
    algorithm: str
    held_sms: int = 0
    graphed: bool = False
    expert_routing: tuple[int, int, int, int] | None = None
    nvlink_efficiency: float | None = None

    def __post_init__(self) -> None:
        if self.bytes_per_rank < 0:
            raise ValueError(f"collective {self.key}: bytes_per_rank={self.bytes_per_rank} "
                             "must be >= 0")
        if self.nvlink_efficiency is not None and not 0 < self.nvlink_efficiency <= 1:
            raise ValueError(f"collective {self.key}: nvlink_efficiency="
                             f"{self.nvlink_efficiency} must be in (0, 1]")
        if not self.groups or min(map(len, self.groups)) < 2:
            raise ValueError(f"collective {self.key}: every group needs >= 2 ranks")


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """One node of the graph. `category` names the breakdown bucket its time goes to.

    `host_sync`: the CPU waits for this task's dependencies to finish before it launches it
    (it reads their result on the host: the token counts per expert that dropless MoE without
    static shapes copies back before launching the experts; or, after a pipeline exchange of
    the non-interleaved 1F1B, torch.cuda.synchronize). `position`: the task's place in
    its rank's program order, the order the graph builder received it in (ids are a
    topological order of all ranks' tasks, which a dependency on another rank can reorder).
    `host_nodes`: schedule nodes of Megatron's combined 1F1B whose bookkeeping the CPU runs
    just before launching this task (CostParams.schedule_node_host_s each).
    """

    id: int
    name: str
    rank: int
    lane: Lane
    deps: tuple[int, ...]
    category: str
    work: Work | None = None
    collective: Collective | None = None
    microbatch: int = -1
    chunk: int = -1
    host_sync: bool = False
    position: int = 0
    host_nodes: int = 0

    def __post_init__(self) -> None:
        if (self.work is None) == (self.collective is None):
            raise ValueError(f"task {self.name}: exactly one of work and collective is needed")
        if (self.work is not None) != (self.lane is Lane.COMPUTE):
            raise ValueError(f"task {self.name}: work runs on the compute lane, collectives on "
                             f"communication lanes (lane={self.lane})")
        if self.host_nodes < 0:
            raise ValueError(f"task {self.name}: host_nodes={self.host_nodes} must be >= 0")


@dataclass(frozen=True, slots=True)
class TaskGraph:
    """Tasks indexed by id (ids are 0..n-1 and every dependency points to a smaller id).

    `gpus_per_rank`: how many GPUs each simulated rank stands for, in `simulated_ranks` order;
    empty when they all stand for equally many.
    """

    tasks: tuple[Task, ...]
    simulated_ranks: tuple[int, ...]
    gpus_per_rank: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.gpus_per_rank and (len(self.gpus_per_rank) != len(self.simulated_ranks)
                                   or min(self.gpus_per_rank) < 1):
            raise ValueError(f"task graph: gpus_per_rank={self.gpus_per_rank} needs one count "
                             f">= 1 per simulated rank ({len(self.simulated_ranks)})")
        simulated = set(self.simulated_ranks)
        for position, task in enumerate(self.tasks):
            if task.id != position:
                raise ValueError(f"task graph: task {task.name} has id {task.id} at {position}")
            if task.deps and (min(task.deps) < 0 or max(task.deps) >= task.id):
                raise ValueError(f"task graph: {task.name} depends on a later or unknown task")
            members = task.collective.members if task.collective else (task.rank,)
            if not simulated.issuperset(members):
                raise ValueError(f"task graph: {task.name} involves ranks {members} that are not"
                                 f" simulated")

    def to_networkx(self) -> nx.DiGraph:
        """The graph for inspection (edges from dependency to dependent)."""
        graph = nx.DiGraph()
        for task in self.tasks:
            graph.add_node(task.id, name=task.name, rank=task.rank, lane=str(task.lane))
            graph.add_edges_from((dep, task.id) for dep in task.deps)
        return graph


class GraphBuilder:
    """Collects tasks by unique name with dependencies by name; `build` orders them.

    Tasks may be added in any order (a pipeline's backward depends on a later stage's);
    `build` numbers them in a topological order that keeps insertion order among equals.
    """

    def __init__(self) -> None:
        self._fields: dict[str, dict[str, object]] = {}
        self._deps: dict[str, tuple[str, ...]] = {}
        self._host_nodes: dict[object, int] = {}

    def add(self, name: str, after: tuple[str, ...] = (), **fields: object) -> str:
        """Add a task (all Task fields but `id`, `name` and `deps`) and return its name."""
        if name in self._fields:
            raise ValueError(f"task graph: duplicate task name {name!r}")
        if fields.get("rank") in self._host_nodes:
            fields["host_nodes"] = self._host_nodes.pop(fields["rank"])
        self._fields[name] = fields
        self._deps[name] = after
        return name

    def charge_host_node(self, rank: int) -> None:
        """One more schedule node for the host of `rank` to run before it launches the next
        task added on that rank (Task.host_nodes)."""
        self._host_nodes[rank] = self._host_nodes.get(rank, 0) + 1

    def build(self, simulated_ranks: tuple[int, ...],
              gpus_per_rank: tuple[int, ...] = ()) -> TaskGraph:
        names = list(self._fields)
        index = {name: i for i, name in enumerate(names)}
        order = [names[i] for i in self._topological_order(index)]
        ids = {name: i for i, name in enumerate(order)}
        tasks = tuple(Task(id=ids[name], name=name,
                           deps=tuple(sorted(ids[d] for d in self._deps[name])),
                           position=index[name],
                           **self._fields[name])  # type: ignore[arg-type]
                      for name in order)
        return TaskGraph(tasks, simulated_ranks, gpus_per_rank)

    def _topological_order(self, index: dict[str, int]) -> list[int]:
        """The tasks' insertion indices (`index` maps names to them) in a topological order,
        the earliest-added ready task first: Kahn's algorithm over a heap, the order networkx's
        lexicographical_topological_sort gives, without building a DiGraph of every task."""
        waiting = [0] * len(index)
        dependents: list[list[int]] = [[] for _ in index]
        for name, deps in self._deps.items():
            for dep in dict.fromkeys(deps):
                if dep not in index:
                    raise ValueError(f"task graph: {name!r} depends on unknown task {dep!r}")
                dependents[index[dep]].append(index[name])
                waiting[index[name]] += 1
        ready = [i for i, count in enumerate(waiting) if count == 0]
        order = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for j in dependents[i]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    heapq.heappush(ready, j)
        if len(order) < len(index):
            raise ValueError("task graph: the dependencies form a cycle")
        return order
