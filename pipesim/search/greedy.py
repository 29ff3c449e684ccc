"""The constructive heuristic: a list schedule built by simulating the pipeline in time.

Every device is a worker with a clock. At each step the worker that can start something
earliest starts it, choosing by the Zero Bubble paper's ordering rules:

* an ``I`` whose inputs are there goes first (it is on the critical path: the previous
  stage waits for its gradient);
* then an ``F`` whose input is there, if the device's activation memory stays within the
  limit (warm-up forwards are bounded by memory, not by a formula);
* a ``W`` fills the idle time before the next ``I`` or ``F`` can start, when that gap is
  at least ``fill_ratio`` times the W (``fill_ratio = 0``: any gap; ``inf``: only when
  the next forward is held back by memory, to give back its weight-gradient bytes, or at
  the end).

Memory is counted in the Report's accounting: an F takes its stage's activation when it
starts, an I gives back all but the weight-gradient bytes, a W the rest. A stage whose
microbatch comes back to the same device later (the V placement's chunk 0) reserves the
later chunk's bytes at its F, so a device never fills up with chunk-0 activations that
can only be released by a chunk-1 forward it has no room for.

Variants (``Rules``) change the ties and the bounds: 1F1B's alternation (an F that can
start now before an I), a W run first when memory holds the next F back, the warm-up
staircase of 1F1B or of ZB-H2 (twice as steep), and for the V which chunk goes first (the
chunk-1 forward that arrives before a chunk-0 one would end, the chunk-0 I before the
chunk-1 one) and how much room a chunk-0 forward leaves for chunk 1 (all it will need; one
or two forwards', always or only while no chunk 1 is in flight; none).

The result is only an order per device: the engine then runs it with the real costs and
links, and only the engine's makespan and peak count.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from pipesim.schedules.ir import Action, F, I, Kind, W
from pipesim.sim.costs import Costs
from pipesim.sim.links import Topology

INF = math.inf


class Stalled(RuntimeError):
    """The construction could not go on (the reservations are there to rule it out)."""


@dataclass(frozen=True, slots=True)
class Problem:
    """What the heuristic needs to know, per stage (``placement[stage] = device``)."""

    placement: tuple[int, ...]
    microbatches: int
    forward_ms: tuple[float, ...]
    input_ms: tuple[float, ...]
    weight_ms: tuple[float, ...]
    hop_ms: tuple[float, ...]  # stage s to s+1 (and the gradient back); 0 on one device
    taken_bytes: tuple[float, ...]
    weight_grad_bytes: tuple[float, ...]
    later_bytes: tuple[float, ...]  # bytes of later stages of the same microbatch, same device
    limit_bytes: float

    @property
    def devices(self) -> int:
        return max(self.placement) + 1

    @property
    def stages(self) -> int:
        return len(self.placement)


def make_problem(
    placement: tuple[int, ...],
    microbatches: int,
    costs: Costs,
    topology: Topology | None,
    limit_bytes: float,
) -> Problem:
    stages = len(placement)
    topology = topology or Topology(max(placement) + 1)
    taken = tuple(costs.activation_memory_bytes[:stages])
    hop = []
    for s in range(stages):
        nxt = placement[s + 1] if s + 1 < stages else placement[s]
        link = topology.link(placement[s], nxt)
        hop.append(0.0 if link.is_ideal else link.transfer_ms(costs.activation_bytes[s]))
    later = tuple(
        sum(taken[t] for t in range(s + 1, stages) if placement[t] == placement[s])
        for s in range(stages)
    )
    return Problem(
        placement=placement,
        microbatches=microbatches,
        forward_ms=tuple(costs.forward_ms[:stages]),
        input_ms=tuple(costs.backward_input_ms[:stages]),
        weight_ms=tuple(costs.backward_weight_ms[:stages]),
        hop_ms=tuple(hop),
        taken_bytes=taken,
        weight_grad_bytes=tuple(costs.weight_grad_memory_bytes[:stages]),
        later_bytes=later,
        limit_bytes=limit_bytes,
    )


@dataclass(frozen=True, slots=True)
class Rules:
    """One variant of the ordering rules."""

    fill_ratio: float = 0.0  # a W fills a gap of at least fill_ratio x its duration
    deep_first: bool = True  # among ready actions of one kind, the later stage first
    # None: forwards bounded by memory only; k: also at most (stages - s) + k microbatches
    # in flight at the last stage s a device holds: the 1F1B staircase widened by k (for
    # the V, the staircase of its way back)
    inflight_extra: int | None = None
    # among ready I passes, the earlier stage first (the microbatch nearer its end), however
    # the forwards are ordered
    shallow_inputs: bool = False
    # None: a V's chunk-0 forward reserves the bytes of every chunk-1 forward it will need;
    # k: it leaves room for k chunk-1 forwards only (0: none; a deadlock is then possible,
    # and the construction stalls)
    reserve: int | None = None
    # when memory holds a forward back, an owed W runs first, even before a ready I
    free_first: bool = False
    # an F that can start now goes before an I that can (1F1B's alternation)
    forward_first: bool = False
    # the staircase's step: 2 lets a device run about twice as many warm-up forwards
    # (ZB-H2's shape), its cap slope x (stages - s) - (slope - 1) + inflight_extra
    slope: int = 1
    # a device waits for a later stage's forward that arrives before an earlier stage's
    # forward would end, instead of starting the earlier one (the V's chunk 1 first)
    wait_deep: bool = False
    # the room kept by ``reserve`` only while no chunk-1 microbatch is in flight on the device
    # (one in flight will give its bytes back)
    reserve_idle: bool = False


class _Device:
    __slots__ = ("clock", "held", "reserved", "owed_w", "order", "stages")

    def __init__(self, stages: list[int]) -> None:
        self.clock, self.held, self.reserved = 0.0, 0.0, 0.0
        self.owed_w: deque[tuple[int, int]] = deque()
        self.order: list[Action] = []
        self.stages = stages


class _Builder:
    """The state of one construction: what ran where and when."""

    def __init__(self, problem: Problem, rules: Rules) -> None:
        self.p, self.rules = problem, rules
        n = problem.stages
        self.f_end: list[list[float]] = [[] for _ in range(n)]
        self.i_end: list[list[float]] = [[] for _ in range(n)]
        stages_of = [
            [s for s in range(n) if problem.placement[s] == d] for d in range(problem.devices)
        ]
        if rules.deep_first:
            stages_of = [list(reversed(s)) for s in stages_of]
        self.devices = [_Device(s) for s in stages_of]
        self.inflight = [0] * n  # microbatches past F and before I, per stage
        # a returning stage: its microbatch was on this device before (the V's chunk 1)
        self.returning = [
            any(problem.placement[t] == problem.placement[s] for t in range(s)) for s in range(n)
        ]

    def forward_ready(self, s: int) -> float:
        i = len(self.f_end[s])
        if i >= self.p.microbatches:
            return INF
        if s == 0:
            return 0.0
        before = self.f_end[s - 1]
        return before[i] + self.p.hop_ms[s - 1] if i < len(before) else INF

    def input_ready(self, s: int) -> float:
        i = len(self.i_end[s])
        if i >= len(self.f_end[s]):
            return INF
        if s == self.p.stages - 1:
            return self.f_end[s][i]
        after = self.i_end[s + 1]
        return max(self.f_end[s][i], after[i] + self.p.hop_ms[s]) if i < len(after) else INF

    def fits(self, dev: _Device, s: int) -> bool:
        p = self.p
        if self.rules.reserve is not None:
            room = 0.0 if self.returning[s] else self.rules.reserve * p.later_bytes[s]
            if self.rules.reserve_idle and any(
                self.inflight[t] for t in dev.stages if self.returning[t]
            ):
                room = 0.0
            need = dev.held + p.taken_bytes[s] + room
        elif self.returning[s]:
            return True  # its bytes were reserved when the microbatch first came by
        else:
            need = dev.held + dev.reserved + p.taken_bytes[s] + p.later_bytes[s]
        return need <= p.limit_bytes * (1 + 1e-12) + 1e-9

    def staircase_full(self, dev: _Device, s: int) -> bool:
        extra = self.rules.inflight_extra
        if extra is None or s != max(dev.stages):
            return False  # a V's chunk 0 is bounded by memory and by its chunk 1
        held = sum(self.inflight[t] for t in dev.stages if t >= s)
        slope = self.rules.slope
        return held >= slope * (self.p.stages - s) - (slope - 1) + extra

    def earlier_forward(self, kept, found):
        """Of two forwards ``(start, rank, stage)``, the one to run (``kept`` ranks first)."""
        if kept is None:
            return found
        if self.rules.wait_deep:
            return kept if kept[0] < found[0] + self.p.forward_ms[found[2]] else found
        return min(kept, found)

    def plan(self, d: int) -> tuple[float, int, int, Kind]:
        """(start, priority, stage, kind) of the device's next action; start INF: waits."""
        dev, p = self.devices[d], self.p
        best = (INF, 9, 0, -1, F)
        blocked, forward = False, None
        for rank, s in enumerate(dev.stages):
            ready = self.input_ready(s)
            if ready < INF:
                tie = s if self.rules.shallow_inputs else rank
                best = min(best, (max(ready, dev.clock), 0, tie, s, I), key=lambda c: c[:3])
            ready = self.forward_ready(s)
            if ready < INF:
                if self.staircase_full(dev, s):
                    pass  # the staircase holds it back, not memory
                elif self.fits(dev, s):
                    forward = self.earlier_forward(forward, (max(ready, dev.clock), rank, s))
                else:
                    blocked = True
        if forward is not None:
            start, rank, s = forward
            prio = -1 if self.rules.forward_first and start <= dev.clock else 1
            best = min(best, (start, prio, rank, s, F), key=lambda c: c[:3])
        if dev.owed_w and blocked and self.rules.free_first:
            return (dev.clock, 2, dev.owed_w[0][0], W)
        if dev.owed_w and best[0] > dev.clock:
            s = dev.owed_w[0][0]
            gap = best[0] - dev.clock
            needed = self.rules.fill_ratio * p.weight_ms[s] if p.weight_ms[s] > 0 else 0.0
            if blocked or gap == INF or gap >= needed:
                return (dev.clock, 2, s, W)
        return (best[0], best[1], best[3], best[4])

    def commit(self, d: int, start: float, stage: int, kind: Kind) -> None:
        dev, p = self.devices[d], self.p
        if kind == F:
            i = len(self.f_end[stage])
            end = start + p.forward_ms[stage]
            self.f_end[stage].append(end)
            if self.returning[stage]:
                dev.reserved -= p.taken_bytes[stage]
            else:
                dev.reserved += p.later_bytes[stage]
            dev.held += p.taken_bytes[stage]
            self.inflight[stage] += 1
        elif kind == I:
            i = len(self.i_end[stage])
            end = start + p.input_ms[stage]
            self.i_end[stage].append(end)
            dev.held -= p.taken_bytes[stage] - p.weight_grad_bytes[stage]
            dev.owed_w.append((stage, i))
            self.inflight[stage] -= 1
        else:
            stage, i = dev.owed_w.popleft()
            end = start + p.weight_ms[stage]
            dev.held -= p.weight_grad_bytes[stage]
        dev.clock = end
        dev.order.append(Action(stage, kind, i))

    def run(self) -> tuple[tuple[Action, ...], ...]:
        list_schedule(self.p, self.plan, self.commit, Stalled)
        return tuple(tuple(dev.order) for dev in self.devices)


def list_schedule(problem: Problem, plan, commit, stuck: type[Exception]) -> None:
    """Run a list scheduler over every pass of ``problem``: ``plan(d)`` is device d's next
    pass as ``(start, priority, stage, kind)`` (start INF where none can start), and the
    device whose pass starts first (then has the least priority) runs it, ``commit(d,
    start, stage, kind)``; only that device and the one its pass feeds are planned again.
    ``stuck`` is raised where no device can start a pass."""
    p = problem
    left = 3 * p.stages * p.microbatches
    plans = [plan(d) for d in range(p.devices)]
    while left:
        d = min(range(p.devices), key=lambda k: plans[k][:2])
        start, _, stage, kind = plans[d]
        if start == INF:
            raise stuck(f"no device can start a pass, {left} left")
        commit(d, start, stage, kind)
        left -= 1
        touched = {d}
        if kind == F and stage + 1 < p.stages:
            touched.add(p.placement[stage + 1])
        if kind == I and stage > 0:
            touched.add(p.placement[stage - 1])
        for k in touched:
            plans[k] = plan(k)


def construct(problem: Problem, rules: Rules) -> tuple[tuple[Action, ...], ...]:
    """Per-device orders built by the heuristic under ``rules``."""
    return _Builder(problem, rules).run()
