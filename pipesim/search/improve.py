"""The local improvement pass: move W and F slots, re-simulate, keep what is faster.

A neighbour of a schedule swaps two adjacent actions on one device where one of them is a
W or an F (a W moved into a gap, or out of the way of an I; an F pulled earlier into the
warm-up or pushed behind an I). Swaps that would break the device's own order (an F after
its I, an I after its W, one stage's microbatches out of turn) are not tried. The pass is
a first-improvement hill climb: the first neighbour the engine finds faster (and within
the memory limit) becomes the schedule to improve, until the budget of candidates is spent
or no neighbour helps. Neighbours are tried from the end of each device's list backwards,
where the cool-down leaves its bubbles, taking the devices in turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from pipesim.schedules.ir import Action, Kind, Schedule

MOVABLE = (Kind.W, Kind.F)


def swappable(first: Action, second: Action) -> bool:
    """Whether ``second`` may run before ``first`` on their device."""
    if first.kind == second.kind or (first.kind not in MOVABLE and second.kind not in MOVABLE):
        return False
    return not (first.stage == second.stage and first.microbatch == second.microbatch)


def neighbours(schedule: Schedule) -> Iterator[tuple[int, int]]:
    """(device, position) of each adjacent swap, latest positions first, devices in turn."""
    lists = schedule.device_actions
    longest = max(len(actions) for actions in lists)
    for back in range(2, longest + 1):
        for device, actions in enumerate(lists):
            at = len(actions) - back
            if at >= 0 and swappable(actions[at], actions[at + 1]):
                yield device, at


def swapped(schedule: Schedule, device: int, at: int) -> Schedule:
    actions = list(schedule.device_actions[device])
    actions[at], actions[at + 1] = actions[at + 1], actions[at]
    lists = list(schedule.device_actions)
    lists[device] = tuple(actions)
    return replace(schedule, device_actions=tuple(lists))


def improve(
    schedule: Schedule, makespan_ms: float, budget: int, run: Callable[[Schedule], float | None]
) -> Schedule:
    """Hill-climb from ``schedule`` (its makespan ``makespan_ms``) with at most ``budget``
    calls of ``run``, which returns a candidate's makespan if it fits the memory limit (None
    if it does not, or cannot run). Returns the fastest schedule found."""
    current, best_ms = schedule, makespan_ms
    while budget > 0:
        moved = False
        for device, at in neighbours(current):
            if budget <= 0:
                break
            candidate = swapped(current, device, at)
            budget -= 1
            found_ms = run(candidate)
            if found_ms is not None and found_ms < best_ms * (1 - 1e-9):
                current, best_ms, moved = candidate, found_ms, True
                break
        if not moved:
            break
    return current
