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
    # None: forwards bounded by memory only; k: also at most (stages - first stage held) + k
    # microbatch-chunks in flight on a device, the 1F1B staircase widened by k
    inflight_extra: int | None = None


class _Device:
    __slots__ = ("cap", "clock", "held", "inflight", "reserved", "owed_w", "order", "stages")

    def __init__(self, stages: list[int], cap: float) -> None:
        self.clock, self.held, self.reserved = 0.0, 0.0, 0.0
        self.inflight, self.cap = 0, cap
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
        extra = rules.inflight_extra
        self.devices = [_Device(s, INF if extra is None else n - min(s) + extra) for s in stages_of]
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
        if self.returning[s]:
            return True  # its bytes were reserved when the microbatch first came by
        need = dev.held + dev.reserved + p.taken_bytes[s] + p.later_bytes[s]
        return need <= p.limit_bytes * (1 + 1e-12) + 1e-9

    def plan(self, d: int) -> tuple[float, int, int, Kind]:
        """(start, priority, stage, kind) of the device's next action; start INF: waits."""
        dev, p = self.devices[d], self.p
        best = (INF, 9, -1, F)
        blocked = False
        for s in dev.stages:
            ready = self.input_ready(s)
            if ready < INF:
                best = min(best, (max(ready, dev.clock), 0, s, I), key=lambda c: c[:2])
            ready = self.forward_ready(s)
            if ready < INF:
                if dev.inflight >= dev.cap and not self.returning[s]:
                    pass  # the staircase holds it back, not memory
                elif self.fits(dev, s):
                    best = min(best, (max(ready, dev.clock), 1, s, F), key=lambda c: c[:2])
                else:
                    blocked = True
        if dev.owed_w and best[0] > dev.clock:
            s = dev.owed_w[0][0]
            gap = best[0] - dev.clock
            needed = self.rules.fill_ratio * p.weight_ms[s] if p.weight_ms[s] > 0 else 0.0
            if blocked or gap == INF or gap >= needed:
                return (dev.clock, 2, s, W)
        return best

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
            dev.inflight += 1
        elif kind == I:
            i = len(self.i_end[stage])
            end = start + p.input_ms[stage]
            self.i_end[stage].append(end)
            dev.held -= p.taken_bytes[stage] - p.weight_grad_bytes[stage]
            dev.owed_w.append((stage, i))
            dev.inflight -= 1
        else:
            stage, i = dev.owed_w.popleft()
            end = start + p.weight_ms[stage]
            dev.held -= p.weight_grad_bytes[stage]
        dev.clock = end
        dev.order.append(Action(stage, kind, i))

    def run(self) -> tuple[tuple[Action, ...], ...]:
        p = self.p
        left = 3 * p.stages * p.microbatches
        plans = [self.plan(d) for d in range(p.devices)]
        while left:
            d = min(range(p.devices), key=lambda k: plans[k][:2])
            start, _, stage, kind = plans[d]
            if start == INF:
                raise Stalled(f"no device can start an action, {left} left")
            self.commit(d, start, stage, kind)
            left -= 1
            touched = {d}
            if kind == F and stage + 1 < p.stages:
                touched.add(p.placement[stage + 1])
            if kind == I and stage > 0:
                touched.add(p.placement[stage - 1])
            for k in touched:
                plans[k] = self.plan(k)
        return tuple(tuple(dev.order) for dev in self.devices)


def construct(problem: Problem, rules: Rules) -> tuple[tuple[Action, ...], ...]:
    """Per-device orders built by the heuristic under ``rules``."""
    return _Builder(problem, rules).run()
