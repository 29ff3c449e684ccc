"""A V order paced to the memory: microbatches let in one per period, passes run by due time.

Under a tight limit (a V-Min's: about half of what 1F1B holds) the first device can keep
only a few chunk-0 activations, each held for a microbatch's whole round trip (forward
through every stage and the input gradient back). Letting the microbatches in as fast as
memory allows, as the constructive heuristic does, packs the first few into the pipeline
together: their forwards queue behind one another on every device and their round trips
stretch (at 8 devices with I = 1.2 F, up to twice an empty pipeline's), while the memory
they hold keeps the next microbatches out; the step's first third then runs a few
microbatches, and each device idles about a third of the step.

This construction paces them instead. Microbatch ``k``'s first forward is released at
``k * period``, and each pass is due at ``k * period`` plus the time it would start on an
empty pipeline (the forwards' chain down the stages, then the input gradients' chain
back, with the links' latency). Every device, when free, runs the ready pass due first
(earliest-deadline-first list scheduling on the real costs and links):

* a forward runs only where its bytes fit, beside room for one later-chunk forward (the
  V's chunk 1) while none is in flight on the device, so chunk 1 can always go on (one in
  flight gives its bytes back: its own chunk 1 runs on the devices before, down to the
  last stage, each keeping the same room);
* where a forward is held back by memory and is due before what would run instead, an
  owed ``W`` runs first to give back its bytes; otherwise ``W`` passes fill the gaps of at
  least ``fill`` times their duration and the end.

The period is tried on a short grid around the busiest device's work per microbatch, each
with the first microbatch released on the pace or the first two at once (the empty
pipeline has room for one more at the start); one candidate each, and the engine then
times every order on the real costs and links.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator

from pipesim.schedules.ir import Action, F, I, Kind, Schedule, W, single_chain
from pipesim.search.greedy import Problem, list_schedule

INF = math.inf
# Periods tried: the busiest device's work per microbatch times each of these.
PERIOD_FACTORS = (0.8, 0.9, 1.0, 1.04, 1.08, 1.13, 1.2)
FILLS = (0.0, 1.0)  # a W fills a gap of at least this many times its duration
EARLY = (0, 1)  # the first forwards released this many periods ahead of the pace


class _Stuck(RuntimeError):
    """No device can go on (memory holds every forward back)."""


def paced_schedules(problem: Problem, name: str) -> Iterator[Schedule]:
    """One order per (early, fill, period) variant that can be built, distinct, in grid
    order: the period the busiest device's work per microbatch times each of
    ``PERIOD_FACTORS``."""
    work = [0.0] * problem.devices
    for s, d in enumerate(problem.placement):
        work[d] += problem.forward_ms[s] + problem.input_ms[s] + problem.weight_ms[s]
    seen: set[tuple[tuple[Action, ...], ...]] = set()
    variants = [(e, f, x) for e in EARLY for f in FILLS for x in PERIOD_FACTORS]
    for early, fill, factor in variants:
        try:
            orders = paced_orders(problem, max(work) * factor, fill, early)
        except _Stuck:
            continue
        if orders in seen:
            continue
        seen.add(orders)
        chain = single_chain(problem.stages, problem.microbatches)
        yield Schedule(orders, problem.placement, chain, name)


def offsets(problem: Problem) -> tuple[list[float], list[float]]:
    """When each stage's forward and input backward start on an empty pipeline (ms after
    the microbatch's first forward starts)."""
    n = problem.stages
    forward = [0.0] * n
    for s in range(1, n):
        forward[s] = forward[s - 1] + problem.forward_ms[s - 1] + problem.hop_ms[s - 1]
    backward = [0.0] * n
    backward[n - 1] = forward[n - 1] + problem.forward_ms[n - 1]
    for s in range(n - 2, -1, -1):
        backward[s] = backward[s + 1] + problem.input_ms[s + 1] + problem.hop_ms[s]
    return forward, backward


class _Device:
    __slots__ = ("clock", "held", "owed", "order", "stages")

    def __init__(self, stages: list[int]) -> None:
        self.clock, self.held = 0.0, 0.0
        self.owed: deque[tuple[int, int]] = deque()
        self.order: list[Action] = []
        self.stages = stages


class _Paced:
    """One build: a clock and held bytes per device, the passes' end times per stage."""

    def __init__(self, problem: Problem, period_ms: float, fill: float, early: int) -> None:
        self.p, self.period, self.fill, self.early = problem, period_ms, fill, early
        n = problem.stages
        self.f_end: list[list[float]] = [[] for _ in range(n)]
        self.i_end: list[list[float]] = [[] for _ in range(n)]
        self.devices = [
            _Device([s for s in reversed(range(n)) if problem.placement[s] == d])
            for d in range(problem.devices)
        ]
        self.returning = [
            any(problem.placement[t] == problem.placement[s] for t in range(s)) for s in range(n)
        ]
        self.forward_due, self.input_due = offsets(problem)
        self.limit = problem.limit_bytes * (1 + 1e-12) + 1e-9

    def forward_ready(self, s: int) -> float:
        k = len(self.f_end[s])
        if k >= self.p.microbatches:
            return INF
        if s == 0:
            return max(0.0, (k - self.early) * self.period)
        before = self.f_end[s - 1]
        return before[k] + self.p.hop_ms[s - 1] if k < len(before) else INF

    def input_ready(self, s: int) -> float:
        k = len(self.i_end[s])
        if k >= len(self.f_end[s]):
            return INF
        if s == self.p.stages - 1:
            return self.f_end[s][k]
        after = self.i_end[s + 1]
        return max(self.f_end[s][k], after[k] + self.p.hop_ms[s]) if k < len(after) else INF

    def fits(self, dev: _Device, s: int) -> bool:
        """Whether the forward of stage ``s`` fits, with room for one later-chunk forward
        where none is in flight on the device (one in flight gives its bytes back first)."""
        room = 0.0 if self.returning[s] else self.p.later_bytes[s]
        if any(len(self.f_end[t]) > len(self.i_end[t]) for t in dev.stages if self.returning[t]):
            room = 0.0
        return dev.held + self.p.taken_bytes[s] + room <= self.limit

    def plan(self, d: int) -> tuple[float, float, int, Kind]:
        """(start, due, stage, kind) of the device's next pass; start INF: it waits."""
        dev, p = self.devices[d], self.p
        ready: list[tuple[float, float, int, Kind]] = []
        blocked = INF  # the earliest due of a forward memory holds back
        for s in dev.stages:
            at = self.input_ready(s)
            if at < INF:
                ready.append((at, len(self.i_end[s]) * self.period + self.input_due[s], s, I))
            at = self.forward_ready(s)
            if at < INF:
                due = len(self.f_end[s]) * self.period + self.forward_due[s]
                if self.fits(dev, s):
                    ready.append((at, due, s, F))
                else:
                    blocked = min(blocked, due)
        now = [c for c in ready if c[0] <= dev.clock]
        if now:
            _, due, s, kind = min(now, key=lambda c: c[1])
            best = (dev.clock, due, s, kind)
        elif ready:
            best = min(ready)
        else:
            best = (INF, INF, 0, F)
        if dev.owed:
            s = dev.owed[0][0]
            gap = best[0] - dev.clock
            fills = gap > 0 and gap >= self.fill * p.weight_ms[s]  # INF: nothing else
            if fills or blocked < best[1]:
                return (dev.clock, best[1], s, W)
        return best

    def commit(self, d: int, start: float, stage: int, kind: Kind) -> None:
        dev, p = self.devices[d], self.p
        if kind == F:
            k = len(self.f_end[stage])
            end = start + p.forward_ms[stage]
            self.f_end[stage].append(end)
            dev.held += p.taken_bytes[stage]
        elif kind == I:
            k = len(self.i_end[stage])
            end = start + p.input_ms[stage]
            self.i_end[stage].append(end)
            dev.held -= p.taken_bytes[stage] - p.weight_grad_bytes[stage]
            dev.owed.append((stage, k))
        else:
            stage, k = dev.owed.popleft()
            end = start + p.weight_ms[stage]
            dev.held -= p.weight_grad_bytes[stage]
        dev.clock = end
        dev.order.append(Action(stage, kind, k))

    def run(self) -> tuple[tuple[Action, ...], ...]:
        list_schedule(self.p, self.plan, self.commit, _Stuck)
        return tuple(tuple(dev.order) for dev in self.devices)


def paced_orders(
    problem: Problem, period_ms: float, fill: float, early: int = 0
) -> tuple[tuple[Action, ...], ...]:
    """Per-device orders built with microbatch ``k``'s first forward released at
    ``(k - early) * period_ms`` (at 0 for the first ``early``) and W passes filling gaps of
    at least ``fill`` times their duration (module docstring)."""
    return _Paced(problem, period_ms, fill, early).run()


__all__ = ["PERIOD_FACTORS", "offsets", "paced_orders", "paced_schedules"]
