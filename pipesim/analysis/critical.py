"""The critical path, and why every device sat idle when it did.

A step is a relay race. The makespan is set by one chain of hand-offs: the action that
ends last started when something let it start (its device finished the action before, or
its input arrived), that something started when *its* predecessor let it, and so on back
to time 0. Make any element of that chain shorter and the step gets shorter; make
anything off the chain shorter and nothing changes until another chain takes over.

``critical_path`` walks that chain back from the last row of a Trace. The predecessor of
a compute action is the previous action on its device if that ended exactly when this
one started (or, with ``comm_overlap`` off, the transfer the device was busy sending),
otherwise the input that arrived last: the transfer that carried it, or its producer
directly when no link time was involved. The predecessor of a transfer is its producer,
or the transfer ahead of it on the same channel when the link was still busy.

``idle_gaps`` gives every idle stretch on every device one cause:

* ``upstream activation``: the next action is a forward waiting for the previous stage;
* ``downstream gradient``: a backward waiting for the next stage's gradient;
* ``busy link``: the input was produced but queued behind another transfer on the link;
* ``in-order blocking``: a later action on the device was ready, but runs in order
  behind one that is still waiting (head-of-line blocking);
* ``sending``: with ``comm_overlap`` off, the device is held by its own transfer;
* ``end-of-step work`` (a collective after the pipeline) and ``done`` (nothing left).

Everything here reads a Trace and returns data; no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, replace

import numpy as np

from pipesim.schedules.ir import Kind, Schedule, parse_action
from pipesim.sim.links import Topology
from pipesim.sim.metrics import Report
from pipesim.sim.trace import COMM, COMPUTE, Trace

UPSTREAM = "upstream activation"
DOWNSTREAM = "downstream gradient"
BUSY_LINK = "busy link"
IN_ORDER = "in-order blocking"
SENDING = "sending"
COLLECTIVE = "end-of-step work"
DONE = "done"
CAUSES = (UPSTREAM, DOWNSTREAM, BUSY_LINK, IN_ORDER, SENDING, COLLECTIVE, DONE)


@dataclass(frozen=True, slots=True)
class IdleGap:
    """One idle stretch ``[start_ms, end_ms)`` on ``device`` and what caused it.

    ``before`` is the action that ends the gap (None after the device's last action);
    ``waiting_for`` the action whose output it waited for, on ``source_device``; ``via``
    the transfer that carried it (or that the device was sending); ``other`` the action
    that was ready (in-order blocking), the transfer ahead on the link (busy link) or the
    device's last action (done), with ``other_ms`` its ready time where one applies.
    """

    device: int
    start_ms: float
    end_ms: float
    cause: str
    before: str | None = None
    waiting_for: str | None = None
    source_device: int | None = None
    via: str | None = None
    other: str | None = None
    other_ms: float | None = None

    @property
    def duration_ms(self) -> float:
        return self.end_ms - self.start_ms


@dataclass(frozen=True, slots=True)
class _Input:
    arrival: float
    row: int  # the row that delivered it: a transfer, or the producer itself
    producer: int  # the producer's compute row
    direction: str  # "activation" or "gradient"


class _Index:
    """Lookups over a trace: which row ran which action, what each action waited for."""

    def __init__(self, trace: Trace, schedule: Schedule, topology: Topology | None) -> None:
        self.trace, self.schedule = trace, schedule
        self.start, self.end = trace.start.tolist(), trace.end.tolist()
        self.device = trace.device.tolist()
        self.lane = trace.lane.tolist()
        self.peer = trace.peer.tolist()
        self.makespan = trace.makespan_ms
        self.tol = 1e-9 * max(1.0, self.makespan)
        self.blocking = topology is not None and not topology.comm_overlap
        self.atom_row: dict[tuple[int, Kind, int], int] = {}
        self.send_row: dict[tuple[int, Kind, int], int] = {}
        self.sends_of: dict[int, list[int]] = defaultdict(list)  # producer row -> transfers
        self.device_rows: list[list[int]] = [[] for _ in range(trace.devices)]
        self.extra_rows: list[list[int]] = [[] for _ in range(trace.devices)]
        channels: dict[object, list[int]] = defaultdict(list)
        for row, action in enumerate(trace.actions):
            if action is None:  # end-of-step work (a collective), not an action of the IR
                self.extra_rows[self.device[row]].append(row)
            elif self.lane[row] == COMPUTE:
                self.device_rows[self.device[row]].append(row)
                for atom in action.atoms:
                    self.atom_row[(atom.stage, atom.kind, atom.microbatch)] = row
            else:
                self.send_row[(action.stage, action.kind, action.microbatch)] = row
                src, dst = self.device[row], self.peer[row]
                key = topology.channel(src, dst) if topology is not None else (src, dst)
                channels[key].append(row)
        for row, action in self.send_items():
            self.sends_of[self.atom_row[(action.stage, action.kind, action.microbatch)]].append(row)
        self.channel_prev: dict[int, int] = {}
        for rows in channels.values():
            rows.sort(key=lambda r: (self.start[r], self.end[r]))
            self.channel_prev.update(zip(rows[1:], rows[:-1], strict=True))
        self.position = {r: k for rows in self.device_rows for k, r in enumerate(rows)}
        order = np.argsort(trace.end, kind="stable")
        self.by_end, self.sorted_end = order.tolist(), trace.end[order]

    def send_items(self):
        return ((row, self.trace.actions[row]) for row in self.send_row.values())

    def name(self, row: int) -> str:
        return self.trace.name(row)

    def close(self, a: float, b: float) -> bool:
        return abs(a - b) <= self.tol

    # -- what an action waited for ---------------------------------------------------

    def inputs(self, row: int) -> list[_Input]:
        """The cross-stage inputs of a compute row, with the time each was on its device."""
        found = []
        for atom in self.trace.actions[row].atoms:
            stage, microbatch = atom.stage, atom.microbatch
            if atom.kind == Kind.F:
                source, kinds, direction = self.schedule.prev_stage(stage), (Kind.F,), "activation"
            elif atom.kind in (Kind.B, Kind.I):
                source, kinds, direction = (
                    self.schedule.next_stage(stage),
                    (Kind.B, Kind.I),
                    "gradient",
                )
            else:
                continue
            if source is None:
                continue
            for kind in kinds:
                producer = self.atom_row.get((source, kind, microbatch))
                if producer is None:
                    continue
                carrier = self.send_row.get((source, kind, microbatch), producer)
                found.append(_Input(self.end[carrier], carrier, producer, direction))
                break
        return found

    def device_free(self, row: int) -> tuple[float, int | None]:
        """When the device was free to start ``row``, and the row that held it until then."""
        k = self.position[row]
        if k == 0:
            return 0.0, None
        prev = self.device_rows[self.device[row]][k - 1]
        free, holder = self.end[prev], prev
        if self.blocking:
            for send in self.sends_of.get(prev, ()):
                if self.end[send] > free + self.tol:
                    free, holder = self.end[send], send
        return free, holder

    def any_ending_at(self, time: float, device: int, exclude: int) -> int | None:
        """A row ending at ``time`` (same device first): the fallback predecessor."""
        lo = int(np.searchsorted(self.sorted_end, time - self.tol, side="left"))
        hi = int(np.searchsorted(self.sorted_end, time + self.tol, side="right"))
        rows = [r for r in self.by_end[lo:hi] if r != exclude and self.start[r] <= time]
        rows = [r for r in rows if not (self.start[r] == self.end[r] == self.start[exclude])]
        own = [r for r in rows if self.device[r] == device]
        return (own or rows or [None])[0]


# ---------------------------------------------------------------------------
# The critical path


def critical_path(
    trace: Trace, schedule: Schedule, topology: Topology | None = None
) -> list[dict[str, object]]:
    """The chain of rows that sets the makespan, in time order.

    Each element is ``{"name", "device", "start_ms", "end_ms"}`` (a transfer's device is
    its sender, its name ``2F0->3``); each starts when the one before it ends, the first
    at 0 and the last at the makespan.
    """
    if not len(trace.start):
        return []
    index = _Index(trace, schedule, topology)
    ends = trace.end
    last = int(np.flatnonzero(ends == ends.max())[-1])
    chain, row, seen = [last], last, {last}
    while index.start[row] > index.tol:
        row = _predecessor(index, row)
        if row is None or row in seen:
            break
        chain.append(row)
        seen.add(row)
    return [
        {
            "name": index.name(r),
            "device": index.device[r],
            "start_ms": index.start[r],
            "end_ms": index.end[r],
        }
        for r in reversed(chain)
    ]


def _predecessor(index: _Index, row: int) -> int | None:
    start = index.start[row]
    action = index.trace.actions[row]
    if action is not None and index.lane[row] == COMPUTE:
        free, holder = index.device_free(row)
        if holder is not None and index.close(free, start):
            return holder
        for item in index.inputs(row):
            if index.close(item.arrival, start):
                return item.row
    elif action is not None and index.lane[row] == COMM:
        producer = index.atom_row[(action.stage, action.kind, action.microbatch)]
        if index.close(index.end[producer], start):
            return producer
        ahead = index.channel_prev.get(row)
        if ahead is not None and index.close(index.end[ahead], start):
            return ahead
    return index.any_ending_at(start, index.device[row], row)


# ---------------------------------------------------------------------------
# Idle gaps and their causes


def idle_gaps(trace: Trace, schedule: Schedule, topology: Topology | None = None) -> list[IdleGap]:
    """Every idle stretch on every device, in device then time order, with its cause.

    The gaps of a device cover exactly the time it does not compute: their durations sum
    to its ``idle_ms``.
    """
    index = _Index(trace, schedule, topology)
    gaps: list[IdleGap] = []
    for device, rows in enumerate(index.device_rows):
        for row in rows:
            gaps += _gaps_before(index, row)
        gaps += _tail_gaps(index, device)
    return gaps


def _gaps_before(index: _Index, row: int) -> list[IdleGap]:
    device, start = index.device[row], index.start[row]
    k = index.position[row]
    prev_end = index.end[index.device_rows[device][k - 1]] if k else 0.0
    free, holder = index.device_free(row)
    name = index.name(row)
    gaps = []
    if holder is not None and index.lane[holder] == COMM and free - prev_end > index.tol:
        gaps.append(IdleGap(device, prev_end, free, SENDING, name, via=index.name(holder)))
    if start - free <= index.tol:
        return gaps
    waits = index.inputs(row)
    if not waits:  # nothing to wait for: only an unmodelled delay could cause this
        return [*gaps, IdleGap(device, free, start, UPSTREAM, name)]
    wait = max(waits, key=lambda item: item.arrival)
    common = {
        "before": name,
        "waiting_for": index.name(wait.producer),
        "source_device": index.device[wait.producer],
    }
    ready = _ready_later(index, row, start)
    if ready is not None:
        gaps.append(
            IdleGap(device, free, start, IN_ORDER, **common, other=index.name(ready[0]),
                    other_ms=ready[1])
        )  # fmt: skip
        return gaps
    if wait.row != wait.producer and index.start[wait.row] > index.end[wait.producer] + index.tol:
        ahead = index.channel_prev.get(wait.row)
        gaps.append(
            IdleGap(device, free, start, BUSY_LINK, **common, via=index.name(wait.row),
                    other=None if ahead is None else index.name(ahead))
        )  # fmt: skip
        return gaps
    cause = UPSTREAM if wait.direction == "activation" else DOWNSTREAM
    via = index.name(wait.row) if wait.row != wait.producer else None
    gaps.append(IdleGap(device, free, start, cause, **common, via=via))
    return gaps


def _ready_later(index: _Index, row: int, start: float) -> tuple[int, float] | None:
    """The first later action on the device whose inputs were all there before ``start``."""
    device, k = index.device[row], index.position[row]
    rows = index.device_rows[device]
    for later in rows[k + 1 :]:
        ready = _ready_time(index, later, k)
        if ready is not None and ready < start - index.tol:
            return later, ready
    return None


def _ready_time(index: _Index, row: int, blocked_at: int) -> float | None:
    """When ``row`` could have run, were it not for its place in the order; None if it
    needs something its own device only runs at ``blocked_at`` or later."""
    device = index.device[row]
    times = []
    for atom in index.trace.actions[row].atoms:
        own = []
        if atom.kind in (Kind.B, Kind.I):
            own.append((atom.stage, Kind.F, atom.microbatch))
        elif atom.kind == Kind.W:
            own.append((atom.stage, Kind.I, atom.microbatch))
        for key in own:
            producer = index.atom_row.get(key)
            if producer is None:
                continue
            if index.device[producer] == device and index.position[producer] >= blocked_at:
                return None
            times.append(index.end[producer])
    for item in index.inputs(row):
        if index.device[item.producer] == device and index.position[item.producer] >= blocked_at:
            return None
        times.append(item.arrival)
    return max(times, default=0.0)


def _tail_gaps(index: _Index, device: int) -> list[IdleGap]:
    rows = index.device_rows[device]
    last = rows[-1] if rows else None
    time = index.end[last] if last is not None else 0.0
    after = index.name(last) if last is not None else None
    gaps = []
    if index.blocking and last is not None:
        for send in index.sends_of.get(last, ()):
            if index.end[send] - time > index.tol:
                gaps.append(IdleGap(device, time, index.end[send], SENDING, via=index.name(send)))
                time = index.end[send]
    for extra in sorted(index.extra_rows[device], key=lambda r: index.start[r]):
        if index.start[extra] - time > index.tol:
            gaps.append(IdleGap(device, time, index.start[extra], DONE, other=after))
        gaps.append(IdleGap(device, index.start[extra], index.end[extra], COLLECTIVE,
                            via=index.name(extra)))  # fmt: skip
        time = index.end[extra]
    if index.makespan - time > index.tol:
        gaps.append(IdleGap(device, time, index.makespan, DONE, other=after))
    return gaps


# ---------------------------------------------------------------------------
# Putting it together


@dataclass(frozen=True, slots=True)
class Explanation:
    """The critical path and the cause of every idle gap of one simulated step."""

    makespan_ms: float
    critical_path: tuple[dict[str, object], ...]
    gaps: tuple[IdleGap, ...]

    def idle_by_cause(self) -> dict[int, dict[str, float]]:
        """Per device, total idle ms per cause (only causes that occur)."""
        table: dict[int, dict[str, float]] = defaultdict(dict)
        for gap in self.gaps:
            causes = table[gap.device]
            causes[gap.cause] = causes.get(gap.cause, 0.0) + gap.duration_ms
        return dict(table)

    def sentences(self) -> list[str]:
        return [describe_gap(gap) for gap in self.gaps]

    def to_dict(self) -> dict:
        return {
            "makespan_ms": self.makespan_ms,
            "critical_path": list(self.critical_path),
            "idle_by_cause": {str(d): c for d, c in self.idle_by_cause().items()},
            "gaps": [{**asdict(g), "duration_ms": g.duration_ms} for g in self.gaps],
        }


def explain(trace: Trace, schedule: Schedule, topology: Topology | None = None) -> Explanation:
    """Critical path and idle-gap causes of ``trace``."""
    return Explanation(
        makespan_ms=trace.makespan_ms,
        critical_path=tuple(critical_path(trace, schedule, topology)),
        gaps=tuple(idle_gaps(trace, schedule, topology)),
    )


def with_critical_path(report: Report, explanation: Explanation) -> Report:
    """The report with ``critical_path`` and per-device ``idle_by_cause`` added."""
    extra = {
        **report.extra,
        "critical_path": list(explanation.critical_path),
        "idle_by_cause": {str(d): c for d, c in explanation.idle_by_cause().items()},
    }
    return replace(report, extra=extra)


def format_ms(value: float) -> str:
    """``2.0``, ``0.25``, ``1.125``: milliseconds with 1 to 3 decimals."""
    text = f"{value:.3f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def _direction(action_name: str) -> str:
    """The cause an action's output answers: forwards send activations, backwards gradients."""
    return UPSTREAM if parse_action(action_name).kind == Kind.F else DOWNSTREAM


def describe_gap(gap: IdleGap) -> str:
    """One plain sentence: ``device 3 idles 2.0 ms before 3B0: waiting for ...``."""
    head = f"device {gap.device} idles {format_ms(gap.duration_ms)} ms"
    what = {UPSTREAM: "the activation of", DOWNSTREAM: "the gradient of"}
    source = f"{gap.waiting_for} on device {gap.source_device}"
    if gap.cause in (UPSTREAM, DOWNSTREAM):
        if gap.waiting_for is None:
            return f"{head} before {gap.before}: its input arrived late"
        return f"{head} before {gap.before}: waiting for {what[gap.cause]} {source}"
    if gap.cause == BUSY_LINK:
        ahead = f", queued behind {gap.other}" if gap.other else ""
        return f"{head} before {gap.before}: waiting for {source}: the link was busy ({gap.via}{ahead})"
    if gap.cause == IN_ORDER:
        return (
            f"{head} before {gap.before}: in-order blocking: {gap.other} was ready at "
            f"{format_ms(gap.other_ms)} ms but runs after {gap.before}, which waits for "
            f"{what[_direction(gap.waiting_for)]} {source}"
        )
    if gap.cause == SENDING:
        where = f" before {gap.before}" if gap.before else ""
        return f"{head}{where}: sending {gap.via} (communication does not overlap compute)"
    if gap.cause == COLLECTIVE:
        return f"device {gap.device} spends {format_ms(gap.duration_ms)} ms in {gap.via}"
    after = f" after {gap.other}" if gap.other else ""
    return f"{head}{after}: its work is done; the step ends at {format_ms(gap.end_ms)} ms"


__all__ = [
    "CAUSES",
    "Explanation",
    "IdleGap",
    "critical_path",
    "describe_gap",
    "explain",
    "idle_gaps",
    "with_critical_path",
]
