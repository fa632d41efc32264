"""simulate(graph, topology, params) -> Trace: one SimPy replay of a training step.

Each simulated rank has a host lane (the CPU launching kernels in program order), a compute
lane and one lane per kind of communication. The host launches a rank's tasks in program order,
`Task.position` (before a task it also runs the combined-1F1B schedule nodes the task carries,
`Task.host_nodes`). The compute lane is a CUDA stream: a task starts once launched, once its
dependencies are done and once the task launched before it on that lane has ended, so a
slower host never lets a later kernel overtake. A task
of a communication lane starts when its dependencies are done, the host has launched it and the
lane is free, earliest in program order first. A collective starts when every
simulated member has arrived and ends when the fluid network has moved its bytes. A member
waiting for the others holds its lane, unless a task earlier in program order asks for that
lane first: it then steps back and queues again, so that ranks whose timelines differ (an
unfolded straggler) never wait on each other. While a collective whose kernels hold SMs is in
flight, compute on that GPU progresses at (sm_count - held) / sm_count of its full speed. A
straggler's compute takes `compute_slowdown[rank]` times as long.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import partial
from typing import Callable, Generator, Mapping

import numpy as np
import simpy

from topologies.topology import Topology
from workloads.graph import Collective, Lane, Task, TaskGraph

from simulator.calibration import CostParams
from simulator.collectives import CollectivePlanner
from simulator.costs import compute_time_s, host_issue_s
from simulator.network import FluidNetwork

COLLECTIVE_HOST_KERNELS = 1


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """When one task ran: `issued_s` the host launched it, [start_s, end_s] on its lane."""

    task_id: int
    name: str
    rank: int
    lane: str
    category: str
    issued_s: float
    start_s: float
    end_s: float
    microbatch: int
    chunk: int


@dataclass(frozen=True, slots=True)
class Trace:
    """Every task's record and the step time (the last task's end)."""

    records: tuple[TaskRecord, ...]
    step_time_s: float
    simulated_ranks: tuple[int, ...]


class _SMShare:
    """Progress of the one running compute task of a GPU, slowed while SMs are held."""

    def __init__(self, env: simpy.Environment, sm_count: int) -> None:
        self._env = env
        self._sm_count = sm_count
        self._held = 0
        self._remaining_s = 0.0
        self._last_s = 0.0
        self._on_done: Callable[[], None] | None = None
        self._generation = 0

    def run(self, seconds: float, on_done: Callable[[], None]) -> None:
        """Run `seconds` of compute at full speed; call `on_done` when it is done."""
        self._remaining_s, self._last_s = seconds, self._env.now
        self._on_done = on_done
        self._reschedule()

    def hold(self, sms: int) -> None:
        """Take `sms` SMs from compute (give them back with a negative count); with none the
        running task's finish stands as scheduled."""
        if sms == 0:
            return
        self._advance()
        self._held += sms
        self._reschedule()

    def _rate(self) -> float:
        return max(self._sm_count - self._held, 1) / self._sm_count

    def _advance(self) -> None:
        if self._on_done is not None:
            self._remaining_s -= (self._env.now - self._last_s) * self._rate()
        self._last_s = self._env.now

    def _reschedule(self) -> None:
        if self._on_done is None:
            return
        self._generation += 1
        generation = self._generation
        timer = self._env.timeout(max(self._remaining_s, 0.0) / self._rate())
        timer.callbacks.append(lambda _: self._finish(generation))

    def _finish(self, generation: int) -> None:
        if generation != self._generation or self._on_done is None:
            return
        on_done, self._on_done = self._on_done, None
        on_done()


class _Replay:
    """The SimPy processes of one replay; `run()` returns the Trace."""

    def __init__(self, graph: TaskGraph, topology: Topology, params: CostParams,
                 nvls: bool, compute_slowdown: Mapping[int, float]) -> None:
        self.graph, self.topology, self.params, self.nvls = graph, topology, params, nvls
        self.slowdown = compute_slowdown
        self.env = simpy.Environment()
        self.done = [self.env.event() for _ in graph.tasks]
        self.issued = [self.env.event() for _ in graph.tasks]
        self.issued_s = [0.0] * len(graph.tasks)
        self.lanes: dict[tuple[int, Lane], simpy.PriorityResource] = {}
        self.sm = {rank: _SMShare(self.env, topology.gpu.sm_count)
                   for rank in graph.simulated_ranks}
        self.arrivals: dict[str, list[simpy.Event]] = defaultdict(list)
        # (rank, lane) -> (position, preempt event) of a collective holding the lane, waiting
        self.waiting: dict[tuple[int, Lane], tuple[int, simpy.Event]] = {}
        self.planner = CollectivePlanner(topology, params)
        self.network = FluidNetwork(
            capacity_bytes_per_s=np.array([link.capacity_bytes_per_s for link in topology.links]),
            now=lambda: self.env.now, schedule=self._schedule)
        self.records: list[TaskRecord] = []

    def _schedule(self, delay_s: float, callback: Callable[[], object]) -> None:
        def fire(_: simpy.Event) -> None:
            callback()

        self.env.timeout(delay_s).callbacks.append(fire)

    def _lane(self, rank: int, lane: Lane) -> simpy.PriorityResource:
        key = (rank, lane)
        if key not in self.lanes:
            self.lanes[key] = simpy.PriorityResource(self.env, capacity=1)
        return self.lanes[key]

    def run(self) -> Trace:
        by_rank: dict[int, list[Task]] = defaultdict(list)
        for task in self.graph.tasks:
            by_rank[task.rank].append(task)
        for tasks in by_rank.values():
            launched = sorted(tasks, key=lambda t: t.position)
            kernels = [t for t in launched if t.lane == Lane.COMPUTE]
            for before, task in zip([None, *kernels], kernels):
                after = [] if before is None else [self.done[before.id]]
                self._when_ready(task, after, partial(self._start_kernel, task))
            for task in launched:
                if task.lane != Lane.COMPUTE:
                    self._when_ready(task, [], partial(self._start_task, task))
            self.env.process(self._host(launched))
        self.env.run()
        unfinished = [t.name for t in self.graph.tasks if not self.done[t.id].triggered]
        if unfinished:
            raise RuntimeError(f"simulation deadlocked; {len(unfinished)} tasks never ran, "
                               f"first {unfinished[0]!r}")
        records = tuple(sorted(self.records, key=lambda r: r.task_id))
        return Trace(records, max(r.end_s for r in records), self.graph.simulated_ranks)

    def _host(self, tasks: list[Task]) -> Generator[simpy.Event, None, None]:
        """The CPU of one rank: launches tasks in program order, waits at host syncs."""
        for task in tasks:
            if task.host_sync:
                yield self.env.all_of([self.done[d] for d in task.deps])
            if task.work is not None:
                issue_s = host_issue_s(task.work.kernels, task.work.graphed, self.params)
            else:
                assert task.collective is not None
                issue_s = host_issue_s(COLLECTIVE_HOST_KERNELS, task.collective.graphed,
                                       self.params)
            issue_s += task.host_nodes * self.params.schedule_node_host_s
            if issue_s > 0:
                yield self.env.timeout(issue_s)
            self.issued_s[task.id] = self.env.now
            self.issued[task.id].succeed()

    def _when_ready(self, task: Task, more: list[simpy.Event],
                    start: Callable[[], object]) -> None:
        """Call `start` once the host has launched `task`, its dependencies are done and the
        events `more` have happened."""
        waits = [self.done[d] for d in task.deps] + [self.issued[task.id]] + more
        pending = len(waits)

        def arrived(_: simpy.Event) -> None:
            nonlocal pending
            pending -= 1
            if pending == 0:
                start()

        for event in waits:
            event.callbacks.append(arrived)

    def _start_task(self, task: Task) -> None:
        self.env.process(self._task(task))

    def _task(self, task: Task) -> Generator[simpy.Event, None, None]:
        if task.collective is not None and len(task.collective.members) > 1:
            yield from self._joint(task, task.collective)
            return
        self._preempt_waiting(task)
        with self._lane(task.rank, task.lane).request(priority=task.position) as request:
            yield request
            yield from self._communicate(task)
        self.done[task.id].succeed()

    def _start_kernel(self, task: Task) -> None:
        """Run a task of the compute lane, a CUDA stream: once launched, once its inputs are
        ready and once the kernel launched before it on that stream has ended."""
        assert task.work is not None
        start_s = self.env.now
        seconds = compute_time_s(task.work, self.topology.gpu, self.params)
        if self.slowdown:
            seconds *= self.slowdown.get(task.rank, 1.0)

        def finished() -> None:
            self._record(task, start_s)
            self.done[task.id].succeed()

        self.sm[task.rank].run(seconds, finished)

    def _communicate(self, task: Task) -> Generator[simpy.Event, None, None]:
        """Run a collective of one simulated member that holds its lane."""
        assert task.collective is not None
        start_s = self.env.now
        yield self._arrive(task.collective)
        self._record(task, start_s)

    def _joint(self, task: Task, collective: Collective) -> Generator[simpy.Event, None, None]:
        """A collective of several simulated ranks: hold the lane while waiting for the others,
        unless a task earlier in program order asks for it before they come."""
        lane = self._lane(task.rank, task.lane)
        while True:
            self._preempt_waiting(task)
            with lane.request(priority=task.position) as request:
                yield request
                start_s = self.env.now
                finished = self._arrive(collective)
                if collective.key in self.arrivals:
                    preempted = self.env.event()
                    self.waiting[task.rank, task.lane] = (task.position, preempted)
                    yield finished | preempted
                    del self.waiting[task.rank, task.lane]
                    if self._withdraw(collective.key, finished):
                        continue
                yield finished
                self._record(task, start_s)
            self.done[task.id].succeed()
            return

    def _preempt_waiting(self, task: Task) -> None:
        """Free this lane from a collective still waiting for its members if `task` came
        first in program order: it runs first, and no two ranks wait on each other."""
        holder = self.waiting.get((task.rank, task.lane))
        if holder is not None and holder[0] > task.position and not holder[1].triggered:
            holder[1].succeed()

    def _withdraw(self, key: str, finished: simpy.Event) -> bool:
        """Take back an arrival at a collective that has not started; False if it has."""
        pending = self.arrivals.get(key, [])
        if finished not in pending:
            return False
        pending.remove(finished)
        return True

    def _record(self, task: Task, start_s: float) -> None:
        self.records.append(TaskRecord(task.id, task.name, task.rank, str(task.lane),
                                       task.category, self.issued_s[task.id], start_s,
                                       self.env.now, task.microbatch, task.chunk))

    def _arrive(self, collective: Collective) -> simpy.Event:
        finished = self.env.event()
        waiting = self.arrivals[collective.key]
        waiting.append(finished)
        if len(waiting) == len(collective.members):
            events = self.arrivals.pop(collective.key)
            self.env.process(self._collective(collective, events))
        return finished

    def _collective(self, collective: Collective,
                    events: list[simpy.Event]) -> Generator[simpy.Event, None, None]:
        for rank in collective.members:
            self.sm[rank].hold(collective.held_sms)
        for phase in self.planner.phases(collective, self.nvls):
            yield self.env.timeout(phase.latency_s)
            moved = self.env.event()
            self.network.start(list(phase.classes), on_done=moved.succeed)
            yield moved
        for rank in collective.members:
            self.sm[rank].hold(-collective.held_sms)
        for event in events:
            event.succeed()


def simulate(graph: TaskGraph, topology: Topology, params: CostParams, *,
             nvls: bool = False, compute_slowdown: Mapping[int, float] | None = None) -> Trace:
    """Replay `graph` on `topology`; `nvls` lets all-reduces inside a domain reduce in-switch;
    `compute_slowdown` maps simulated ranks to how many times as long their compute takes."""
    slowdown = dict(compute_slowdown or {})
    for rank, factor in slowdown.items():
        if rank not in graph.simulated_ranks or not 1 <= factor < float("inf"):
            raise ValueError(f"compute_slowdown: rank {rank} x{factor} needs a simulated rank "
                             f"(of {len(graph.simulated_ranks)}) and a finite factor >= 1")
    return _Replay(graph, topology, params, nvls, slowdown).run()
