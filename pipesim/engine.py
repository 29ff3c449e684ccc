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

Only SimPy events that something waits on are created: an input that has already
arrived costs a set lookup, so a run costs about one event per action.
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from pipesim.costs import Costs
from pipesim.hardware import Topology
from pipesim.schedules.ir import OVERLAP_F_B, Action, B, F, I, Schedule, W, format_grid
from pipesim.trace import KIND_CODES, Trace, TraceBuilder


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
        self.arrived: set[int] = set()
        self.waiting: dict[int, simpy.Event] = {}
        self.channel_free: dict[object, float] = {}
        self.links: dict[tuple[int, int], tuple[object, object]] = {}
        self.position = [0] * schedule.devices
        self.blocked_on: dict[int, int] = {}
        self.out = TraceBuilder(schedule.devices)

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
        env, arrived, waiting = self.env, self.arrived, self.waiting
        width, prev, nxt, model_stage = self.width, self.prev, self.next, self.model_stage
        costs, out, scale = self.costs, self.out, self.duration_scale
        act_mem, wgrad_mem = costs.activation_memory_bytes, costs.weight_grad_memory_bytes
        overhead = costs.overhead_ms
        # Inference keeps an activation only while its forward runs; training keeps it
        # for the backward.
        keeps = self.schedule.is_training
        for step, action in enumerate(actions):
            self.position[device] = step
            for atom in action.atoms:
                kind = atom.kind
                if kind is F:
                    if prev[atom.stage] is None:
                        continue
                    key = (atom.stage * width + atom.microbatch) * 2 + _ACT
                elif kind is B or kind is I:
                    if nxt[atom.stage] is None:
                        continue
                    key = (atom.stage * width + atom.microbatch) * 2 + _GRAD
                else:
                    continue
                if key not in arrived:
                    event = waiting.get(key)
                    if event is None:
                        event = waiting[key] = env.event()
                    self.blocked_on[device] = key
                    yield event
            start = env.now
            if action.kind is OVERLAP_F_B:
                fwd, bwd = action.sub_actions
                duration = costs.overlapped_ms(
                    model_stage[fwd.stage], bwd.kind, model_stage[bwd.stage]
                )
            else:
                duration = costs.duration_ms(action.kind, model_stage[action.stage])
            if scale is not None:
                duration *= scale(device, action)
            duration += overhead
            yield env.timeout(duration)
            end = env.now
            out.compute(device, action, start, end, self.chunk)
            last_arrival = end
            for atom in action.atoms:
                ms = model_stage[atom.stage]
                kind = atom.kind
                if kind is F:
                    out.memory(device, start, act_mem[ms], 1)
                    if not keeps:
                        out.memory(device, end, -act_mem[ms], -1)
                    dst_stage = nxt[atom.stage]
                    direction = _ACT
                elif kind is B:
                    out.memory(device, end, -act_mem[ms], -1)
                    dst_stage = prev[atom.stage]
                    direction = _GRAD
                elif kind is I:
                    out.memory(device, end, -(act_mem[ms] - wgrad_mem[ms]), -1)
                    dst_stage = prev[atom.stage]
                    direction = _GRAD
                else:  # W
                    out.memory(device, end, -wgrad_mem[ms], 0)
                    continue
                if dst_stage is not None:
                    key = (dst_stage * width + atom.microbatch) * 2 + direction
                    boundary = model_stage[min(atom.stage, dst_stage)]
                    arrival = self._send(
                        device,
                        self.placement[dst_stage],
                        key,
                        atom,
                        costs.activation_bytes[boundary],
                    )
                    last_arrival = max(last_arrival, arrival)
            if not self.topology.comm_overlap and last_arrival > end:
                yield env.timeout(last_arrival - end)
        self.position[device] = len(actions)

    # -- links -----------------------------------------------------------------------

    def _send(self, src: int, dst: int, key: int, atom: Action, nbytes: float) -> float:
        """Ship an output to ``dst``; returns its arrival time."""
        now = self.env.now
        if src == dst:
            self._arrive(key)
            return now
        link_info = self.links.get((src, dst))
        if link_info is None:
            link = self.topology.link(src, dst)
            link_info = self.links[(src, dst)] = (
                link,
                None if link.is_ideal else self.topology.channel(src, dst),
            )
        link, channel = link_info
        if channel is None:
            self._arrive(key)
            return now
        cost = link.transfer_ms(nbytes)
        if self.link_scale is not None:
            cost *= self.link_scale(src, dst)
        begin = max(now, self.channel_free.get(channel, 0.0))
        arrival = self.channel_free[channel] = begin + cost
        self.out.transfer(src, dst, atom, begin, arrival, self.chunk)
        if arrival == now:
            self._arrive(key)
        else:
            timer = self.env.timeout(arrival - now)
            timer.callbacks.append(lambda _event, key=key: self._arrive(key))
        return arrival

    def _arrive(self, key: int) -> None:
        self.arrived.add(key)
        event = self.waiting.pop(key, None)
        if event is not None:
            event.succeed()

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
