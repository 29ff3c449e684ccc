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
  same device (the validator guarantees local order, so the engine never waits for it).
* A transfer starts when its producer ends and takes ``latency + bytes / bandwidth`` of
  the link between the two devices (nothing on one device or on an ideal link). Each
  directed link (or shared channel) carries one message at a time, first come first
  served. Requests reach a channel in simulated-time order, so a FIFO resource of
  capacity one is fully described by the time it next falls free; the engine keeps that
  time instead of a ``simpy.Resource`` object, which gives the same timeline with one
  SimPy event per transfer instead of three.
* ``comm_overlap=False``: the sender is busy until its transfer has arrived.
* A schedule that can never finish raises DeadlockError naming the blocked actions.

Only SimPy events that something waits on are created: an input whose arrival time is
already known costs a dict lookup (and a timeout if it is still on the wire), so a run
costs little more than one event per action.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import simpy

from pipesim.schedules.gc_pause import no_cyclic_gc
from pipesim.schedules.ir import Action, B, F, I, Schedule, W, format_grid
from pipesim.sim.costs import Costs
from pipesim.sim.links import Topology
from pipesim.sim.trace import (
    ALLREDUCE,
    COMM,
    COMPUTE,
    KIND_CODE,
    ROWS_PER_BLOCK,
    SEND_B,
    SEND_F,
    Trace,
    TraceBuilder,
)


class DeadlockError(RuntimeError):
    """The schedule has a cycle of waits: no device can make progress."""


# Input keys: (stage * width + microbatch) * 2 + direction; direction 0 = activation
# arriving at ``stage``, 1 = gradient arriving at ``stage``.
_ACT, _GRAD = 0, 1

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
    """Simulate ``schedule`` and return its Trace.

    ``duration_scale(device, action)`` multiplies an action's duration and
    ``link_scale(src, dst)`` a transfer's time (stochastic runs; default 1).
    ``tail_ms[d]`` is end-of-step work on device d (the data-parallel gradient all-reduce),
    counted in the makespan: after the pipeline flush (every device done computing), or,
    with ``tail_after_flush=False``, as soon as the device's own last action ends
    (overlapped with the other devices' cool-down).
    """
    if costs.stages < schedule.model_stages:
        raise ValueError(
            f"costs cover {costs.stages} stages, the schedule needs {schedule.model_stages}"
        )
    topology = topology or Topology(schedule.devices)
    run = _Run(schedule, costs, topology, duration_scale, link_scale)
    if tail_ms is not None:
        if len(tail_ms) != schedule.devices:
            raise ValueError(f"tail_ms has {len(tail_ms)} entries, expected {schedule.devices}")
        run.tail_ms, run.tail_after_flush = tuple(tail_ms), tail_after_flush
    with no_cyclic_gc():
        return run.execute()


class _Run:
    """The state of one simulation: what has arrived, who waits, when channels fall free."""

    def __init__(self, schedule, costs, topology, duration_scale, link_scale):
        self.schedule = schedule
        self.costs = costs
        self.topology = topology
        self.duration_scale = duration_scale
        self.link_scale = link_scale
        self.env = simpy.Environment()
        stages = schedule.stages
        self.width = 1 + max(
            (c.microbatches.stop - 1 for c in schedule.chains if len(c.microbatches)), default=0
        )
        self.model_stage = [schedule.model_stage(s) for s in range(stages)]
        self.prev = [schedule.prev_stage(s) for s in range(stages)]
        self.next = [schedule.next_stage(s) for s in range(stages)]
        self.placement = schedule.placement
        # key -> time the input is (or will be) on its device; set when the producer ends
        self.arrival_at: dict[int, float] = {}
        self.waiting: dict[int, simpy.Event] = {}
        self.channel_free: dict[object, float] = {}
        self.position = [0] * schedule.devices  # the step a device is blocked at
        self.finished = [False] * schedule.devices
        self.blocked_on: dict[int, int] = {}
        self.out = TraceBuilder(schedule.devices)
        self.tail_ms: tuple[float, ...] | None = None
        self.tail_after_flush = True
        self.flush = self.env.event()  # every device has run its last action
        self.computing = schedule.devices
        self._stage_tables()

    def _stage_tables(self) -> None:
        """Per-kind, per-stage lookups, so the hot loop only indexes lists."""
        costs, width, ms = self.costs, self.width, self.model_stage
        stages = range(self.schedule.stages)
        self.durations = {k: [costs.duration_ms(k, ms[s]) for s in stages] for k in (F, B, I, W)}
        # The input an action waits for: key base (+ 2 * microbatch), or None.
        act = [None if p is None else 2 * s * width for s, p in enumerate(self.prev)]
        grad = [None if n is None else 2 * s * width + 1 for s, n in enumerate(self.next)]
        self.needs = {F: act, B: grad, I: grad, W: [None] * len(act)}
        # The output an action sends: (key base at the receiver, receiver, ms, channel) or
        # None; channel None means it arrives the moment it is produced.
        fwd = [self._target(s, n, 0) for s, n in enumerate(self.next)]
        bwd = [self._target(s, p, 1) for s, p in enumerate(self.prev)]
        self.sends = {F: fwd, B: bwd, I: bwd, W: [None] * len(fwd)}

    def _target(self, stage: int, other: int | None, direction: int):
        if other is None:
            return None
        src, dst = self.placement[stage], self.placement[other]
        boundary = self.model_stage[min(stage, other)]
        link = self.topology.link(src, dst)
        if src == dst or link.is_ideal:
            return (2 * other * self.width + direction, dst, 0.0, None)
        cost = link.transfer_ms(self.costs.activation_bytes[boundary])
        return (2 * other * self.width + direction, dst, cost, self.topology.channel(src, dst))

    def execute(self) -> Trace:
        for device, actions in enumerate(self.schedule.device_actions):
            self.env.process(self._device(device, actions))
        self.env.run()
        stuck = [d for d in range(self.schedule.devices) if not self.finished[d]]
        if stuck:
            raise DeadlockError(self._deadlock_message(stuck))
        return self.out.build(self.schedule)

    # -- the worker ------------------------------------------------------------------

    def _device(self, device: int, actions: tuple[Action, ...]):
        env, arrival_at, waiting = self.env, self.arrival_at, self.waiting
        needs, sends, durations = self.needs, self.sends, self.durations
        costs, scale, link_scale = self.costs, self.duration_scale, self.link_scale
        channel_free = self.channel_free
        overhead = costs.overhead_ms
        rows, trace_actions = self.out.rows, self.out.actions  # pack() empties rows in place
        blocking = not self.topology.comm_overlap
        for step, action in enumerate(actions):
            stage, kind, microbatch, sub = action
            atoms = (action,) if sub is None else sub
            # 1. wait for the inputs: an input not yet sent means a SimPy event to wait on;
            # one already on its way only moves the start (no event needed)
            start = env.now
            for atom in atoms:
                base = needs[atom.kind][atom.stage]
                if base is None:
                    continue
                key = base + 2 * atom.microbatch
                ready = arrival_at.pop(key, None)  # each input is consumed exactly once
                if ready is None:
                    self.position[device], self.blocked_on[device] = step, key
                    event = waiting[key] = env.event()
                    yield event
                    ready = arrival_at.pop(key)
                    start = max(start, env.now)
                if ready > start:
                    start = ready
            # 2. compute (one timeout covers the wait for in-flight inputs and the work)
            if sub is None:
                duration = durations[kind][stage]
            else:
                fwd, bwd = sub
                duration = costs.overlapped_ms(
                    self.model_stage[fwd.stage], bwd.kind, self.model_stage[bwd.stage]
                )
            if scale is not None:
                duration *= scale(device, action)
            end = start + duration + overhead
            yield env.timeout(end - env.now)
            rows.append((device, COMPUTE, stage, microbatch, KIND_CODE[kind], start, end, -1))
            trace_actions.append(action)
            if len(rows) >= ROWS_PER_BLOCK:
                self.out.pack()  # tuples into a NumPy block: bounded memory per row
            # 3. ship the outputs
            last_arrival = end
            for atom in atoms:
                target = sends[atom.kind][atom.stage]
                if target is None:
                    continue
                base, dst, cost, channel = target
                arrival = end
                if channel is not None:
                    if link_scale is not None:
                        cost *= link_scale(device, dst)
                    free = channel_free.get(channel, 0.0)
                    begin = free if free > end else end
                    arrival = channel_free[channel] = begin + cost
                    code = SEND_F if atom.kind is F else SEND_B
                    rows.append(
                        (device, COMM, atom.stage, atom.microbatch, code, begin, arrival, dst)
                    )
                    trace_actions.append(atom)
                    if arrival > last_arrival:
                        last_arrival = arrival
                key = base + 2 * atom.microbatch
                arrival_at[key] = arrival
                if waiting:
                    event = waiting.pop(key, None)
                    if event is not None:
                        event.succeed()  # the receiver wakes now, sleeps on until arrival
            if blocking and last_arrival > end:
                yield env.timeout(last_arrival - end)
        self.computing -= 1
        if self.computing == 0:
            self.flush.succeed()
        if self.tail_ms is not None and self.tail_ms[device] > 0:
            yield from self._tail(device)
        self.finished[device] = True

    def _tail(self, device: int):
        """End-of-step work: the gradient all-reduce, after the flush or overlapped."""
        if self.tail_after_flush and not self.flush.triggered:
            yield self.flush
        start = self.env.now
        yield self.env.timeout(self.tail_ms[device])
        self.out.rows.append((device, COMM, -1, -1, ALLREDUCE, start, self.env.now, -1))
        self.out.actions.append(None)

    # -- diagnostics -----------------------------------------------------------------

    def _deadlock_message(self, stuck: list[int]) -> str:
        marks = {}
        notes = []
        for device in stuck:
            step = self.position[device]
            action = self.schedule.device_actions[device][step]
            key = self.blocked_on.get(device)
            wanted = self._describe_key(key) if key is not None else "its turn"
            marks[(device, step)] = f"{action} waits for {wanted}"
            notes.append(f"rank {device} step {step}: {action} waits for {wanted}")
        return (
            "deadlock: no device can make progress; "
            + "; ".join(notes)
            + "\n"
            + format_grid(self.schedule, marks)
        )

    def _describe_key(self, key: int) -> str:
        direction = key % 2
        stage, microbatch = divmod(key // 2, self.width)
        if direction == _ACT:
            source = self.prev[stage]
            return f"the activation of {source}F{microbatch} (device {self.placement[source]})"
        source = self.next[stage]
        return f"the gradient of {source}B{microbatch} (device {self.placement[source]})"


__all__ = ["DeadlockError", "simulate"]
