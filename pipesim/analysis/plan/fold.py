"""Equivalent candidates once: the same step under another name is scored only once.

Many points of the space are one step written differently. On a pipeline of one stage,
1F1B and eager 1F1B are the same list of actions, and so are ZB-H1 and ZB-H2, GPipe and
looped BFS, ZB-V and interleaved zero bubble, V-Half and V-Min; one stage holds every
layer whether the partition is ``even`` or ``balanced``; under a pipeline ZeRO-2 keeps
whole gradients until the step's one reduce-scatter, so it is ZeRO-1 in time and memory.

``Scorer.assess`` gives each candidate a digest of every input of its step: the
schedule as data (its lists, placement and chains, not its policy's name), the stage
costs, the end-of-step work, the links, the microbatch size and the memory terms. Equal
digests mean equal inputs to the same deterministic functions, hence the very same
Report: the fold is exact, never an approximation. The first candidate of each digest in
space order is kept and scored; each other one is pruned before scoring, counted under a
reason that names the keys it differs in. The ranking breaks ties by memory, then by
space order, so the kept one is the one exhaustive scoring ranks first among its copies,
and every copy it drops would rank right behind it with the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipesim.analysis.plan.axes import ALL_AXES, Candidate
from pipesim.analysis.plan.score import Outcome

FOLDED = "(folded before scoring)"  # the end of every reason ``fold`` counts


def fold(
    assessed: Iterable[tuple[int, Candidate, Outcome]], pruned: dict[str, int]
) -> list[tuple[int, Candidate, Outcome]]:
    """The assessed candidates (``(space index, candidate, Outcome)``, in space order)
    with each one whose step an earlier one already is counted in ``pruned`` instead."""
    first: dict[str, Candidate] = {}
    kept = []
    for index, candidate, outcome in assessed:
        same = outcome.same
        if same and same in first:
            reason = folded_reason(first[same], candidate)
            pruned[reason] = pruned.get(reason, 0) + 1
            continue
        if same:
            first[same] = candidate
        kept.append((index, candidate, outcome))
    return kept


def folded_reason(kept: Candidate, other: Candidate) -> str:
    """Why ``other`` was folded into ``kept``, by the keys they differ in:
    "same step as an earlier candidate but for pipeline.schedule (folded before scoring)"."""
    keys = [key for key, attr in ALL_AXES.items() if getattr(kept, attr) != getattr(other, attr)]
    return f"same step as an earlier candidate but for {' and '.join(keys)} {FOLDED}"


__all__ = ["FOLDED", "fold", "folded_reason"]
