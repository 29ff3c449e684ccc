"""The discrete-event engine: run a Schedule on a Topology with Costs, on SimPy.

Picture one worker per device with a to-do list. A worker takes its next action, waits
until the inputs that action needs have arrived (the activation from the previous stage
for a forward, the gradient from the next stage for a backward), works for the action's
duration, then ships its outputs down the links. It never skips ahead: an action whose
input is late blocks everything behind it on that device (head-of-line blocking, as
real pipeline runtimes do).

Semantics (DESIGN.md, "Engine semantics"):

* ``F(s,i)`` waits for the activation of ``F(s-1,i)``; ``B(s,i)``/``I(s,i)`` for the
  gradient of ``B/I(s+1,i)``; ``W(s,i)`` only for ``I(s,i)``, which precedes it on the
  same device.
* Same-device order is enforced, not assumed (``pipesim.sim.order``): a backward before
  its forward, a W before its I, an action twice or left out, or a device waiting for
  its own later action raises the validator's ScheduleError with the grid.
* Links follow LogGP (``pipesim.sim.links``): a transfer starts when its producer ends,
  holds its channel for ``bytes / bandwidth + gap`` and arrives ``latency`` after
  leaving it; nothing is sent on one device or over an ideal link. Channels queue first
  come, first served, with an explicit tie rule where several senders share one
  (``pipesim.sim.channels``). A channel is fully described by the time it next falls
  free, so the engine keeps that time instead of a ``simpy.Resource``: one SimPy event
  per action, not three per transfer.
* ``comm_overlap=False``: the sender is busy until its transfer has arrived.
* A schedule read from torch's lowered CSV keeps its runtime posts (``Schedule.posts``)
  and runs on ``pipesim.sim.rendezvous``'s worker: each post is made when its device
  reaches it; a transfer between ranks leaves when both its SEND and its RECV are
  posted (a rendezvous, so a late RECV delays the consumer); ``REDUCE_GRAD`` takes the
  stage's data-parallel all-reduce (``Costs.reduce_grad_ms``) and holds the device,
  replacing ``tail_ms``; ``UNSHARD`` gathers on its own stream before the stage's next
  compute, ``RESHARD`` holds the device; posts without a cost take no time.
* Every row records what released it (``pipesim.sim.trace``, ``CAUSE_*``). Times are
  computed exactly from those causes (a row starts at its cause's end, to the bit);
  SimPy's clock only orders the events.
* A schedule that can never finish raises DeadlockError naming the blocked actions.

Only SimPy events that something waits on are created: an input whose arrival time is
already known costs a dict lookup, so a run costs little more than one event per action.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import simpy

from pipesim.schedules.ir import OVERLAP_F_B, Action, B, F, I, Schedule, W
from pipesim.sim.channels import ARRIVAL, GRANT, ROW, Channels
from pipesim.sim.costs import Costs
from pipesim.sim.links import Topology
from pipesim.sim.order import DeadlockError, OrderCheck
from pipesim.sim.rendezvous import Rendezvous
from pipesim.sim.trace import (
    ALLREDUCE,
    CAUSE_CHANNEL,
    CAUSE_DEVICE,
    CAUSE_FLUSH,
    CAUSE_INPUT,
    CAUSE_PRODUCER,
    CAUSE_SENDING,
    CAUSE_START,
    COMPUTE,
    KIND_CODE,
    ROWS_PER_BLOCK,
    SEND_B,
    SEND_F,
    Trace,
    TraceBuilder,
)

DurationScale = Callable[[int, Action], float]


def simulate(
    schedule: Schedule,
    costs: Costs,
    topology: Topology | None = None,
    *,
    duration_scale: DurationScale | None = None,
    link_scale: Callable[[int, int], float] | None = None,
    tail_ms: Sequence[float] | None = None,
    tail_after_flush: bool = True,
) -> Trace:
    """Simulate ``schedule`` and return its Trace; raise ScheduleError if it is invalid.

    ``duration_scale(device, action)`` multiplies an action's duration and
    ``link_scale(src, dst)`` a transfer's channel time and latency (stochastic runs;
    default 1). ``tail_ms[d]`` is end-of-step work on device d (the data-parallel gradient
    all-reduce), counted in the makespan: after the pipeline flush (every device done
    computing), or, with ``tail_after_flush=False``, as soon as the device's own last
    action ends (overlapped with the other devices' cool-down).
    """
    check_arguments(schedule, costs, tail_ms)
    topology = topology or Topology(schedule.devices)
    run = _Run(schedule, costs, topology, duration_scale, link_scale)
    if tail_ms is not None:
        run.tail_ms, run.tail_after_flush = tuple(tail_ms), tail_after_flush
    return run.execute()


def check_arguments(schedule: Schedule, costs: Costs, tail_ms: Sequence[float] | None) -> None:
    """ValueError where ``costs`` or ``tail_ms`` do not fit ``schedule`` (checked by every
    evaluator before it runs)."""
    if costs.stages < schedule.model_stages:
        raise ValueError(
            f"costs cover {costs.stages} stages, the schedule needs {schedule.model_stages}"
        )
    if tail_ms is not None and len(tail_ms) != schedule.devices:
        raise ValueError(f"tail_ms has {len(tail_ms)} entries, expected {schedule.devices}")


class _Run:
    """The state of one simulation: what has arrived, who waits, when channels fall free."""

    def __init__(self, schedule, costs, topology, duration_scale, link_scale):
        self.schedule, self.costs, self.topology = schedule, costs, topology
        self.duration_scale, self.link_scale = duration_scale, link_scale
        self.env = simpy.Environment()
        self.order = OrderCheck(schedule)
        self.width = self.order.width
        self.model_stage = [schedule.model_stage(s) for s in range(schedule.stages)]
        # input key -> (time it is on its device, the row that delivered it)
        self.arrival_at: dict[int, tuple[float, int]] = {}
        self.waiting: dict[int, simpy.Event] = {}
        self.out = TraceBuilder(schedule.devices)
        self.next_row = itertools.count().__next__  # rows are numbered in append order
        self.channels = Channels(self.env, topology, self.out, self.next_row, self._deliver)
        self.tail_ms: tuple[float, ...] | None = None
        self.tail_after_flush = True
        self.flush = self.env.event()  # every device has run its last action
        self.flush_at, self.flush_row = 0.0, -1
        self.computing = schedule.devices
        self.overhead = costs.overhead_ms
        self._stage_tables()
        # The general way handles what the common step does not (see _device).
        self.general = bool(self.channels.shared_names or link_scale or not topology.comm_overlap)

    def _stage_tables(self) -> None:
        """Per-kind, per-stage lookups, so the hot loop only indexes lists."""
        schedule, width = self.schedule, self.width
        stages = range(schedule.stages)
        prev = [schedule.prev_stage(s) for s in stages]
        nxt = [schedule.next_stage(s) for s in stages]
        # The input an action waits for: key base (+ 2 * microbatch), or None.
        act = [None if p is None else 2 * s * width for s, p in enumerate(prev)]
        grad = [None if n is None else 2 * s * width + 1 for s, n in enumerate(nxt)]
        # The output an action sends: (key base at the receiver, receiver, channel ms,
        # latency ms, channel or None, shared) or None.
        fwd = [self._target(s, n, 0) for s, n in enumerate(nxt)]
        bwd = [self._target(s, p, 1) for s, p in enumerate(prev)]
        nothing = [None] * len(prev)

        def durations_ms(kind):
            return [self.costs.duration_ms(kind, self.model_stage[s]) for s in stages]

        # kind -> (inputs, outputs, durations, order state before and after, kind code,
        # transfer kind code)
        steps = self.order.steps
        self.rules = {
            F: (act, fwd, durations_ms(F), *steps[F], KIND_CODE[F], SEND_F),
            B: (grad, bwd, durations_ms(B), *steps[B], KIND_CODE[B], SEND_B),
            I: (grad, bwd, durations_ms(I), *steps[I], KIND_CODE[I], SEND_B),
            W: (nothing, nothing, durations_ms(W), *steps[W], KIND_CODE[W], None),
        }

    def _target(self, stage: int, other: int | None, direction: int):
        if other is None:
            return None
        src, dst = self.schedule.placement[stage], self.schedule.placement[other]
        key = 2 * other * self.width + direction
        link = self.topology.link(src, dst)
        if src == dst or link.is_ideal:
            return (key, dst, 0.0, 0.0, None, False)
        nbytes = self.costs.activation_bytes[self.model_stage[min(stage, other)]]
        channel, shared = self.channels.index(self.topology.channel(src, dst))
        return (key, dst, link.occupancy_ms(nbytes), link.latency_ms, channel, shared)

    def execute(self) -> Trace:
        # torch's runtime posts (a lowered schedule) take their own worker
        worker = Rendezvous(self).device if self.schedule.posts else self._device
        for device, actions in enumerate(self.schedule.device_actions):
            self.env.process(worker(device, actions))
        try:
            self.env.run()
        except (KeyError, IndexError, TypeError):
            self.order.invalid()  # an action names a stage or microbatch the schedule lacks
            raise
        self.order.check_finished()
        trace = self.out.build(self.schedule)
        simple = (trace.lane == COMPUTE) & (trace.kind != KIND_CODE[OVERLAP_F_B])
        self.order.check_ranges(trace.stage, trace.microbatch, simple)
        return trace

    def _deliver(self, key: int, arrival: float, row: int) -> None:
        self.arrival_at[key] = (arrival, row)
        if self.waiting:
            event = self.waiting.pop(key, None)
            if event is not None:
                event.succeed()  # the receiver wakes now, sleeps on until arrival

    # -- the worker ------------------------------------------------------------------

    def _device(self, device: int, actions: tuple[Action, ...]):
        """One worker: wait for the inputs, compute, ship the outputs, in list order. The
        common step is written out here; ``_general_device`` takes overlapped pairs, link
        noise, shared channels, blocking sends. ``free``: when the device falls free."""
        env, arrival_at, waiting, rules = self.env, self.arrival_at, self.waiting, self.rules
        order, progress, cells = self.order, self.order.progress, self.order.cells[device]
        rows, trace_actions, next_row = self.out.rows, self.out.actions, self.next_row
        channel_free, holder, overhead = self.channels.free, self.channels.holder, self.overhead
        general, scale = self.general, self.duration_scale
        free, clock, cause, cause_row = 0.0, 0.0, CAUSE_START, -1  # clock: SimPy's now
        for step, action in enumerate(actions):
            stage, kind, microbatch, sub = action
            if sub is not None or general:  # from here on, the general way
                since = (free, cause, cause_row)
                return (yield from self._general_device(device, actions, step, since))
            needs, outputs, durations, before, after, code, send_code = rules[kind]
            cell = cells[stage] + microbatch  # a foreign stage: TypeError (see execute)
            if progress[cell] != before:
                order.out_of_order(device, step, action)
            progress[cell] = after
            base = needs[stage]
            if base is not None:
                key = base + 2 * microbatch
                got = arrival_at.pop(key, None)  # each input is consumed exactly once
                if got is None:
                    yield self._wait(device, step, key)
                    clock, got = env.now, arrival_at.pop(key)
                if got[0] > free:
                    free, cause, cause_row = got[0], CAUSE_INPUT, got[1]
            duration = durations[stage]
            if scale is not None:  # a noisy run (Monte Carlo)
                duration *= scale(device, action)
            end = free + duration + overhead
            delay = end - clock if end > clock else 0.0
            yield env.timeout(delay)
            clock += delay  # SimPy's own sum, so clock == env.now
            row = next_row()
            rows.append((device, stage, microbatch, code, free, end, -1, cause, cause_row))
            trace_actions.append(action)
            if len(rows) >= ROWS_PER_BLOCK:
                self.out.pack()  # tuples into a NumPy block: bounded memory per row
            free, cause, cause_row = end, CAUSE_DEVICE, row
            target = outputs[stage]
            if target is None:
                continue
            key, dst, occupancy, latency, channel, _ = target
            key += 2 * microbatch
            if channel is None:  # same device or an ideal link: there at once
                arrival_at[key] = (end, row)
            else:  # first come, first served on a channel with one sender
                ready = channel_free[channel]
                begin, why, why_row = (
                    (ready, CAUSE_CHANNEL, holder[channel])
                    if ready > end
                    else (end, CAUSE_PRODUCER, row)
                )
                leave = channel_free[channel] = begin + occupancy
                sent = holder[channel] = next_row()
                rows.append(
                    (
                        device,
                        stage,
                        microbatch,
                        send_code,
                        begin,
                        leave + latency,
                        dst,
                        why,
                        why_row,
                    )
                )
                trace_actions.append(action)
                arrival_at[key] = (leave + latency, sent)
            if waiting and key in waiting:
                waiting.pop(key).succeed()  # the receiver wakes now, sleeps on until arrival
        yield from self._finish(device, free, cause, cause_row)

    # -- the general step ------------------------------------------------------------

    def _wait(self, device: int, step: int, key: int) -> simpy.Event:
        """The event that the input ``key`` has been sent (its producer has ended)."""
        self.order.blocked[device] = (step, key)
        event = self.waiting[key] = self.env.event()
        return event

    def _general_device(self, device: int, actions: tuple[Action, ...], first: int, since):
        """The rest of a device's list from step ``first``, the general way: overlapped
        pairs, noisy links, channels shared by several senders, and sends that hold the
        sender until they arrive (``comm_overlap`` off). ``since``: (free, cause, row)."""
        env, arrival_at, rules, order = self.env, self.arrival_at, self.rules, self.order
        progress, cells, width = order.progress, order.cells[device], self.width
        rows, trace_actions, next_row = self.out.rows, self.out.actions, self.next_row
        duration_of, ship, overlap = self._duration, self._ship, self.topology.comm_overlap
        free, cause, cause_row = since
        for step in range(first, len(actions)):
            action = actions[step]
            for atom in action.atoms:
                stage, kind, microbatch, _ = atom
                needs, _, _, before, after, _, _ = rules[kind]
                cell = cells[stage] + microbatch
                if progress[cell] != before or not 0 <= microbatch < width:
                    order.out_of_order(device, step, atom)
                progress[cell] = after
                base = needs[stage]
                if base is None:
                    continue
                key = base + 2 * microbatch
                if key not in arrival_at:
                    yield self._wait(device, step, key)
                ready, row = arrival_at.pop(key)
                if ready > free:
                    free, cause, cause_row = ready, CAUSE_INPUT, row
            end = free + duration_of(device, action) + self.overhead
            yield env.timeout(max(end - env.now, 0.0))
            row = next_row()
            code = KIND_CODE[action.kind]
            rows.append(
                (device, action.stage, action.microbatch, code, free, end, -1, cause, cause_row)
            )
            trace_actions.append(action)
            if len(rows) >= ROWS_PER_BLOCK:
                self.out.pack()
            free, cause, cause_row = end, CAUSE_DEVICE, row
            sent = ship(device, action, end, row)
            if sent and not overlap:
                free, cause, cause_row = yield from self._hold(end, sent, row)
        yield from self._finish(device, free, cause, cause_row)

    def _duration(self, device: int, action: Action) -> float:
        if action.sub_actions is None:
            duration = self.rules[action.kind][2][action.stage]
        else:  # a group: an overlapped F&B pair, or any group torch's CSV holds
            stage = self.model_stage
            duration = self.costs.group_ms([(a.kind, stage[a.stage]) for a in action.sub_actions])
        if self.duration_scale is not None:
            duration *= self.duration_scale(device, action)
        return duration

    def _ship(self, device: int, action: Action, end: float, row: int) -> list:
        """Send the outputs of the action in ``row``, atom by atom; return one
        ``[arrival, row, grant, ...]`` record per transfer (arrival None until a shared
        channel serves it)."""
        sent = []
        for atom in action.atoms:
            target = self.rules[atom.kind][1][atom.stage]
            if target is None:
                continue
            key, dst, occupancy, latency, channel, shared = target
            key += 2 * atom.microbatch
            if channel is None:
                self._deliver(key, end, row)
                continue
            if self.link_scale is not None:
                factor = self.link_scale(device, dst)
                occupancy, latency = occupancy * factor, latency * factor
            request = [None, None, None, end, device, atom, key, dst, occupancy, latency, row]
            if shared:
                self.channels.request(channel, request)
            else:
                request[ARRIVAL], request[ROW] = self.channels.send(
                    channel, device, atom, key, end, dst, occupancy, latency, row
                )
            sent.append(request)
        return sent

    def _hold(self, end: float, sent: list, row: int):
        """``comm_overlap`` off: the sender stays busy until its transfers have arrived."""
        for request in sent:
            if request[ARRIVAL] is None:
                yield request[GRANT]  # a shared channel serves it at the end of this instant
        arrival, last = max((r[ARRIVAL], r[ROW]) for r in sent)
        if arrival <= end:
            return end, CAUSE_DEVICE, row
        yield self.env.timeout(max(arrival - self.env.now, 0.0))
        return arrival, CAUSE_SENDING, last

    # -- the end of the step ---------------------------------------------------------

    def _finish(self, device: int, free: float, cause: int, cause_row: int):
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
            free, cause, cause_row = self.flush_at, CAUSE_FLUSH, self.flush_row
        end = free + self.tail_ms[device]
        yield self.env.timeout(max(end - self.env.now, 0.0))
        self.out.rows.append((device, -1, -1, ALLREDUCE, free, end, -1, cause, cause_row))
        self.out.actions.append(None)
        self.next_row()


__all__ = ["DeadlockError", "check_arguments", "simulate"]
