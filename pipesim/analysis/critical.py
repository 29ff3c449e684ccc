"""The critical path, and why every device sat idle when it did.

A step is a relay race. The makespan is set by one chain of hand-offs: the action that
ends last started when something let it start (its device finished the action before, or
its input arrived), that something started when *its* predecessor let it, and so on back
to time 0. Make any element of that chain shorter and the step gets shorter; make
anything off the chain shorter and nothing changes until another chain takes over.

The engine records the hand-offs as it runs: every trace row names what released it
(``Trace.cause`` and ``Trace.cause_row``, see ``pipesim.sim.trace``). So the critical
path is a walk back over those records from the row that ends last, and the cause of an
idle gap is read off the row that ends it. Nothing here compares timestamps to guess who
waited for whom. A transfer that queued behind another on a busy channel hands off when
the one ahead leaves the channel, before that one arrives: on the path, the one ahead
appears with its channel time only.

``idle_gaps`` gives every idle stretch on every device one cause:

* ``upstream activation``: the next action is a forward waiting for the previous stage;
* ``downstream gradient``: a backward waiting for the next stage's gradient;
* ``busy link``: the input was produced but queued behind another transfer on the link;
* ``in-order blocking``: a later action on the device was ready, but runs in order
  behind one that is still waiting (head-of-line blocking);
* ``sending``: with ``comm_overlap`` off, the device is held by its own transfer;
* ``end-of-step work`` (after the pipeline: the gradient all-reduce, where gradients are
  reduced, and the optimizer step, each named) and ``done`` (nothing left).

A MoE step waits inside its actions too, on exposed all-to-alls (``analysis.exposure``).

Everything here reads a Trace and returns data; no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass

import numpy as np

from pipesim.analysis.exposure import AllToAllExposure, all_to_all_exposure
from pipesim.schedules.dependencies import MESSAGE_OF, Message, dependencies
from pipesim.schedules.ir import Kind, Schedule, parse_action
from pipesim.sim.costs import Costs
from pipesim.sim.links import Topology
from pipesim.sim.trace import Cause, Lane, RowKind, Trace

UPSTREAM = "upstream activation"
DOWNSTREAM = "downstream gradient"
BUSY_LINK = "busy link"
IN_ORDER = "in-order blocking"
SENDING = "sending"
COLLECTIVE = "end-of-step work"
DONE = "done"
GATHER = "parameter gather"


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


def _require_causes(trace: Trace) -> None:
    if trace.cause is None or trace.cause_row is None:
        raise ValueError("this trace records no causes (a measured trace?): nothing to walk")


# ---------------------------------------------------------------------------
# The critical path


def critical_path(
    trace: Trace, schedule: Schedule | None = None, topology: Topology | None = None
) -> list[dict[str, object]]:
    """The chain of rows that sets the makespan, in time order.

    Each element is ``{"name", "device", "start_ms", "end_ms"}`` (a transfer's device is
    its sender, its name ``2F0->3``); each starts exactly when the one before it ends, the
    first at 0 and the last at the makespan. An element is a whole row, except a transfer
    that a queued transfer waited for: it ends when it left the channel.
    (``schedule`` and ``topology`` are not needed: the trace holds the causes.)
    """
    start = trace.start.tolist()
    return [
        {"name": trace.name(r), "device": int(trace.device[r]), "start_ms": start[r], "end_ms": e}
        for r, e in path_rows(trace)
    ]


def path_rows(trace: Trace) -> list[tuple[int, float]]:
    """The critical path's rows in time order, each with the time it hands off at."""
    if not len(trace.start):
        return []
    _require_causes(trace)
    start, end = trace.start.tolist(), trace.end.tolist()
    cause, cause_row = trace.cause.tolist(), trace.cause_row.tolist()
    row = int(np.flatnonzero(trace.end == trace.end.max())[-1])
    chain = [(row, end[row])]
    while cause[row] != Cause.START and cause_row[row] >= 0:
        # The row's cause ends (or, on a busy channel, leaves the channel) as it starts.
        chain.append((cause_row[row], start[row]))
        row = cause_row[row]
    return chain[::-1]


# ---------------------------------------------------------------------------
# Who ran what: identity lookups over the rows (no timestamps compared)


class _Index:
    def __init__(self, trace: Trace, schedule: Schedule, topology: Topology | None) -> None:
        _require_causes(trace)
        self.trace, self.schedule, self.deps = trace, schedule, dependencies(schedule)
        self.start, self.end = trace.start.tolist(), trace.end.tolist()
        self.device = trace.device.tolist()
        self.cause, self.cause_row = trace.cause.tolist(), trace.cause_row.tolist()
        self.makespan = trace.makespan_ms
        self.blocking = topology is not None and not topology.comm_overlap
        self.atom_row: dict[tuple[int, Kind, int], int] = {}
        self.send_row: dict[tuple[int, Kind, int], int] = {}
        self.device_rows: list[list[int]] = [[] for _ in range(trace.devices)]
        self.extra_rows: list[list[int]] = [[] for _ in range(trace.devices)]
        lane = trace.lane.tolist()
        for row, action in enumerate(trace.actions):
            if action is None:  # end-of-step work or a post, not an action of the IR
                self.extra_rows[self.device[row]].append(row)
            elif lane[row] == Lane.COMPUTE:
                self.device_rows[self.device[row]].append(row)
                for atom in action.atoms:
                    self.atom_row[(atom.stage, atom.kind, atom.microbatch)] = row
            else:
                self.send_row[(action.stage, action.kind, action.microbatch)] = row
        self.sends_of: dict[int, list[int]] = defaultdict(list)  # producer row -> transfers
        for key, row in self.send_row.items():
            self.sends_of[self.atom_row[key]].append(row)
        self.position = {r: k for rows in self.device_rows for k, r in enumerate(rows)}

    def name(self, row: int) -> str:
        return self.trace.name(row)

    def producer(self, row: int) -> int:
        """The compute row whose output ``row`` carries (itself, for a compute row)."""
        if self.trace.lane[row] == Lane.COMPUTE:
            return row
        action = self.trace.actions[row]
        return self.atom_row[(action.stage, action.kind, action.microbatch)]

    def inputs(self, row: int) -> list[int]:
        """The rows that delivered the cross-stage inputs of compute ``row``: a transfer,
        or the producer itself where no link was involved."""
        found = []
        for atom in self.trace.actions[row].atoms:
            keys = self.deps.message_producers(atom)
            rows = [self.send_row.get(k, self.atom_row.get(k)) for k in keys]
            found += [r for r in rows if r is not None][:1]
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
                if self.end[send] > free:
                    free, holder = self.end[send], send
        return free, holder


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
    if holder is not None and index.trace.lane[holder] == Lane.COMM and free > prev_end:
        gaps.append(IdleGap(device, prev_end, free, SENDING, name, via=index.name(holder)))
    if start <= free:
        return gaps
    if index.cause[row] == Cause.GATHER:  # its stage's FSDP parameters (UNSHARD)
        return [
            *gaps,
            IdleGap(device, free, start, GATHER, name, via=index.name(index.cause_row[row])),
        ]
    if index.cause[row] != Cause.INPUT:  # nothing it waits for: an unmodelled delay
        return [*gaps, IdleGap(device, free, start, UPSTREAM, name)]
    carrier = index.cause_row[row]  # the input that arrived last released the action
    producer = index.producer(carrier)
    common = {
        "before": name,
        "waiting_for": index.name(producer),
        "source_device": index.device[producer],
    }
    ready = _ready_later(index, row, start)
    if ready is not None:
        gap = IdleGap(
            device, free, start, IN_ORDER, **common, other=index.name(ready[0]), other_ms=ready[1]
        )
        return [*gaps, gap]
    via = index.name(carrier) if carrier != producer else None
    if carrier != producer and index.cause[carrier] == Cause.CHANNEL:
        ahead = index.name(index.cause_row[carrier])
        return [*gaps, IdleGap(device, free, start, BUSY_LINK, **common, via=via, other=ahead)]
    carried = index.trace.kind[carrier]
    upstream = (
        carried == RowKind.SEND_F if carrier != producer else _forward_of(index, row, producer)
    )
    cause = UPSTREAM if upstream else DOWNSTREAM
    return [*gaps, IdleGap(device, free, start, cause, **common, via=via)]


def _forward_of(index: _Index, row: int, producer: int) -> bool:
    """Whether compute ``row`` took an activation (not a gradient) from ``producer``."""
    produced = {(a.stage, a.kind, a.microbatch) for a in index.trace.actions[producer].atoms}
    wanted = [
        key
        for atom in index.trace.actions[row].atoms
        if MESSAGE_OF.get(atom.kind) == Message.ACTIVATION
        for key in index.deps.message_producers(atom)
    ]
    return any(key in produced for key in wanted)


def _ready_later(index: _Index, row: int, start: float) -> tuple[int, float] | None:
    """The first later action on the device whose inputs were all there before ``start``."""
    device, k = index.device[row], index.position[row]
    for later in index.device_rows[device][k + 1 :]:
        ready = _ready_time(index, later, k)
        if ready is not None and ready < start:
            return later, ready
    return None


def _ready_time(index: _Index, row: int, blocked_at: int) -> float | None:
    """When ``row`` could have run, were it not for its place in the order; None if it
    needs something its own device only runs at ``blocked_at`` or later."""
    device = index.device[row]
    needed = [index.producer(r) for r in index.inputs(row)]
    for atom in index.trace.actions[row].atoms:
        local = index.deps.local_input(atom)
        own = None if local is None else index.atom_row.get(local)
        needed += [] if own is None else [own]
    for producer in needed:
        if index.device[producer] == device and index.position[producer] >= blocked_at:
            return None
    times = [index.end[r] for r in index.inputs(row)] + [index.end[p] for p in needed]
    return max(times, default=0.0)


def _tail_gaps(index: _Index, device: int) -> list[IdleGap]:
    rows = index.device_rows[device]
    last = rows[-1] if rows else None
    time = index.end[last] if last is not None else 0.0
    after = index.name(last) if last is not None else None
    gaps = []
    if index.blocking and last is not None:
        for send in index.sends_of.get(last, ()):
            if index.end[send] > time:
                gaps.append(IdleGap(device, time, index.end[send], SENDING, via=index.name(send)))
                time = index.end[send]
    for extra in index.extra_rows[device]:
        if index.start[extra] > time:
            gaps.append(IdleGap(device, time, index.start[extra], DONE, other=after))
        gaps.append(
            IdleGap(device, index.start[extra], index.end[extra], COLLECTIVE, via=index.name(extra))
        )
        time = index.end[extra]
    if index.makespan > time:
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
    all_to_all: AllToAllExposure | None = None  # MoE: compute waiting on all-to-alls

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
            **({} if self.all_to_all is None else {"all_to_all": self.all_to_all.to_dict()}),
        }


def explain(
    trace: Trace, schedule: Schedule, topology: Topology | None = None, costs: Costs | None = None
) -> Explanation:
    """Critical path and idle-gap causes of ``trace``; with MoE ``costs`` also the
    all-to-all its compute waits on (each path element's as ``all_to_all_ms``)."""
    path, rows = critical_path(trace, schedule, topology), [r for r, _ in path_rows(trace)]
    exposure = None if costs is None else all_to_all_exposure(trace, schedule, costs, rows)
    if exposure is not None:
        path = [{**e, "all_to_all_ms": ms} for e, ms in zip(path, exposure.path_ms, strict=True)]
    gaps = tuple(idle_gaps(trace, schedule, topology))
    return Explanation(trace.makespan_ms, tuple(path), gaps, exposure)


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
    if gap.cause == GATHER:
        return f"{head} before {gap.before}: waiting for its parameters ({gap.via})"
    if gap.cause == COLLECTIVE:
        return f"device {gap.device} spends {format_ms(gap.duration_ms)} ms in {gap.via}"
    after = f" after {gap.other}" if gap.other else ""
    return f"{head}{after}: its work is done; the step ends at {format_ms(gap.end_ms)} ms"
