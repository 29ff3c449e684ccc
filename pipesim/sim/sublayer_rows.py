"""A MoE step's actions at sub-layer grain: each compute row's parts, placed in time.

The Trace keeps one row per action, which every metric reads. A MoE stage's action is made
of parts on two streams (``pipesim.sim.sublayers``): attention and experts on the
device's compute stream, dispatch and combine on its communication stream. Here each
action's parts are laid inside its row, from the same timeline its duration came from
(``Costs.group_timeline`` for an overlapped group, the parts in turn for a lone pass):

* ``sublayer_rows``: every part of every MoE action as a row of its own (device, stream,
  start, end, name such as ``3F7 dispatch``), for the Chrome trace, where compute parts
  nest under their action and the all-to-alls get a thread of their own;
* ``exposed_all_to_all``: per trace row, the time its compute stream waits on
  all-to-alls (a lone pass: all of its all-to-alls; an overlapped pair: its length less
  its compute), what the critical path and the report add up.

Both are None for costs without sub-layer parts: a dense model's trace is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from pipesim.schedules.ir import Kind, Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.sublayers import (
    PartTime,
    Role,
    exposed_comm_ms,
    makespan_ms,
    pass_timeline,
)
from pipesim.sim.trace import Lane, Trace


@dataclass(frozen=True, slots=True)
class SublayerRows:
    """Every part of every MoE action: the trace row it belongs to, its device and stream
    (``Stream``), its start and end (ms from the step's start) and its name."""

    row: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    start: np.ndarray
    end: np.ndarray
    names: list[str]

    def __len__(self) -> int:
        return len(self.row)


def action_parts(
    costs: Costs, members: Sequence[tuple[Kind, int]]
) -> list[tuple[int, str, PartTime]]:
    """Each part of an action whose members are ``(kind, model stage)``: which member it
    belongs to, what it is (``dispatch``), and its time from the action's start; one part
    per member for a stage without sub-layer parts."""
    timeline = costs.group_timeline(members) if len(members) > 1 else None
    if timeline is not None:
        passes = [costs.pass_parts(kind, stage) for kind, stage in members]
        found = []
        for part in timeline:
            source = passes[Role.BACKWARD if part.role == Role.WEIGHT else part.role]
            found.append((int(part.role), source.name(part.stream, part.index), part))
        return found
    found, offset = [], 0.0
    for member, (kind, stage) in enumerate(members):
        parts = costs.pass_parts(kind, stage)
        for part in pass_timeline(parts):
            moved = replace(part, start_ms=part.start_ms + offset, end_ms=part.end_ms + offset)
            found.append((member, parts.name(part.stream, part.index), moved))
        offset += parts.total_ms
    return found


def sublayer_rows(trace: Trace, schedule: Schedule, costs: Costs) -> SublayerRows | None:
    """The parts of every compute row whose stages have sub-layer parts, placed inside the
    row (stretched to it where a random step scaled its duration; the per-action overhead
    after them); parts of no length are
    left out. None without sub-layer parts."""
    if costs.moe_parts is None:
        return None
    model_stage = [schedule.model_stage(s) for s in range(schedule.stages)]
    kept: dict[tuple, list[tuple[int, str, PartTime]] | None] = {}
    row, device, stream, start, end, names = [], [], [], [], [], []
    for r in _compute_rows(trace):
        action = trace.actions[r]
        key = tuple((a.kind, model_stage[a.stage]) for a in action.atoms)
        if key not in kept:
            moe = any(costs.moe_parts[stage] for _, stage in key)
            kept[key] = action_parts(costs, key) if moe else None
        parts = kept[key]
        if parts is None:
            continue
        first = float(trace.start[r])
        length = float(trace.end[r]) - first - costs.overhead_ms
        span = makespan_ms(tuple(p for _, _, p in parts))
        stretch = length / span if span > 0 and abs(length - span) > 1e-9 * span else 1.0
        for member, name, part in parts:
            if part.end_ms <= part.start_ms:
                continue
            row.append(r)
            device.append(int(trace.device[r]))
            stream.append(int(part.stream))
            start.append(first + part.start_ms * stretch)
            end.append(first + part.end_ms * stretch)
            names.append(f"{action.atoms[member]} {name}")
    return SublayerRows(
        np.asarray(row, dtype=np.int64),
        np.asarray(device, dtype=np.int64),
        np.asarray(stream, dtype=np.int64),
        np.asarray(start, dtype=np.float64),
        np.asarray(end, dtype=np.float64),
        names,
    )


def exposed_all_to_all(trace: Trace, schedule: Schedule, costs: Costs) -> np.ndarray | None:
    """Per trace row, the ms its compute stream waits on all-to-alls (0 for rows that are
    not MoE actions); None without sub-layer parts."""
    if costs.moe_parts is None:
        return None
    model_stage = [schedule.model_stage(s) for s in range(schedule.stages)]
    exposed = np.zeros(len(trace.start))
    kept: dict[tuple, float] = {}
    for r in _compute_rows(trace):
        action = trace.actions[r]
        key = tuple((a.kind, model_stage[a.stage]) for a in action.atoms)
        if key not in kept:
            timeline = costs.group_timeline(key) if len(key) > 1 else None
            if timeline is not None:
                kept[key] = exposed_comm_ms(timeline)
            else:
                kept[key] = sum(costs.pass_parts(kind, stage).comm_total_ms for kind, stage in key)
        exposed[r] = kept[key]
    return exposed


def _compute_rows(trace: Trace) -> list[int]:
    """The rows of the schedule's compute actions (not transfers, not end-of-step work)."""
    compute = (trace.lane == Lane.COMPUTE).tolist()
    return [r for r, action in enumerate(trace.actions) if action is not None and compute[r]]


__all__ = ["SublayerRows", "action_parts", "exposed_all_to_all", "sublayer_rows"]
