"""The state of one simulation, and what its device workers ask of it.

A ``Run`` holds what the workers share: the SimPy environment, the inputs that have
arrived (by input key, ``pipesim.sim.engine.rules``), who waits for which, the channels,
the rows written so far and the same-device order check. The workers
(``pipesim.sim.engine.steps`` for a plain schedule, ``pipesim.sim.engine.posts`` for one
with torch's runtime posts) call its public methods: ``wait`` for an input, ``record`` a
compute row, ``ship`` an action's outputs, ``hold`` a device on its transfers
(``comm_overlap`` off), and ``finish`` a device's list (then its end-of-step work).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pipesim.schedules.dependencies import dependencies
from pipesim.schedules.ir import Action, Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.engine.channels import Channels, Request
from pipesim.sim.engine.order import OrderCheck
from pipesim.sim.engine.rules import hop_link, plain_rules, stage_rules
from pipesim.sim.links import Topology
from pipesim.sim.trace import KIND_CODE, ROWS_PER_BLOCK, Cause, RowKind, Trace, TraceBuilder

if TYPE_CHECKING:
    import simpy

_DEVICE, _SENDING, _FLUSH = int(Cause.DEVICE), int(Cause.SENDING), int(Cause.FLUSH)


class Run:
    """The state of one simulation: what has arrived, who waits, when channels fall free."""

    def __init__(
        self,
        schedule: Schedule,
        costs: Costs,
        topology: Topology,
        duration_scale: Callable[[int, Action], float] | None = None,
        link_scale: Callable[[int, int], float] | None = None,
        tail_ms: Sequence[float] | None = None,
        tail_after_flush: bool = True,
        optimizer_ms: Sequence[float] | None = None,
    ) -> None:
        self.schedule, self.costs, self.topology = schedule, costs, topology
        self.duration_scale, self.link_scale = duration_scale, link_scale
        self.tail_ms = None if tail_ms is None else tuple(tail_ms)
        self.tail_after_flush = tail_after_flush
        self.optimizer_ms = None if optimizer_ms is None else tuple(optimizer_ms)
        # simpy here, not at the top: a run on the fast evaluator never loads it
        import simpy

        self.env = simpy.Environment()
        self.order = OrderCheck(schedule)
        self.width = self.order.width
        self.model_stage = [schedule.model_stage(s) for s in range(schedule.stages)]
        # input key -> (time it is on its device, the row that delivered it)
        self.arrival_at: dict[int, tuple[float, int]] = {}
        self.waiting: dict[int, simpy.Event] = {}
        self.out = TraceBuilder(schedule.devices)
        self.next_row = itertools.count().__next__  # rows are numbered in append order
        self.channels = Channels(self.env, topology, self.out, self.next_row, self.deliver)
        self.flush = self.env.event()  # every device has run its last action
        self.flush_at, self.flush_row = 0.0, -1
        self.computing = schedule.devices
        self.overhead = costs.overhead_ms
        self.group_lengths: dict[tuple, float] = {}
        link = hop_link(topology, costs, self.channels, self.model_stage)
        self.rules = stage_rules(dependencies(schedule), costs, self.model_stage, self.width, link)
        self.plain_rules = plain_rules(self.rules)  # the same, as exact tuples (steps.py)
        # The general step handles what the common one does not (``pipesim.sim.engine.steps``).
        self.general = bool(self.channels.shared_names or link_scale or not topology.comm_overlap)

    def execute(self, worker) -> Trace:
        """Run ``worker(device, actions)`` (a SimPy process body) for every device."""
        for device, actions in enumerate(self.schedule.device_actions):
            self.env.process(worker(device, actions))
        try:
            self.env.run()
        except (KeyError, IndexError, TypeError):
            self.order.invalid()  # an action names a stage or microbatch the schedule lacks
            raise
        self.order.check_stuck()
        trace = self.out.build(self.schedule)
        self.order.check_complete(trace)
        return trace

    # -- what the workers ask --------------------------------------------------------

    def deliver(self, key: int, arrival: float, row: int) -> None:
        """Input ``key`` is on its device at ``arrival``, brought by ``row``."""
        self.arrival_at[key] = (arrival, row)
        if self.waiting:
            event = self.waiting.pop(key, None)
            if event is not None:
                event.succeed()  # the receiver wakes now, sleeps on until arrival

    def wait(self, device: int, step: int, key: int) -> simpy.Event:
        """The event that the input ``key`` has been sent (its producer has ended)."""
        self.order.blocked[device] = (step, key)
        event = self.waiting[key] = self.env.event()
        return event

    def duration(self, device: int, action: Action) -> float:
        """How long ``action`` computes on ``device`` (ms), without the per-action overhead."""
        if action.sub_actions is None:
            duration = self.rules[action.kind].durations[action.stage]
        else:  # a group: an overlapped F&B pair, or any group torch's CSV holds
            stage = self.model_stage
            members = tuple((a.kind, stage[a.stage]) for a in action.sub_actions)
            duration = self.group_lengths.get(members)
            if duration is None:  # a MoE pair's two-stream timeline, once per kind of pair
                duration = self.group_lengths[members] = self.costs.group_ms(members)
        if self.duration_scale is not None:
            duration *= self.duration_scale(device, action)
        return duration

    def record(self, device: int, action: Action, start: float, end: float, why) -> int:
        """Append the compute row of ``action``; ``why``: (cause, cause row). Its number."""
        row = self.next_row()
        code = KIND_CODE[action.kind]
        rows = self.out.rows
        rows.append((device, action.stage, action.microbatch, code, start, end, -1, *why))
        self.out.actions.append(action)
        if len(rows) >= ROWS_PER_BLOCK:
            self.out.pack()  # tuples into a NumPy block: bounded memory per row
        return row

    def record_beside(self, device: int, stage: int, code: RowKind, start, end, why) -> int:
        """Append a row of work beside the IR's actions (a tail, a post); its number."""
        row = self.next_row()
        self.out.rows.append((device, stage, -1, int(code), start, end, -1, *why))
        self.out.actions.append(None)
        return row

    def ship(self, device: int, action: Action, end: float, row: int) -> list[Request]:
        """Send the outputs of the action in ``row``, atom by atom; return the requests of
        its transfers (arrival None until a shared channel serves it)."""
        sent = []
        for atom in action.atoms:
            target = self.rules[atom.kind].outputs[atom.stage]
            if target is None:
                continue
            key = target.key + 2 * atom.microbatch
            if target.channel is None:
                self.deliver(key, end, row)
                continue
            request = Request(
                end, device, atom, key, target.dst, target.occupancy, target.latency, row
            )
            sent.append(self.offer(request, target.channel, target.shared))
        return sent

    def offer(self, request: Request, channel: int | None, shared: bool) -> Request:
        """Put ``request`` on its channel (a shared one serves it at the end of the instant;
        None: an ideal link, there at once), with the run's link noise."""
        if self.link_scale is not None:
            factor = self.link_scale(request.device, request.dst)
            request.occupancy, request.latency = (
                request.occupancy * factor,
                request.latency * factor,
            )
        if channel is None:
            request.arrival, request.row = request.ready, request.producer
            self.deliver(request.key, request.ready, request.producer)
            return request
        if shared:
            return self.channels.request(channel, request)
        return self.channels.send(channel, request)

    def hold(self, end: float, sent: list[Request], row: int):
        """``comm_overlap`` off: the sender stays busy until its transfers have arrived.
        Returns (free, cause, cause row)."""
        for request in sent:
            if request.arrival is None:
                yield request.grant  # a shared channel serves it at the end of this instant
        arrival, last = max((r.arrival, r.row) for r in sent)
        if arrival <= end:
            return end, _DEVICE, row
        yield self.env.timeout(max(arrival - self.env.now, 0.0))
        return arrival, _SENDING, last

    def finish(self, device: int, free: float, cause: int, cause_row: int):
        """Count the device out; then its end-of-step work, after the flush if asked."""
        self.order.finished[device] = True
        if free >= self.flush_at:
            self.flush_at, self.flush_row = free, cause_row
        self.computing -= 1
        if self.computing == 0:
            self.flush.succeed()
        if self.tail_ms is None or self.tail_ms[device] <= 0:
            return
        if self.tail_after_flush:
            if not self.flush.triggered:
                yield self.flush
            free, cause, cause_row = self.flush_at, _FLUSH, self.flush_row
        end = free + self.tail_ms[device]
        step = self.optimizer_ms[device] if self.optimizer_ms is not None else 0.0
        reduced = free + (self.tail_ms[device] - step)  # the gradients, then the step
        if reduced > free:
            yield self.env.timeout(max(reduced - self.env.now, 0.0))
            row = self.record_beside(
                device, -1, RowKind.ALLREDUCE, free, reduced, (cause, cause_row)
            )
            free, cause, cause_row = reduced, _DEVICE, row
        if step > 0:
            yield self.env.timeout(max(end - self.env.now, 0.0))
            self.record_beside(device, -1, RowKind.OPTIMIZER, free, end, (cause, cause_row))


__all__ = ["Run"]
