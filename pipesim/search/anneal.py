"""Annealing over orders, timed by a small evaluator of the split passes.

The climbs of the search (``pipesim.search.improve``, ``pipesim.search.insertion``) run
every candidate on the engine, about 1-2 ms for a few hundred passes, and take only moves
that help. Under a tight memory limit the faster orders of a V lie behind moves that are
slower at first, and a climb stops at the first order no single move improves. This pass
goes further, for the small and mid-sized cases where it pays:

* **A timing of its own** (``OrderModel``): each device runs its list in order; a pass
  starts when the device is free and its inputs have arrived (the forward of the stage
  before plus its hop, the input backward of the stage after plus its hop back, its own
  forward or input backward on the device). Those are the engine's rules for the split
  passes on links that only delay (latency and a message's own transfer time); it takes
  about 0.3 us a pass in plain Python. An order that cannot finish (a pass waits for one
  behind it on its device) has no makespan. The peak of a device's activation bytes
  depends only on its order, since its passes run one at a time: a forward takes its
  stage's bytes, an input backward gives back all but the weight-gradient part, a weight
  pass the rest.
* **Simulated annealing** on that timing: a move takes one pass of one device up to
  ``REACH`` places along its list, stopping before a pass it may not cross (its own
  stage's other microbatches, its own microbatch's passes at its stage or, in the V's
  turn, the next stage's), and with probability ``REPEATED`` makes the same move for every
  later microbatch (a steady state's rounds changed at once, as
  ``insertion.repeated``). A move that is no slower is kept; a slower one by ``d`` ms with
  probability ``exp(-d / T)``, the temperature ``T`` falling linearly from ``HEAT`` times
  the mean pass to nothing. A move that breaks the memory limit or the order is undone.
  A moved order is timed again only from the first pass that moved (``retimed``): every
  pass that started before it keeps its time.

The random choices come from a generator seeded with a constant, so a search gives the
same order every time. Where links queue messages (bandwidth on a shared channel, a
sender kept busy) or the step has an end-of-step tail, the timing here is a guide only:
the best order it finds goes to the engine like every candidate, and only the engine's
makespan and peak count. On V-Min's memory (4 devices, 8 microbatches, I = 1.2 F,
W = 0.6 F, 0.1 ms links) it takes the search's order from 35.7 to 33.6 ms, what the exact
mode finds in 200 s.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from pipesim.schedules.ir import Action, Kind, Schedule, single_chain
from pipesim.search.greedy import Problem

REACH = 6  # places a pass may move at once
REPEATED = 0.15  # the share of moves made for every later microbatch too
HEAT = 0.1  # the starting temperature, as a share of the mean pass (ms)
SEED = 20_231_219
MOST_ITERATIONS = 200_000  # moves of one annealing at most
TOLERANCE = 1e-9  # relative: what counts as faster, and the limit's slack (the search's)

Pass = tuple[int, int, int]  # stage, kind (0: F, 1: I, 2: W), microbatch
KIND = {Kind.F: 0, Kind.I: 1, Kind.W: 2}
KINDS = (Kind.F, Kind.I, Kind.W)


@dataclass(slots=True)
class Timing:
    """A timed order: each stage-microbatch cell's forward and input-backward end (-1:
    not run), each device's pass starts in list order, and each device's clock (ms)."""

    forward: list[float]
    backward: list[float]
    starts: list[list[float]]
    clocks: list[float]

    @property
    def makespan_ms(self) -> float:
        return max(self.clocks, default=0.0)


class OrderModel:
    """The timing and the memory of orders of split passes for one ``Problem`` (module
    docstring); ``overhead_ms`` is added to every pass."""

    def __init__(self, problem: Problem, overhead_ms: float = 0.0) -> None:
        self.problem = problem
        self.stages, self.microbatches = problem.stages, problem.microbatches
        self.duration = [
            tuple(ms + overhead_ms for ms in problem.forward_ms),
            tuple(ms + overhead_ms for ms in problem.input_ms),
            tuple(ms + overhead_ms for ms in problem.weight_ms),
        ]
        self.hop = problem.hop_ms
        self.change = [
            tuple(problem.taken_bytes),
            tuple(
                g - t for t, g in zip(problem.taken_bytes, problem.weight_grad_bytes, strict=True)
            ),
            tuple(-g for g in problem.weight_grad_bytes),
        ]

    def makespan(
        self, orders: Sequence[Sequence[Pass]], cutoff_ms: float = math.inf
    ) -> float | None:
        """When the last pass ends, or None where the orders cannot all run (or a pass
        would end after ``cutoff_ms``)."""
        timing = self.timing(orders, cutoff_ms)
        return None if timing is None else timing.makespan_ms

    def timing(
        self, orders: Sequence[Sequence[Pass]], cutoff_ms: float = math.inf
    ) -> Timing | None:
        """Every pass's start, run from the beginning (``makespan``)."""
        cells = self.stages * self.microbatches
        timing = Timing([-1.0] * cells, [-1.0] * cells, [[] for _ in orders], [0.0] * len(orders))
        return self._run(orders, timing, cutoff_ms)

    def retimed(
        self,
        orders: Sequence[Sequence[Pass]],
        before: Timing,
        device: int,
        first: int,
        cutoff_ms: float = math.inf,
    ) -> Timing | None:
        """The timing of ``orders``, which differ from the orders ``before`` timed only on
        ``device`` from position ``first`` on. A pass that started before the first
        changed pass did depends only on passes that started earlier still, none of them
        changed: those keep their times, and the run goes on from there."""
        cut = before.starts[device][first] if first < len(before.starts[device]) else math.inf
        forward, backward, m = before.forward[:], before.backward[:], self.microbatches
        starts, clocks = [], []
        for at, order in enumerate(orders):
            kept = bisect_left(before.starts[at], cut)
            if at == device:
                kept = min(kept, first)
            starts.append(before.starts[at][:kept])
            clock = 0.0
            if kept:
                stage, kind, _ = order[kept - 1]
                clock = starts[at][-1] + self.duration[kind][stage]
            clocks.append(clock)
            for stage, kind, microbatch in order[kept:]:
                if kind == 0:
                    forward[stage * m + microbatch] = -1.0
                elif kind == 1:
                    backward[stage * m + microbatch] = -1.0
        return self._run(orders, Timing(forward, backward, starts, clocks), cutoff_ms)

    def _run(self, orders, timing: Timing, cutoff_ms: float) -> Timing | None:
        """Go on with ``timing`` (its starts: the passes already run) until every pass has
        run; None where the orders stall or a pass ends after ``cutoff_ms``."""
        m, last, hop = self.microbatches, self.stages - 1, self.hop
        forward_ms, input_ms, weight_ms = self.duration
        forward, backward, clocks = timing.forward, timing.backward, timing.clocks
        left = sum(len(o) - len(b) for o, b in zip(orders, timing.starts, strict=True))
        while left:
            moved = False
            for device, order in enumerate(orders):
                begun = timing.starts[device]
                began = at = len(begun)
                clock, size = clocks[device], len(order)
                while at < size:
                    stage, kind, microbatch = order[at]
                    cell = stage * m + microbatch
                    if kind == 0:  # after the previous stage's forward and its hop
                        ready = forward[cell - m] + hop[stage - 1] if stage else 0.0
                        if stage and forward[cell - m] < 0:
                            break
                        clock = ready if ready > clock else clock
                        begun.append(clock)
                        clock += forward_ms[stage]
                        forward[cell] = clock
                    elif kind == 1:  # after its forward and the next stage's I, hop back
                        ready = forward[cell]
                        if ready < 0 or stage < last and backward[cell + m] < 0:
                            break
                        if stage < last and backward[cell + m] + hop[stage] > ready:
                            ready = backward[cell + m] + hop[stage]
                        clock = ready if ready > clock else clock
                        begun.append(clock)
                        clock += input_ms[stage]
                        backward[cell] = clock
                    else:  # after its own I
                        ready = backward[cell]
                        if ready < 0:
                            break
                        clock = ready if ready > clock else clock
                        begun.append(clock)
                        clock += weight_ms[stage]
                    at += 1
                if clock > cutoff_ms:
                    return None
                if at != began:
                    left -= at - began
                    clocks[device], moved = clock, True
            if not moved:
                return None
        return timing

    def peak(self, order: Sequence[Pass]) -> float:
        """The most activation bytes the device of ``order`` holds."""
        held = most = 0.0
        for stage, kind, _ in order:
            held += self.change[kind][stage]
            most = max(most, held)
        return most


def passes_of(schedule: Schedule) -> list[list[Pass]] | None:
    """The schedule's lists as passes, or None where it has other actions (B, groups)."""
    orders = []
    for actions in schedule.device_actions:
        if any(action.kind not in KIND for action in actions):
            return None
        orders.append([(a.stage, KIND[a.kind], a.microbatch) for a in actions])
    return orders


def actions_of(orders: Sequence[Sequence[Pass]]) -> tuple[tuple[Action, ...], ...]:
    return tuple(tuple(Action(s, KINDS[k], i) for s, k, i in order) for order in orders)


def blocked(step: Pass, other: Pass) -> bool:
    """Whether ``step`` may not pass ``other`` on their device (``insertion.blocks``)."""
    if step[0] == other[0]:
        return step[1] == other[1] or step[2] == other[2]
    return abs(step[0] - other[0]) == 1 and step[2] == other[2] and step[1] == other[1] != 2


def propose(orders: list[list[Pass]], rng: random.Random) -> tuple[int, list[Pass]] | None:
    """A device and its list after one random move (module docstring), or None."""
    device = rng.randrange(len(orders))
    order = orders[device]
    if len(order) < 2:
        return None
    at = rng.randrange(len(order))
    step, direction, to = order[at], rng.choice((-1, 1)), at
    for _ in range(rng.randint(1, REACH)):
        nxt = to + direction
        if nxt < 0 or nxt >= len(order) or blocked(step, order[nxt]):
            break
        to = nxt
    if to == at:
        return None
    if rng.random() >= REPEATED:
        changed = order[:at] + order[at + 1 :]
        changed.insert(to, step)
        return device, changed
    return device, _repeated(order, step, order[to], to > at)


def _repeated(order: list[Pass], step: Pass, beside: Pass, after: bool) -> list[Pass]:
    """``step`` next to ``beside``, and the same for every later microbatch of both."""
    changed, present, r = list(order), set(order), 0
    while True:
        mover = (step[0], step[1], step[2] + r)
        anchor = (beside[0], beside[1], beside[2] + r)
        if mover not in present or anchor not in present:
            return changed
        changed.remove(mover)
        changed.insert(changed.index(anchor) + after, mover)
        r += 1


def anneal(
    orders: Sequence[Sequence[Pass]],
    model: OrderModel,
    room_bytes: float,
    iterations: int,
    floor_ms: float = 0.0,
) -> tuple[float, list[list[Pass]]] | None:
    """The fastest orders the annealing finds from ``orders`` in ``iterations`` moves, by
    ``model``'s timing, each device within ``room_bytes``; it stops early at ``floor_ms``
    (a lower bound). None where ``orders`` cannot run."""
    current = [list(order) for order in orders]
    timing = model.timing(current)
    if timing is None:
        return None
    now = timing.makespan_ms
    rng = random.Random(SEED)
    best, best_ms = [list(order) for order in current], now
    heat = HEAT * _mean_pass(model)
    for step in range(iterations):
        if best_ms <= floor_ms:
            break
        proposed = propose(current, rng)
        if proposed is None:
            continue
        device, changed = proposed
        if model.peak(changed) > room_bytes:
            continue
        # the most a move may lose and still be taken: d ms with probability exp(-d / T)
        temperature = heat * (1 - step / iterations)
        worst = now - temperature * math.log(1.0 - rng.random()) if temperature > 0 else now
        kept, current[device] = current[device], changed
        first = next(at for at, (a, b) in enumerate(zip(kept, changed, strict=True)) if a != b)
        retimed = model.retimed(current, timing, device, first, worst * (1 + 1e-12))
        if retimed is not None:
            timing, found = retimed, retimed.makespan_ms
            now = found
            if found < best_ms * (1 - 1e-12):
                best, best_ms = [list(order) for order in current], found
        else:
            current[device] = kept
    return best_ms, best


def anneal_phase(search, problem: Problem, name: str, floor_ms: float, passes: int) -> None:
    """Anneal from the best order of a search (``pipesim.search.auto``; ``search`` gives
    its ``best``, ``costs``, ``limit`` and ``offer``) for about ``passes`` passes timed,
    down to the bound ``floor_ms``, and offer the fastest order found to the engine
    when it is faster by this module's timing. ``name``: the schedule's."""
    best = search.best
    orders = passes_of(best.schedule)
    if orders is None or best.makespan_ms <= floor_ms:
        return
    iterations = min(MOST_ITERATIONS, passes // max(sum(len(o) for o in orders), 1))
    room = search.limit * (1 + TOLERANCE) + TOLERANCE
    model = OrderModel(problem, search.costs.overhead_ms)
    found = anneal(orders, model, room, iterations, floor_ms)
    if found is None or found[0] >= best.makespan_ms * (1 - TOLERANCE):
        return
    chain = single_chain(problem.stages, problem.microbatches)
    schedule = Schedule(actions_of(found[1]), problem.placement, chain, name)
    search.offer(schedule, f"annealed from {best.source}")


def _mean_pass(model: OrderModel) -> float:
    durations = [ms for kind in model.duration for ms in kind]
    return sum(durations) / max(len(durations), 1)


__all__ = [
    "OrderModel",
    "actions_of",
    "anneal",
    "anneal_phase",
    "blocked",
    "passes_of",
    "propose",
]
