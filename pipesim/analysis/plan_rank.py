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

import json
from collections.abc import Sequence
from typing import Any

from pipesim.analysis.plan_space import AXIS_ATTRIBUTES


def rank(rows: Sequence[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """``(space index, row)`` pairs -> rows, fastest first (ties: less memory, then the
    earlier index)."""
    ordered = sorted(
        rows, key=lambda item: (item[1]["step_time_ms"], item[1]["peak_memory_bytes"], item[0])
    )
    return [row for _, row in ordered]


def distinct(ranked: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ranked rows with equal outcomes folded into the first (fastest) of them, whose
    ``equivalent`` counts the others.

    Many candidates are one step under other names: on a pipeline of one stage every
    schedule and partition runs alike, and under a pipeline ZeRO-2 keeps whole gradients
    until the step's one reduce-scatter, so it is ZeRO-1 in time and memory. A table of ten
    copies of the winner would hide the runner-up. Outcomes
    are equal when step time and bubble agree to a nanosecond and peak memory to a MiB
    (float sums in another order differ in the last bits)."""
    first: dict[tuple, dict[str, Any]] = {}
    folded: list[dict[str, Any]] = []
    for row in ranked:
        key = _outcome(row)
        if key in first:
            first[key]["equivalent"] += 1
        else:
            first[key] = {**row, "equivalent": 0}
            folded.append(first[key])
    return folded


def _outcome(row: dict[str, Any]) -> tuple[float, int, float]:
    return (
        round(row["step_time_ms"], 6),
        round(row["peak_memory_bytes"] / 2**20),
        round(row["bubble_fraction"], 9),
    )


def pareto(ranked: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The non-dominated rows of a ranked list (fastest first): a row is on the front when
    every faster row holds more memory. The result is ranked too."""
    front, least = [], float("inf")
    for row in ranked:
        if row["peak_memory_bytes"] < least:
            front.append(row)
            least = row["peak_memory_bytes"]
    return front


def emit_mapping(base: dict[str, Any], row: dict[str, Any], note: str = "") -> dict[str, Any]:
    """The base scenario with a result's keys set: a ready-to-run scenario."""
    data = json.loads(json.dumps(base))
    for key in AXIS_ATTRIBUTES:
        section, name = key.split(".")
        data.setdefault(section, {})[name] = row[key]
    data["model"].pop("microbatch_size", None)  # the pipeline section gives it
    data["pipeline"].pop("schedule_file", None)  # a policy, never a file
    if note:
        data["description"] = note
    return data


def describe(row: dict[str, Any]) -> str:
    """A candidate in one short phrase:
    ``TP8 PP4 DP2 1f1b v1 b1 m16 no recompute zero1 balanced tp overlap``."""
    parts = [
        f"TP{row['parallel.tensor']} PP{row['pipeline.devices']} DP{row['parallel.data']}",
        row["pipeline.schedule"],
        f"v{row['pipeline.virtual_stages']} b{row['pipeline.microbatch_size']} "
        f"m{row['pipeline.microbatches']}",
        "recompute" if row["model.recompute"] else "no recompute",
        f"zero{row['parallel.zero_stage']}",
        row["model.partition"],
        _overlap(row),
    ]
    if row.get("equivalent"):
        parts.append(f"(+{row['equivalent']} alike)")
    return " ".join(parts)


def _overlap(row: dict[str, Any]) -> str:
    overlapped = [name for name in ("dp", "tp") if row.get(f"parallel.{name}_overlap")]
    return "+".join(overlapped) + " overlap" if overlapped else "no overlap"
