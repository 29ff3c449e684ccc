"""The local improvement pass: move W and F slots, re-simulate, keep what is faster.

A move takes one action out of a device's list and puts it back elsewhere on the same
device. The moves tried first are read off the engine's trace of the current schedule:

* an idle gap on a device: the next W after it (whose I already ran) moves into the gap;
* an idle gap: the next F moves into it (the engine says whether memory allows);
* an ``I`` or ``F`` that started only because the W before it ended (the engine records
  what released each row): that W moves behind it, off the critical path; the same for an
  F in front of an I.

Then adjacent swaps where one side is a W or an F, from the end of each list backwards
(the cool-down leaves its bubbles there). Moves that break the device's own order (an F
after its I, an I after its W) are not tried. The pass is a first-improvement hill climb:
the first move the engine finds faster, and within the memory limit, becomes the schedule
to improve, until the budget of candidates is spent or no move helps. A second climb from
the same start also takes the moves that keep the makespan but let the devices finish
earlier in sum: the step that shortens the makespan often needs two moves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np

from pipesim.schedules.ir import Action, Kind, Schedule
from pipesim.sim.trace import KIND_CODE, Cause, Lane, Trace

MOVABLE = (Kind.W, Kind.F)
Move = tuple[int, int, int]  # device, from position, to position (before the move)
Run = Callable[[Schedule], tuple[float | None, Trace | None]]


def swappable(first: Action, second: Action) -> bool:
    """Whether ``second`` may run before ``first`` on their device."""
    if first.kind == second.kind or (first.kind not in MOVABLE and second.kind not in MOVABLE):
        return False
    return not (first.stage == second.stage and first.microbatch == second.microbatch)


def adjacent_swaps(schedule: Schedule) -> Iterator[Move]:
    """Each adjacent swap, latest positions first, devices in turn."""
    lists = schedule.device_actions
    longest = max(len(actions) for actions in lists)
    for back in range(2, longest + 1):
        for device, actions in enumerate(lists):
            at = len(actions) - back
            if at >= 0 and swappable(actions[at], actions[at + 1]):
                yield device, at + 1, at


def traced_moves(schedule: Schedule, trace: Trace) -> Iterator[Move]:
    """Moves that fill the idle gaps the trace shows, or take a W off the critical path."""
    position = [
        {action: at for at, action in enumerate(actions)} for actions in schedule.device_actions
    ]
    rows = [r for r in range(len(trace.start)) if trace.lane[r] == Lane.COMPUTE]
    rows.sort(key=lambda r: (-trace.start[r], trace.device[r]))
    for row in rows:
        device, action = int(trace.device[row]), trace.actions[row]
        at = position[device].get(action)
        if not at:
            continue
        actions = schedule.device_actions[device]
        before = actions[at - 1]
        if trace.cause is not None and trace.cause[row] == Cause.DEVICE:
            if before.kind == Kind.W and action.kind in (Kind.I, Kind.F):
                yield device, at - 1, at
            elif before.kind == Kind.F and action.kind == Kind.I:
                yield device, at - 1, at  # the I is on the critical path, the F can wait
        else:
            later_w = _next_free_w(actions, at, position[device])
            if later_w is not None:
                yield device, later_w, at
            later_f = next(
                (k for k in range(at + 1, len(actions)) if actions[k].kind == Kind.F), None
            )
            if later_f is not None:
                yield device, later_f, at  # an F pulled into the gap, if memory allows


def _next_free_w(actions: tuple[Action, ...], at: int, position: dict) -> int | None:
    """The first W after position ``at`` whose I runs before ``at``."""
    for k in range(at + 1, len(actions)):
        action = actions[k]
        if action.kind == Kind.W:
            own_i = position.get(Action(action.stage, Kind.I, action.microbatch), len(actions))
            if own_i < at:
                return k
    return None


def moved(schedule: Schedule, move: Move) -> Schedule:
    device, source, target = move
    actions = list(schedule.device_actions[device])
    action = actions.pop(source)
    actions.insert(target, action)
    lists = list(schedule.device_actions)
    lists[device] = tuple(actions)
    return replace(schedule, device_actions=tuple(lists))


def improve(schedule: Schedule, budget: int, run: Run, settling: bool = False) -> Schedule:
    """Hill-climb from ``schedule`` with at most ``budget`` calls of ``run``, which returns a
    candidate's makespan if it fits the memory limit (else None) and its trace. Returns the
    fastest schedule found. ``settling``: a move that keeps the makespan is also taken when
    it lets the devices finish earlier in sum (then the input backwards, the critical path,
    end earlier in sum), as the step that shortens the makespan often needs two moves."""
    best_ms, trace = run(schedule)
    budget -= 1
    current = schedule
    score = None if best_ms is None or trace is None else settle(best_ms, trace)
    while budget > 0 and score is not None:
        moved_on = False
        tried: set[Move] = set()
        for move in _moves(current, trace):
            if budget <= 0:
                break
            if move in tried or move[1] == move[2]:
                continue
            tried.add(move)
            candidate = moved(current, move)
            budget -= 1
            found_ms, found_trace = run(candidate)
            if found_ms is None or found_trace is None:
                continue
            found = settle(found_ms, found_trace)
            if better(found if settling else found[:1], score if settling else score[:1]):
                current, score, trace, moved_on = candidate, found, found_trace, True
                break
        if not moved_on:
            break
    return current


def settle(makespan_ms: float, trace: Trace) -> tuple[float, float, float]:
    """``(makespan, sum of the devices' finish times, sum of the I ends)``."""
    compute = trace.lane == Lane.COMPUTE
    finish = np.zeros(trace.devices)
    np.maximum.at(finish, trace.device[compute], trace.end[compute])
    inputs = compute & (trace.kind == KIND_CODE[Kind.I])
    return makespan_ms, float(finish.sum()), float(trace.end[inputs].sum())


def better(found: tuple[float, ...], best: tuple[float, ...]) -> bool:
    """Faster, or as fast and settled earlier (each by more than rounding)."""
    for new, old in zip(found, best, strict=True):
        if new < old - 1e-9 * max(abs(old), 1.0):
            return True
        if new > old + 1e-9 * max(abs(old), 1.0):
            return False
    return False


def _moves(schedule: Schedule, trace: Trace) -> Iterator[Move]:
    yield from traced_moves(schedule, trace)
    yield from adjacent_swaps(schedule)
