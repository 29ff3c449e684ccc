"""What fits in a device's memory limit, counted the way the lower bound needs it.

The bound asks questions of one shape: how many actions of a few kinds, each holding some
bytes, can a device keep at once within the limit, and how much work can they be at
most? Every answer here errs on the large side (a count rounded up when it is within
rounding of a whole number; more than two kinds answered by the fractional relaxation),
since a larger answer only lowers the bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pipesim.search.greedy import Problem

# The search keeps a peak within limit x (1 + 1e-9) + 1e-9 bytes; the bound allows as much.
ROOM = 1e-9


def room_bytes(problem: Problem) -> float:
    """The bytes a device may hold, as the search's own check allows."""
    return problem.limit_bytes * (1 + ROOM) + ROOM


def counts_memory(problem: Problem) -> bool:
    """Whether the memory arguments apply: no stage frees bytes it never took."""
    return all(a >= 0 for a in problem.taken_bytes) and all(
        g >= 0 for g in problem.weight_grad_bytes
    )


def whole(x: float) -> int:
    """``floor(x)``, or the whole number just above when x is within rounding below it."""
    if math.isinf(x):
        return 2**62
    return math.floor(x + 1e-9 * max(1.0, abs(x)))


def how_many(size: float, room: float, most: int) -> int:
    """How many of ``size`` bytes fit in ``room`` (at most ``most``; all of them if free)."""
    if size <= 0:
        return most
    return max(0, min(most, whole(room / size)))


def held_by_one(problem: Problem, stage: int) -> float:
    """What a microbatch in flight at ``stage`` holds on its device: the activation of
    ``stage`` and of every earlier stage there (it is still in flight at those too)."""
    device = problem.placement[stage]
    return sum(problem.taken_bytes[t] for t in range(stage + 1) if problem.placement[t] == device)


def in_flight(problem: Problem, stage: int) -> int:
    """How many microbatches can be in flight at ``stage`` at once (1 to m)."""
    m, held = problem.microbatches, held_by_one(problem, stage)
    if not counts_memory(problem) or held <= 0:
        return m
    return max(1, min(m, whole(room_bytes(problem) / held)))


def most_ms(
    kinds: Sequence[tuple[float, float]],
    room: float,
    each: int,
    total: int | None = None,
    nested: bool = False,
) -> float:
    """The most time whole counts of actions of ``kinds`` (``(duration ms, bytes held)``
    each) can take while their bytes fit in ``room``: each count at most ``each``, all of
    them together at most ``total`` (None: no such cap), and with ``nested`` the second at
    most the first. Exact for one or two kinds; more take the fractional answer with only
    ``each`` kept, never below the whole one."""
    total = sum(each for _ in kinds) if total is None else total
    if len(kinds) > 2:
        return _fractional(kinds, room, each)
    if not kinds:
        return 0.0
    (first_ms, first_size), *rest = kinds
    if not rest:
        return first_ms * how_many(first_size, room, min(each, total))
    second_ms, second_size = rest[0]
    best = 0.0
    for first in range(how_many(first_size, room, min(each, total)) + 1):
        cap = min(each, total - first, first if nested else each)
        second = how_many(second_size, room - first * first_size, cap)
        best = max(best, first * first_ms + second * second_ms)
    return best


def _fractional(kinds: Sequence[tuple[float, float]], room: float, each: int) -> float:
    """The fractional knapsack: the most time per byte first, each kind at most ``each``."""
    total, room = 0.0, max(room, 0.0)
    for duration, size in sorted(kinds, key=lambda k: -math.inf if k[1] <= 0 else -k[0] / k[1]):
        count = each if size <= 0 else min(each, room / size)
        total += count * duration
        room -= count * max(size, 0.0)
    return total


__all__ = [
    "ROOM",
    "counts_memory",
    "held_by_one",
    "how_many",
    "in_flight",
    "most_ms",
    "room_bytes",
    "whole",
]
