"""Ranking the scored candidates, their Pareto front, and the winner as a scenario.

The ranking is by step time, fastest first; ties go to the candidate that holds less
memory, then to the one met first in the space, so the order never depends on which
worker finished first. The Pareto front is the set of candidates no other beats on both
step time and peak memory per device: the fastest configuration for each memory budget.
It is taken over every scored candidate, not only the ones the table shows.

``emit_mapping`` writes a candidate down as a complete scenario: the base scenario with the
candidate's keys set. ``pipesim run`` on it builds exactly the step the planner scored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pipesim.analysis.plan.row import PlanRow
from pipesim.analysis.plan.space import Candidate
from pipesim.scenario.vary import vary


def rank(rows: Sequence[tuple[int, PlanRow]]) -> list[PlanRow]:
    """``(space index, row)`` pairs -> rows, fastest first (ties: less memory, then the
    earlier index)."""
    ordered = sorted(
        rows, key=lambda item: (item[1].step_time_ms, item[1].peak_memory_bytes, item[0])
    )
    return [row for _, row in ordered]


def distinct(ranked: Sequence[PlanRow]) -> list[PlanRow]:
    """The ranked rows with equal outcomes folded into the first (fastest) of them, whose
    ``equivalent`` counts the others.

    Many candidates are one step under other names: on a pipeline of one stage every
    schedule and partition runs alike, and under a pipeline ZeRO-2 keeps whole gradients
    until the step's one reduce-scatter, so it is ZeRO-1 in time and memory. A table of ten
    copies of the winner would hide the runner-up. Outcomes
    are equal when step time and bubble agree to a nanosecond and peak memory to a MiB
    (float sums in another order differ in the last bits)."""
    first: dict[tuple, int] = {}  # outcome -> its place in folded
    folded: list[PlanRow] = []
    for row in ranked:
        key = _outcome(row)
        if key in first:
            kept = folded[first[key]]
            folded[first[key]] = replace(kept, equivalent=kept.equivalent + 1)
        else:
            first[key] = len(folded)
            folded.append(replace(row, equivalent=0))
    return folded


def _outcome(row: PlanRow) -> tuple[float, int, float]:
    return (
        round(row.step_time_ms, 6),
        round(row.peak_memory_bytes / 2**20),
        round(row.bubble_fraction, 9),
    )


def pareto(ranked: Sequence[PlanRow]) -> list[PlanRow]:
    """The non-dominated rows of a ranked list (fastest first): a row is on the front when
    every faster row holds more memory. The result is ranked too."""
    front, least = [], float("inf")
    for row in ranked:
        if row.peak_memory_bytes < least:
            front.append(row)
            least = row.peak_memory_bytes
    return front


# What a candidate's scenario leaves out: the pipeline section gives the microbatch size,
# and a planned schedule is a policy, never a file.
# What a candidate replaces: its microbatch size, schedule and the split of its layers
# (model.partition; a Megatron layout string fixes one stage count, which candidates vary).
DROPPED = ("model.microbatch_size", "pipeline.schedule_file", "model.pipeline_layout")


def emit_mapping(
    base: Mapping[str, Any], candidate: Candidate, note: str = "", source: str = "vary"
) -> dict[str, Any]:
    """The base scenario with a candidate's keys set: a ready-to-run scenario (``note``:
    its description)."""
    changes = candidate.keys() | ({"description": note} if note else {})
    # a schedule without a delayed weight gradient refuses pipeline.delay_wgrad: the base's
    # goes where the candidate sets none
    drop = DROPPED if candidate.delay_wgrad is not None else (*DROPPED, "pipeline.delay_wgrad")
    return vary(base, changes, drop=drop, source=source)


def describe(row: PlanRow) -> str:
    """A candidate in one short phrase:
    ``TP8 PP4 DP2 1f1b v1 b1 m16 no recompute zero1 balanced tp overlap`` (``EP8`` after
    the data parallelism where experts are spread)."""
    c = row.candidate
    parts = [
        f"TP{c.tensor} PP{c.devices} DP{c.data}"
        + (f" EP{c.expert}" if (c.expert or 1) > 1 else ""),
        c.schedule + (" delay-wgrad" if c.delay_wgrad else ""),
        f"v{c.virtual_stages} b{c.microbatch_size} m{c.microbatches}",
        "recompute" if c.recompute else "no recompute",
        f"zero{c.zero_stage}",
        c.partition,
        _overlap(c),
    ]
    if row.equivalent:
        parts.append(f"(+{row.equivalent} alike)")
    return " ".join(parts)


def _overlap(c: Candidate) -> str:
    overlapped = [name for name, on in (("dp", c.dp_overlap), ("tp", c.tp_overlap)) if on]
    return "+".join(overlapped) + " overlap" if overlapped else "no overlap"


__all__ = ["DROPPED", "describe", "distinct", "emit_mapping", "pareto", "rank"]
