"""The exact mode's constraint program: every order of the split actions, as CP-SAT sees it.

The heuristic builds good orders; this model says which order is best, or how far the
best can be from what was found. Each action (``F``, ``I``, ``W`` of every stage and
microbatch) is an interval of fixed length whose start the solver chooses:

* **devices**: the intervals of one device never overlap (``NoOverlap``), so each device
  runs one action at a time, in any order;
* **dependencies** (the engine's rule): ``F(s,i)`` starts after ``F(s-1,i)`` ended and its
  activation crossed the hop; ``I(s,i)`` after ``F(s,i)`` and after ``I(s+1,i)`` ended
  and its gradient crossed back; ``W(s,i)`` after ``I(s,i)``. A hop is its time on an idle
  link (latency plus ``bytes / bandwidth``, as the heuristic's ``Problem`` holds it);
  queueing behind a busy channel or a sender held by its transfer only adds time;
* **memory** (the Report's accounting, the search's limit): an ``F`` takes its stage's
  activation when it starts; the ``I`` gives back all but the weight-gradient part when it
  ends, the ``W`` the rest. Per stage and microbatch that is two intervals on the device's
  memory, ``[F start, I end)`` holding ``activation - weight-gradient`` bytes and ``[F
  start, W end)`` holding the weight-gradient bytes, and a ``Cumulative`` keeps their sum
  within the limit at every instant;
* **cuts**: precedences every order within the limit keeps, stated outright
  (``pipesim.search.serial.precedences``: a V's chunk-0 forward waits for room beside
  chunk 1, a forward for the backwards memory forces home); redundant, they only help
  the solver prove its bound;
* **objective**: the step's end, the last ``W`` of each device (its last action: an ``F``
  is followed by its ``I``, an ``I`` by its ``W``) plus, with data parallelism, the
  device's own all-reduce (overlapped) or the longest one after the flush
  (``pipesim.search.tail``).

Microbatches are interchangeable (their costs are the stage's), so the model asks each
stage to run its ``F``, its ``I`` and its ``W`` passes in microbatch order. That loses no
step end. Take any valid timed schedule and the first stage ``s`` whose forwards run out
of order, ``F(s,b)`` just before ``F(s,a)`` with ``a < b``: swap the labels ``a`` and ``b``
on every action of the stages from ``s`` up, and on the ``I`` and ``W`` passes of the
stages below. Each device then runs the same actions at the same times (so its memory
and its end are unchanged), and every dependency still holds: the new ``F(s,a)`` starts
when the old ``F(s,b)`` did, after ``F(s-1,b)`` and so after ``F(s-1,a)``, which ran
first; the new ``I(t,a)`` below ``s`` waits for what the old ``I(t,b)`` waited for. Sorting
stage by stage up the pipeline puts every stage's forwards in order; the same swap on the
``I`` and ``W`` passes from the last stage down (forwards now in order) puts the input
backwards in order, and swapping ``W`` passes alone, the weight passes. A timing the
heuristic gives becomes such an ordered one by sorting its starts per stage and kind.

**Integer time.** CP-SAT works in integers. Durations become ticks of ``1 / per_ms`` ms,
``per_ms`` a power of ten chosen so the step is 10^6 to 10^7 ticks (decimal costs such as
1.2 ms stay exact), each rounded *down*. The model is then a relaxation: a real schedule
with starts ``t`` gives the integer schedule ``floor(t x per_ms)``, which keeps every
constraint because ``floor(a + b) >= floor(a) + floor(b)`` (a start after an end plus a
hop stays after it; two actions that did not overlap still do not; memory depends only on
each device's order, which ``floor`` keeps), and its step end is at most ``floor(T x
per_ms)``. So the solver's proven bound, divided by ``per_ms``, is a lower bound on every
real order's makespan. The order the solver finds is run on the engine, whose makespan
(real durations, real links) is the one reported. Rounding moves a timing by less than a
tick per action and hop on its longest chain, so an order the solver proves optimal is
optimal to within ``resolution_ms`` (that many ticks): ``optimal`` means that.

**Integer bytes.** Where every size is a whole number of bytes, they are divided by their
greatest common divisor (exact). Otherwise, or where that leaves sizes past 2^24 (the
solver multiplies sizes by durations), they are scaled to about 2^24 with demands rounded
down and the capacity up: again a relaxation, so the bound holds; an order over the real
limit is then caught by the engine's check and left out.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass

from pipesim.schedules.ir import Action, F, I, W
from pipesim.search.bound import MARGIN, chains
from pipesim.search.fits import counts_memory, room_bytes
from pipesim.search.greedy import Problem
from pipesim.search.serial import precedences
from pipesim.search.tail import Tail

KINDS = (F, I, W)
TICKS_ABOVE = 1e6  # the step takes 10^6 to 10^7 ticks
MAX_DEMAND = 2**24  # largest memory demand handed to the solver
EXACT = 1e-12  # relative slack when a float tick count is a whole number up to rounding


def ticks_per_ms(horizon_ms: float) -> int:
    """The power of ten that makes ``horizon_ms`` 10^6 to 10^7 ticks (at least 1)."""
    if horizon_ms <= 0:
        return 1
    return 10 ** max(0, math.ceil(math.log10(TICKS_ABOVE / horizon_ms)))


def down(ms: float, per_ms: int) -> int:
    """``ms`` in ticks, rounded down (a whole number up to float rounding stays whole)."""
    return max(0, math.floor(ms * per_ms * (1 + EXACT)))


@dataclass(frozen=True, slots=True)
class MemoryUnits:
    """Per stage, the demands of the two memory intervals and the device's capacity."""

    until_input: tuple[int, ...]  # activation - weight-gradient bytes, held to the I's end
    until_weight: tuple[int, ...]  # weight-gradient bytes, held to the W's end
    capacity: int


def memory_units(problem: Problem) -> MemoryUnits | None:
    """The sizes in whole units (module docstring); None when the limit does not apply
    (a stage that frees bytes it never took, as the lower bound also leaves out)."""
    if not counts_memory(problem):
        return None
    grad = [min(g, t) for g, t in zip(problem.weight_grad_bytes, problem.taken_bytes, strict=True)]
    held = [t - g for t, g in zip(problem.taken_bytes, grad, strict=True)]
    room = room_bytes(problem)
    sizes = [x for x in held + grad if x > 0]
    if not sizes:
        return None
    if all(float(x).is_integer() and x < 2**53 for x in sizes):
        unit = math.gcd(*(int(x) for x in sizes))
        if max(sizes) / unit <= MAX_DEMAND:
            as_int = lambda xs: tuple(int(x) // unit for x in xs)  # noqa: E731
            return MemoryUnits(as_int(held), as_int(grad), math.floor(room / unit))
    scale = MAX_DEMAND / max(sizes)
    floor_all = lambda xs: tuple(math.floor(x * scale) for x in xs)  # noqa: E731
    return MemoryUnits(floor_all(held), floor_all(grad), math.ceil(room * scale))


@dataclass(frozen=True, slots=True)
class Solved:
    """What the solver found: an order per device (None if it found none), the step end
    its timing gives (ms, in rounded-down durations), and its proven lower bound (ms)."""

    orders: tuple[tuple[Action, ...], ...] | None
    model_ms: float | None
    bound_ms: float
    proven: bool
    status: str
    resolution_ms: float = 0.0  # what rounding to ticks can hide (module docstring)


class ExactModel:
    """The CP-SAT model of ``problem`` (module docstring). ``horizon_ms``: no start or end
    later than this (the heuristic's step end: a better order ends before it); ``floor_ms``:
    a known lower bound on the step end (the cheap bound, lowered by ``MARGIN``), or 0.

    The floor may be any number of ticks up to ``T x per_ms``, ``T`` the best real
    makespan (the step variable need only be at least every end), not only up to its
    floor: the cheap bound is lifted back by its margin, and once more for safety, so that
    a step the heuristic already reached is proven at once instead of a tick below it."""

    def __init__(
        self,
        problem: Problem,
        backward_ms: tuple[float, ...],
        overhead_ms: float,
        tail: Tail | None,
        horizon_ms: float,
        floor_ms: float = 0.0,
    ) -> None:
        from ortools.sat.python import cp_model  # optional: pipesim[exact]

        self.problem, self.per_ms = problem, ticks_per_ms(horizon_ms)
        self.model = model = cp_model.CpModel()
        self.horizon = math.ceil(horizon_ms * self.per_ms) + 1
        chain = chains(problem, backward_ms, overhead_ms)
        self.length = {
            F: [down(ms, self.per_ms) for ms in chain.forward],
            I: [down(ms, self.per_ms) for ms in chain.input],
            W: [down(ms, self.per_ms) for ms in chain.weight],
        }
        self.start: dict[Action, object] = {}
        self.interval: dict[Action, object] = {}
        self.spans: list[tuple[object, Action, Action]] = []  # memory: (size, F, I or W)
        self.step_terms: list[tuple[Action, int]] = []  # step >= end of W + ticks
        for s in range(problem.stages):
            for kind in KINDS:
                for i in range(problem.microbatches):
                    self._action(Action(s, kind, i))
        self._dependencies()
        self._devices()
        self._memory()
        self._cuts()
        floor = min(down(floor_ms * (1 + 2 * MARGIN), self.per_ms), self.horizon)
        self.step = model.new_int_var(floor, self.horizon, "step")
        self._objective(tail)
        model.minimize(self.step)

    def end(self, action: Action):
        return self.start[action] + self.length[action.kind][action.stage]

    def _action(self, action: Action) -> None:
        length = self.length[action.kind][action.stage]
        start = self.model.new_int_var(0, self.horizon - length, str(action))
        self.start[action] = start
        self.interval[action] = self.model.new_fixed_size_interval_var(start, length, "")

    def _dependencies(self) -> None:
        p, hop = self.problem, [down(ms, self.per_ms) for ms in self.problem.hop_ms]
        add, start, end = self.model.add, self.start, self.end
        for s in range(p.stages):
            for i in range(p.microbatches):
                if s > 0:
                    add(start[Action(s, F, i)] >= end(Action(s - 1, F, i)) + hop[s - 1])
                add(start[Action(s, I, i)] >= end(Action(s, F, i)))
                if s + 1 < p.stages:
                    add(start[Action(s, I, i)] >= end(Action(s + 1, I, i)) + hop[s])
                add(start[Action(s, W, i)] >= end(Action(s, I, i)))
        for s in range(p.stages):  # interchangeable microbatches: each kind in order
            for kind in KINDS:
                for i in range(1, p.microbatches):
                    add(start[Action(s, kind, i)] >= end(Action(s, kind, i - 1)))

    def _devices(self) -> None:
        p = self.problem
        for d in range(p.devices):
            mine = [a for a in self.interval if p.placement[a.stage] == d]
            self.model.add_no_overlap([self.interval[a] for a in mine])

    def _memory(self) -> None:
        units, p, model = memory_units(self.problem), self.problem, self.model
        if units is None:
            return
        for d in range(p.devices):
            intervals, demands = [], []
            for s in (s for s in range(p.stages) if p.placement[s] == d):
                for i in range(p.microbatches):
                    taken = self.start[Action(s, F, i)]
                    for kind, demand in ((I, units.until_input[s]), (W, units.until_weight[s])):
                        if demand <= 0:
                            continue
                        size = model.new_int_var(0, self.horizon, "")
                        freed = Action(s, kind, i)
                        intervals.append(model.new_interval_var(taken, size, self.end(freed), ""))
                        demands.append(demand)
                        self.spans.append((size, Action(s, F, i), freed))
            if intervals:
                model.add_cumulative(intervals, demands, units.capacity)

    def _cuts(self) -> None:
        """Redundant precedences every order within the limit keeps (room for chunk 1,
        backwards memory forces home: ``pipesim.search.serial.precedences``): the solver
        would find them from the memory constraint only by search."""
        for d in range(self.problem.devices):
            for before, after in precedences(self.problem, d):
                self.model.add(self.start[after] >= self.end(before))

    def _objective(self, tail: Tail | None) -> None:
        p = self.problem
        for s in range(p.stages):
            extra = 0
            if tail is not None:
                extra = tail.longest_ms if tail.after_flush else tail.tail_ms[p.placement[s]]
            for i in range(p.microbatches):
                term = (Action(s, W, i), down(extra, self.per_ms))
                self.model.add(self.step >= self.end(term[0]) + term[1])
                self.step_terms.append(term)

    def hint(self, starts_ms: dict[Action, float]) -> None:
        """Start the solver from a known order's timing (the heuristic's): each action's
        start in ms, rounded down as the durations are (so the timing stays feasible), and
        sorted per stage and kind (the microbatches relabelled as the model orders them)."""
        by_kind: dict[tuple, list[float]] = {}
        for action, ms in starts_ms.items():
            by_kind.setdefault((action.stage, action.kind), []).append(ms)
        ticks: dict[Action, int] = {}
        for (stage, kind), times in by_kind.items():
            for i, ms in enumerate(sorted(times)):
                action = Action(stage, kind, i)
                if action in self.start:
                    ticks[action] = min(down(ms, self.per_ms), self.horizon)
                    self.model.add_hint(self.start[action], ticks[action])
        if len(ticks) < len(self.start):
            return  # a partial order: the solver completes it
        ends = {a: t + self.length[a.kind][a.stage] for a, t in ticks.items()}
        for size, taken, freed in self.spans:  # a complete hint: the solver's first solution
            self.model.add_hint(size, max(ends[freed] - ticks[taken], 0))
        step = max((ends[w] + extra for w, extra in self.step_terms), default=0)
        self.model.add_hint(self.step, min(max(step, self.step.proto.domain[0]), self.horizon))

    def solve(self, time_limit_s: float, workers: int | None = None) -> Solved:
        """Run CP-SAT for at most ``time_limit_s`` seconds on ``workers`` threads (None:
        the CPUs, at most 8)."""
        from ortools.sat.python import cp_model

        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(time_limit_s, 0.0)
        solver.parameters.num_workers = workers or min(8, os.cpu_count() or 1)
        # The solver checks its own limit between steps; a large model's presolve can run
        # past it, so a timer stops the search at the limit too.
        timer = threading.Timer(max(time_limit_s, 0.0), solver.stop_search)
        timer.daemon = True
        timer.start()
        try:
            status = solver.solve(self.model)
        finally:
            timer.cancel()
        found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
        bound = solver.best_objective_bound if found or status == cp_model.UNKNOWN else 0.0
        return Solved(
            orders=self._orders(solver) if found else None,
            model_ms=solver.objective_value / self.per_ms if found else None,
            bound_ms=max(bound, 0.0) / self.per_ms,
            proven=status == cp_model.OPTIMAL,
            status=solver.status_name(status),
            resolution_ms=(len(self.start) + self.problem.stages) / self.per_ms,
        )

    def _orders(self, solver) -> tuple[tuple[Action, ...], ...]:
        """Each device's actions by their solved start (ties, only where an action takes
        no ticks: the one that ends first, then F, I, W; forwards up the stages, input
        backwards down them, as their dependencies run)."""
        p, rank = self.problem, {F: 0, I: 1, W: 2}
        rows: list[list[tuple]] = [[] for _ in range(p.devices)]
        for action, var in self.start.items():
            start = solver.value(var)
            end = start + self.length[action.kind][action.stage]
            stage_key = -action.stage if action.kind == I else action.stage
            key = (start, end, rank[action.kind], stage_key, action.microbatch)
            rows[p.placement[action.stage]].append((key, action))
        return tuple(tuple(a for _, a in sorted(row)) for row in rows)


__all__ = ["ExactModel", "MemoryUnits", "Solved", "memory_units", "ticks_per_ms"]
