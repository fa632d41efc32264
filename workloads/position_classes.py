"""Classes of alike ranks: which positions of a pipeline stage (rank % ranks_per_stage) behave
identically, so that one rank per class and stage can stand for all of them.

Folded, every position is one class; unfolded, each position is its own; an asymmetric what-if
(a straggler, a degraded link, failed trays) marks some ranks, and the classes are then the
coarsest equitable partition that separates them: every member of a class finds the same
classes, as often, in its group of every coupling kind (COUPLING_KINDS), so the members of a
class meet the same collectives at the same times.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence

from workloads.parallelism import ParallelPlan, all_groups

# Groups that couple the ranks of one pipeline stage (the pipeline couples stages position-wise).
COUPLING_KINDS = ("tp", "cp", "ep", "etp", "dp", "edp")


def position_classes(plan: ParallelPlan, asymmetric: Sequence[Collection[int]] = (), *,
                     folded: bool = True) -> tuple[int, ...]:
    """The class of every position of a pipeline stage (rank % ranks_per_stage), numbered in
    order of first appearance. Unfolded: a class per position. Folded: one class, less the
    positions of each set of `asymmetric` ranks (ranks that behave unlike the rest), split until
    every member of a class finds the same classes, as often, in its group of every coupling
    kind (the coarsest equitable partition): the members of a class then meet the same
    collectives at the same times, and one of them stands for all."""
    size = plan.ranks_per_stage
    if not folded:
        return tuple(range(size))
    marked = [frozenset(rank % size for rank in ranks) for ranks in asymmetric]
    classes = _labels([tuple(p in m for m in marked) for p in range(size)])
    if not any(marked):
        return classes
    kinds = [_group_index(plan, kind) for kind in COUPLING_KINDS]
    while True:
        counts = [[tuple(sorted(Counter(classes[p] for p in group).items())) for group in groups]
                  for groups, _ in kinds]
        refined = _labels([(classes[p],) + tuple(counts[k][index[p]]
                                                 for k, (_, index) in enumerate(kinds))
                           for p in range(size)])
        if max(refined) == max(classes):
            return classes
        classes = refined


def _labels(signatures: Sequence[object]) -> tuple[int, ...]:
    numbers: dict[object, int] = {}
    return tuple(numbers.setdefault(s, len(numbers)) for s in signatures)


def _group_index(plan: ParallelPlan,
                 kind: str) -> tuple[tuple[tuple[int, ...], ...], dict[int, int]]:
    """The `kind` groups of the first stage (whose ranks are the positions) and, for every
    position, the index of its group."""
    groups = all_groups(plan, kind, 0)
    return groups, {p: i for i, group in enumerate(groups) for p in group}
