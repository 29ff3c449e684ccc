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

from collections.abc import Callable

import simpy

from pipesim.costs import Costs
from pipesim.hardware import Topology
from pipesim.schedules.ir import Action, B, F, I, Schedule, W, format_grid
from pipesim.trace import COMM, COMPUTE, KIND_CODE, KIND_CODES, SEND_B, SEND_F, Trace, TraceBuilder


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
) -> Trace:
    """Simulate ``schedule`` and return its Trace.

    ``duration_scale(device, action)`` multiplies an action's duration and
    ``link_scale(src, dst)`` a transfer's time (stochastic runs; default 1).
    """
    if costs.stages < schedule.model_stages:
        raise ValueError(
            f"costs cover {costs.stages} stages, the schedule needs {schedule.model_stages}"
        )
    topology = topology or Topology(schedule.devices)
    run = _Run(schedule, costs, topology, duration_scale, link_scale)
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
        self.chunk = _chunks(schedule.placement)
        # key -> time the input is (or will be) on its device; set when the producer ends
        self.arrival_at: dict[int, float] = {}
        self.waiting: dict[int, simpy.Event] = {}
        self.channel_free: dict[object, float] = {}
        self.links: dict[tuple[int, int], tuple[object, object]] = {}
        self.position = [0] * schedule.devices
        self.blocked_on: dict[int, int] = {}
        self.out = TraceBuilder(schedule.devices)
        self._stage_tables()

    def _stage_tables(self) -> None:
        """Per-stage lookups so the hot loop does list indexing only."""
        costs, width = self.costs, self.width
        ms = self.model_stage
        self.durations = {
            kind: [costs.duration_ms(kind, ms[s]) for s in range(self.schedule.stages)]
            for kind in (F, B, I, W)
        }
        act = costs.activation_memory_bytes
        wgrad = costs.weight_grad_memory_bytes
        self.take = [act[m] for m in ms]
        self.free_b = [-act[m] for m in ms]
        self.free_i = [-(act[m] - wgrad[m]) for m in ms]
        self.free_w = [-wgrad[m] for m in ms]
        # input key bases: activation into s, gradient into s (None: no input to wait for)
        self.need_act = [None if p is None else 2 * s * width for s, p in enumerate(self.prev)]
        self.need_grad = [None if n is None else 2 * s * width + 1 for s, n in enumerate(self.next)]
        # output: (key base at the receiver, receiver device, bytes) or None
        self.send_fwd = [
            None if n is None else (2 * n * width, self.placement[n], costs.activation_bytes[ms[s]])
            for s, n in enumerate(self.next)
        ]
        self.send_bwd = [
            None
            if p is None
            else (2 * p * width + 1, self.placement[p], costs.activation_bytes[ms[p]])
            for p in self.prev
        ]

    def execute(self) -> Trace:
        for device, actions in enumerate(self.schedule.device_actions):
            if actions:
                self.env.process(self._device(device, actions))
        self.env.run()
        stuck = [
            d
            for d, actions in enumerate(self.schedule.device_actions)
            if self.position[d] < len(actions)
        ]
        if stuck:
            raise DeadlockError(self._deadlock_message(stuck))
        return self.out.build()

    # -- the worker ------------------------------------------------------------------

    def _device(self, device: int, actions: tuple[Action, ...]):
        env, arrival_at, waiting = self.env, self.arrival_at, self.waiting
        costs, scale, model_stage = self.costs, self.duration_scale, self.model_stage
        need_act, need_grad, send_fwd, send_bwd = (
            self.need_act,
            self.need_grad,
            self.send_fwd,
            self.send_bwd,
        )
        durations, chunk = self.durations, self.chunk
        take, free_b, free_i, free_w = self.take, self.free_b, self.free_i, self.free_w
        overhead = costs.overhead_ms
        rows, trace_actions, mem = self.out.rows, self.out.actions, self.out.mem[device]
        send = self._send
        blocking = not self.topology.comm_overlap
        # Inference keeps an activation only while its forward runs; training keeps it
        # for the backward.
        keeps = self.schedule.is_training
        for step, action in enumerate(actions):
            self.position[device] = step
            sub = action.sub_actions
            atoms = (action,) if sub is None else sub
            for atom in atoms:
                kind = atom.kind
                base = (
                    need_act[atom.stage]
                    if kind is F
                    else need_grad[atom.stage]
                    if (kind is B or kind is I)
                    else None
                )
                if base is None:
                    continue
                key = base + 2 * atom.microbatch
                ready = arrival_at.get(key)
                if ready is None:
                    self.blocked_on[device] = key
                    event = waiting[key] = env.event()
                    yield event
                    ready = arrival_at[key]
                if ready > env.now:
                    yield env.timeout(ready - env.now)
            start = env.now
            if sub is None:
                duration = durations[action.kind][action.stage]
            else:
                fwd, bwd = sub
                duration = costs.overlapped_ms(
                    model_stage[fwd.stage], bwd.kind, model_stage[bwd.stage]
                )
            if scale is not None:
                duration *= scale(device, action)
            yield env.timeout(duration + overhead)
            end = env.now
            stage = action.stage
            rows.append(
                (
                    device,
                    COMPUTE,
                    stage,
                    chunk[stage] if stage >= 0 else -1,
                    action.microbatch,
                    KIND_CODE[action.kind],
                    start,
                    end,
                    -1,
                )
            )
            trace_actions.append(action)
            last_arrival = end
            for atom in atoms:
                kind, stage = atom.kind, atom.stage
                if kind is F:
                    mem.append((start, take[stage], 1))
                    if not keeps:
                        mem.append((end, -take[stage], -1))
                    target = send_fwd[stage]
                elif kind is B:
                    mem.append((end, free_b[stage], -1))
                    target = send_bwd[stage]
                elif kind is I:
                    mem.append((end, free_i[stage], -1))
                    target = send_bwd[stage]
                else:  # W
                    mem.append((end, free_w[stage], 0))
                    continue
                if target is not None:
                    arrival = send(
                        device, target[1], target[0] + 2 * atom.microbatch, atom, target[2]
                    )
                    if arrival > last_arrival:
                        last_arrival = arrival
            if blocking and last_arrival > end:
                yield env.timeout(last_arrival - end)
        self.position[device] = len(actions)

    # -- links -----------------------------------------------------------------------

    def _send(self, src: int, dst: int, key: int, atom: Action, nbytes: float) -> float:
        """Ship an output to ``dst``; returns its arrival time."""
        now = self.env.now
        arrival = now
        if src != dst:
            link_info = self.links.get((src, dst))
            if link_info is None:
                link = self.topology.link(src, dst)
                channel = None if link.is_ideal else self.topology.channel(src, dst)
                link_info = self.links[(src, dst)] = (link, channel)
            link, channel = link_info
            if channel is not None:
                cost = link.transfer_ms(nbytes)
                if self.link_scale is not None:
                    cost *= self.link_scale(src, dst)
                free = self.channel_free.get(channel, 0.0)
                begin = free if free > now else now
                arrival = self.channel_free[channel] = begin + cost
                self.out.rows.append(
                    (
                        src,
                        COMM,
                        atom.stage,
                        self.chunk[atom.stage],
                        atom.microbatch,
                        SEND_F if atom.kind is F else SEND_B,
                        begin,
                        arrival,
                        dst,
                    )
                )
                self.out.actions.append(atom)
        self.arrival_at[key] = arrival
        event = self.waiting.pop(key, None)
        if event is not None:
            event.succeed()  # the receiver wakes now and sleeps on until the arrival
        return arrival

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


def _chunks(placement: tuple[int, ...]) -> list[int]:
    seen: dict[int, int] = {}
    chunks = []
    for device in placement:
        chunks.append(seen.get(device, 0))
        seen[device] = chunks[-1] + 1
    return chunks


__all__ = ["DeadlockError", "simulate", "KIND_CODES", "W"]
