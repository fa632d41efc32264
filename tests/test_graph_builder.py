"""GraphBuilder: the ids it gives are the topological order that keeps insertion order."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from workloads.graph import GraphBuilder, KernelClass, Lane, Work


def _work() -> Work:
    return Work(flops=1.0, hbm_bytes=0.0, kernel_class=KernelClass.GEMM, precision="bf16",
                kernels=1, graphed=False)


def _add(builder: GraphBuilder, name: str, after: tuple[str, ...] = ()) -> None:
    builder.add(name, after=after, rank=0, lane=Lane.COMPUTE, category="compute",
                work=_work())


def test_ids_follow_the_earliest_added_ready_task_as_networkx_orders_them():
    rng = random.Random(7)
    names = [f"t{i}" for i in range(300)]
    rank = {name: rng.random() for name in names}
    reference = nx.DiGraph()
    builder = GraphBuilder()
    added = rng.sample(names, len(names))
    for name in added:
        earlier = [n for n in names if rank[n] < rank[name]]
        after = tuple(rng.sample(earlier, k=min(3, len(earlier))))
        _add(builder, name, after + after[:1])
        reference.add_node(name)
        reference.add_edges_from((dep, name) for dep in after)
    position = {name: i for i, name in enumerate(added)}
    expected = list(nx.lexicographical_topological_sort(reference, key=position.__getitem__))
    graph = builder.build((0,))
    assert [task.name for task in graph.tasks] == expected
    assert all(dep < task.id for task in graph.tasks for dep in task.deps)


def test_a_cycle_and_an_unknown_dependency_are_one_line_errors():
    cyclic = GraphBuilder()
    _add(cyclic, "a", ("b",))
    _add(cyclic, "b", ("a",))
    with pytest.raises(ValueError, match="form a cycle"):
        cyclic.build((0,))
    dangling = GraphBuilder()
    _add(dangling, "a", ("ghost",))
    with pytest.raises(ValueError, match="'a' depends on unknown task 'ghost'"):
        dangling.build((0,))
