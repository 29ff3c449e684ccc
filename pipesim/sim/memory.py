"""Memory over time: the activation bytes each device holds, derived from a Trace.

The engine records when actions start and end; what they take and give back is a
question of accounting, answered here, after the run, in bulk (NumPy). Every change is an
event ``(device, time, bytes, count)``: an F takes its layer group's activation when it
starts, a backward gives it back when it ends. Sorting the events and summing them up
gives each device's timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipesim.schedules.ir import Kind, Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.trace import KIND_CODE, Lane, Trace

# At one instant a device first gives back (an action that ends), then takes (the next
# action that starts), as it runs them in that order.
TAKE, GIVE_BACK = 0, 1


@dataclass(frozen=True, slots=True)
class MemoryTimeline:
    """Activation bytes and in-flight count on one device after each change, in time order."""

    time: np.ndarray
    activation_bytes: np.ndarray
    inflight: np.ndarray


@dataclass(slots=True)
class _Events:
    """Memory changes collected kind by kind, as parallel arrays."""

    device: list[np.ndarray] = field(default_factory=list)
    time: list[np.ndarray] = field(default_factory=list)
    row: list[np.ndarray] = field(default_factory=list)
    order: list[np.ndarray] = field(default_factory=list)
    change_bytes: list[np.ndarray] = field(default_factory=list)
    change_count: list[np.ndarray] = field(default_factory=list)

    def add(self, trace: Trace, rows, time, change_bytes, change_count: int, order: int) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        self.device.append(trace.device[rows])
        self.time.append(np.asarray(time, dtype=np.float64))
        self.row.append(rows)
        self.order.append(np.full(len(rows), order))
        self.change_bytes.append(np.asarray(change_bytes, dtype=np.float64))
        self.change_count.append(np.full(len(rows), change_count, dtype=np.float64))


def memory_timelines(trace: Trace, schedule: Schedule, costs: Costs) -> tuple[MemoryTimeline, ...]:
    """Activation bytes and microbatch-chunks in flight on each device over time.

    An activation is taken when its F starts; a full B gives it all back when it ends; a
    split backward gives back all but ``weight_grad_memory_bytes`` when I ends and the rest
    when W ends. Inference (no backward at all) keeps an activation only while its F runs.
    """
    events = _Events()
    _simple_events(events, trace, schedule, costs)
    _overlapped_events(events, trace, schedule, costs)
    return _timelines(events, trace.devices)


def _simple_events(events: _Events, trace: Trace, schedule: Schedule, costs: Costs) -> None:
    """F, B, I and W: what each takes or gives back, by its layer group (model stage)."""
    layer_group_of = np.array([schedule.model_stage(s) for s in range(schedule.stages)] + [0])
    kept = np.asarray(costs.activation_memory_bytes, dtype=np.float64)
    weight_grad = np.asarray(costs.weight_grad_memory_bytes, dtype=np.float64)
    compute = np.flatnonzero(trace.lane == Lane.COMPUTE)
    kinds = trace.kind[compute]

    def rows_of(kind: Kind) -> tuple[np.ndarray, np.ndarray]:
        rows = compute[kinds == KIND_CODE[kind]]
        return rows, layer_group_of[trace.stage[rows]]

    rows, group = rows_of(Kind.F)
    events.add(trace, rows, trace.start[rows], kept[group], 1, TAKE)
    if not schedule.is_training:
        events.add(trace, rows, trace.end[rows], -kept[group], -1, GIVE_BACK)
    rows, group = rows_of(Kind.B)
    events.add(trace, rows, trace.end[rows], -kept[group], -1, GIVE_BACK)
    rows, group = rows_of(Kind.I)
    events.add(trace, rows, trace.end[rows], -(kept[group] - weight_grad[group]), -1, GIVE_BACK)
    rows, group = rows_of(Kind.W)
    events.add(trace, rows, trace.end[rows], -weight_grad[group], 0, GIVE_BACK)


# A group member's change: (coefficient of its activation, of its weight-gradient part,
# in-flight count, at the group's end); an F takes at the start.
_MEMBER_CHANGE = {
    Kind.F: (1.0, 0.0, 1, False),
    Kind.B: (-1.0, 0.0, -1, True),
    Kind.I: (-1.0, 1.0, -1, True),
    Kind.W: (0.0, -1.0, 0, True),
}
_FORWARD_ENDS = (-1.0, 0.0, -1, True)  # inference: an F gives its activation back at its end


def _overlapped_events(events: _Events, trace: Trace, schedule: Schedule, costs: Costs) -> None:
    """A group (an overlapped F&B pair, or any group torch's CSV holds) takes its forwards'
    activations at its start and gives back what its backwards free at its end; every
    member of every group is collected first and added as one batch of events."""
    groups = np.flatnonzero(
        (trace.lane == Lane.COMPUTE) & (trace.kind == KIND_CODE[Kind.OVERLAP_F_B])
    )
    if not len(groups):
        return
    changes, rows, layer_groups = [], [], []
    training = schedule.is_training  # read once: a schedule of Actions scans for it
    for row in groups.tolist():  # each group's members in their own order
        for member in trace.actions[row].sub_actions:
            member_changes = [_MEMBER_CHANGE[member.kind]]
            if member.kind == Kind.F and not training:
                member_changes.append(_FORWARD_ENDS)
            for change in member_changes:
                changes.append(change)
                rows.append(row)
                layer_groups.append(schedule.model_stage(member.stage))
    kept_coef, grad_coef, count, at_end = (np.asarray(c) for c in zip(*changes, strict=True))
    group = np.asarray(layer_groups, dtype=np.int64)
    kept = np.asarray(costs.activation_memory_bytes, dtype=np.float64)[group]
    weight_grad = np.asarray(costs.weight_grad_memory_bytes, dtype=np.float64)[group]
    rows_array = np.asarray(rows, dtype=np.int64)
    events.device.append(trace.device[rows_array])
    events.time.append(np.where(at_end, trace.end[rows_array], trace.start[rows_array]))
    events.row.append(rows_array)
    events.order.append(np.where(at_end, GIVE_BACK, TAKE))
    events.change_bytes.append(kept_coef * kept + grad_coef * weight_grad)
    events.change_count.append(count.astype(np.float64))


def _timelines(events: _Events, devices: int) -> tuple[MemoryTimeline, ...]:
    device, time, row, order, change, count = (
        np.concatenate(parts)
        for parts in (
            events.device,
            events.time,
            events.row,
            events.order,
            events.change_bytes,
            events.change_count,
        )
    )
    sort = np.lexsort((order, row, time, device))
    device, time, change, count = device[sort], time[sort], change[sort], count[sort]
    bounds = np.searchsorted(device, np.arange(devices + 1))
    timelines = []
    for d in range(devices):
        part = slice(bounds[d], bounds[d + 1])
        timelines.append(
            MemoryTimeline(
                time[part], np.cumsum(change[part]), np.cumsum(count[part]).astype(np.int64)
            )
        )
    return tuple(timelines)
