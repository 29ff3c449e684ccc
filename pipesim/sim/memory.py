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
from pipesim.sim.trace import KIND_CODE, ComputeRows, Trace

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
    """Memory changes collected in blocks, as parallel arrays; ``key`` orders one device's
    compute rows as the Trace numbers them (``ComputeRows.order``)."""

    device: list[np.ndarray] = field(default_factory=list)
    time: list[np.ndarray] = field(default_factory=list)
    key: list[np.ndarray] = field(default_factory=list)
    order: list[np.ndarray] = field(default_factory=list)
    change_bytes: list[np.ndarray] = field(default_factory=list)
    change_count: list[np.ndarray] = field(default_factory=list)

    def add(self, device, time, key, order, change_bytes, change_count) -> None:
        self.device.append(device)
        self.time.append(np.asarray(time, dtype=np.float64))
        self.key.append(key)
        self.order.append(order)
        self.change_bytes.append(np.asarray(change_bytes, dtype=np.float64))
        self.change_count.append(np.asarray(change_count, dtype=np.int8))


def memory_timelines(trace: Trace, schedule: Schedule, costs: Costs) -> tuple[MemoryTimeline, ...]:
    """Activation bytes and microbatch-chunks in flight on each device over time.

    An activation is taken when its F starts; a full B gives it all back when it ends; a
    split backward gives back all but ``weight_grad_memory_bytes`` when I ends and the rest
    when W ends. Inference (no backward at all) keeps an activation only while its F runs.
    Read from the trace's compute rows alone (``Trace.compute_rows``).
    """
    events = _Events()
    rows = trace.compute_rows
    _simple_events(events, rows, schedule, costs)
    _overlapped_events(events, rows, schedule, costs)
    return _timelines(events, trace.devices)


_F, _B, _I, _W, _GROUP = (KIND_CODE[k] for k in (Kind.F, Kind.B, Kind.I, Kind.W, Kind.OVERLAP_F_B))


def _simple_events(events: _Events, rows: ComputeRows, schedule: Schedule, costs: Costs) -> None:
    """F, B, I and W, one event each in the rows' order (and an inference F's give-back
    after them): what each takes or gives back, by its layer group (model stage), looked
    up per kind and stage."""
    stages = schedule.stages
    layer_group_of = np.array([schedule.model_stage(s) for s in range(stages)] + [0])
    kept = np.asarray(costs.activation_memory_bytes, dtype=np.float64)[layer_group_of]
    weight_grad = np.asarray(costs.weight_grad_memory_bytes, dtype=np.float64)[layer_group_of]
    change = np.zeros((_GROUP, stages + 1))  # per kind code and stage: the bytes
    change[_F], change[_B], change[_I], change[_W] = (
        kept,
        -kept,
        -(kept - weight_grad),
        -weight_grad,
    )
    count = np.zeros(_GROUP, dtype=np.int8)  # per kind code: the in-flight change
    order = np.full(_GROUP, GIVE_BACK, dtype=np.int8)
    count[_F], count[_B], count[_I], order[_F] = 1, -1, -1, TAKE
    simple = rows.kind < _GROUP  # F, B, I, W; a group's events are its members'
    simple = slice(None) if simple.all() else np.flatnonzero(simple)  # all: no copies
    kind, stage = rows.kind[simple], rows.stage[simple]
    device, key, end = rows.device[simple], rows.order[simple], rows.end[simple]
    forward = kind == _F
    events.add(
        device,
        np.where(forward, rows.start[simple], end),
        key,
        order[kind],
        change[kind, stage],
        count[kind],
    )
    if not schedule.is_training:
        taken = np.flatnonzero(forward)
        gives, ends = np.full(len(taken), GIVE_BACK), np.full(len(taken), -1)
        events.add(device[taken], end[taken], key[taken], gives, -kept[stage[taken]], ends)


# A group member's change: (coefficient of its activation, of its weight-gradient part,
# in-flight count, at the group's end); an F takes at the start.
_MEMBER_CHANGE = {
    Kind.F: (1.0, 0.0, 1, False),
    Kind.B: (-1.0, 0.0, -1, True),
    Kind.I: (-1.0, 1.0, -1, True),
    Kind.W: (0.0, -1.0, 0, True),
}
_FORWARD_ENDS = (-1.0, 0.0, -1, True)  # inference: an F gives its activation back at its end


def _overlapped_events(events: _Events, rows: ComputeRows, schedule: Schedule, costs: Costs):
    """A group (an overlapped F&B pair, or any group torch's CSV holds) takes its forwards'
    activations at its start and gives back what its backwards free at its end; every
    member of every group is collected first and added as one batch of events."""
    groups = np.flatnonzero(rows.kind == _GROUP)
    if not len(groups):
        return
    changes, entries, layer_groups = [], [], []
    training = schedule.is_training  # read once: a schedule of Actions scans for it
    for entry in groups.tolist():  # each group's members in their own order
        for member in rows.action(entry).sub_actions:
            member_changes = [_MEMBER_CHANGE[member.kind]]
            if member.kind == Kind.F and not training:
                member_changes.append(_FORWARD_ENDS)
            for change in member_changes:
                changes.append(change)
                entries.append(entry)
                layer_groups.append(schedule.model_stage(member.stage))
    kept_coef, grad_coef, count, at_end = (np.asarray(c) for c in zip(*changes, strict=True))
    group = np.asarray(layer_groups, dtype=np.int64)
    kept = np.asarray(costs.activation_memory_bytes, dtype=np.float64)[group]
    weight_grad = np.asarray(costs.weight_grad_memory_bytes, dtype=np.float64)[group]
    picked = np.asarray(entries, dtype=np.int64)
    events.add(
        rows.device[picked],
        np.where(at_end, rows.end[picked], rows.start[picked]),
        rows.order[picked],
        np.where(at_end, GIVE_BACK, TAKE),
        kept_coef * kept + grad_coef * weight_grad,
        count,
    )


def _timelines(events: _Events, devices: int) -> tuple[MemoryTimeline, ...]:
    """Each device's events sorted by time (at one instant, in row order, and a row's
    give-back after its take), summed up. Events already in that order (a fast Trace's,
    device by device in program order) are taken as they are: the stable sort would not
    move them."""
    device, time, key, order, change, count = (
        parts[0] if len(parts) == 1 else np.concatenate(parts)
        for parts in (
            events.device,
            events.time,
            events.key,
            events.order,
            events.change_bytes,
            events.change_count,
        )
    )
    if not _sorted(device, time, key, order):
        sort = np.lexsort((order, key, time, device))
        device, time, change, count = device[sort], time[sort], change[sort], count[sort]
    bounds = np.searchsorted(device, np.arange(devices + 1))
    timelines = []
    for d in range(devices):
        part = slice(bounds[d], bounds[d + 1])
        held = np.cumsum(change[part], out=change[part])  # in place: the events are ours
        timelines.append(MemoryTimeline(time[part], held, np.cumsum(count[part], dtype=np.int64)))
    return tuple(timelines)


def _sorted(*keys: np.ndarray) -> bool:
    """Whether the rows of ``keys`` (most significant first) are in lexicographic order."""
    if len(keys[0]) < 2:
        return True
    if not (keys[0][:-1] <= keys[0][1:]).all():  # a Trace's rows in time order: sort
        return False
    ahead = keys[-1][:-1] <= keys[-1][1:]
    for column in reversed(keys[:-1]):
        before, after = column[:-1], column[1:]
        ahead = (before < after) | ((before == after) & ahead)
    return bool(ahead.all())
