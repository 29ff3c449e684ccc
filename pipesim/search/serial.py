"""Serial round trips: one device's forwards paced by its memory and by its own work.

``pipesim.search.round_trips`` floors each forward start of a stage by the round trips of
the microbatches before it, as if the device could run their input backwards and weight
passes all at once, and as if the other stages of the same device held nothing. Under a
tight limit both matter: on a V, a microbatch's chunk-0 forward must wait until the one
before it has left enough room for its whole round trip, chunk 1 included; and the bytes
come back only through backward and weight passes the device runs one at a time, between
the forwards it also runs.

The walk goes over the microbatches in order and, for each, over the stages up the
pipeline and back down, all devices together (``u`` below, ``v`` a deeper stage of the
same device), keeping floors (earliest possible times) of every forward start,
input-backward end and weight-pass end.
Each stage runs its forwards, input backwards and weight passes in microbatch order,
which loses no step end (``pipesim.search.exact_model`` shows the relabelling), and:

* **chains**: ``F(u,j)`` after ``F(u,j-1)``, after the forward chain from the device's
  stage before ``u``, and after ``F(u-1,j)`` (wherever it runs) and its hop; ``I(u,j)``
  ends a round trip after ``F(u,j)`` starts, a hop and an ``I`` after ``I(u+1,j)``, and
  after ``I(u,j-1)``; ``W`` after its ``I`` and the previous ``W``.
* **room for chunk 1** (a deeper stage ``v``): when ``F(v,i)`` starts, the device holds
  what microbatch ``i`` holds there, and ``taken(u)`` for every later microbatch whose
  ``F(u)`` already started (its ``I(u)`` needs ``F(v)`` first). At most ``q`` of those
  fit, so ``F(u, i+q+1)`` starts after ``F(v,i)`` ends.
* **memory**: when ``F(u,j)`` starts, the earlier microbatches hold their activations
  until the floors of their ``I`` ends and the weight-gradient part until their ``W``
  ends, at ``u``, at the device's earlier stages, and at the deeper ones whose forward is
  known to have started (above); counting as ended only the floors already passed
  overstates what is held, so the first time it fits is a floor.
* **one device, one action at a time**: what must have ended on the device before
  ``F(u,j)`` starts, each no earlier than its own floor, runs back to back, so ``F(u,j)``
  starts no earlier than ``tau`` plus the work of those whose floor is ``tau`` or later,
  for every ``tau`` (the one-machine bound). That set: the forwards before it, and the
  backwards of the microbatches that memory forces home. A microbatch with such an action
  pending holds at least ``r`` bytes (the least a pending ``I`` or ``W`` keeps), so at
  most ``K = room / r`` can; a pending action makes every later microbatch's of the same
  stage and kind pending too, so all but the last ``K`` have ended theirs.

Then the step ends no earlier than the last input backward of each stage plus its own
``W`` or the chain below it, the last weight pass, each forward floor plus the work of the
microbatches not yet started there, and the one-machine bound on the last microbatches'
actions. Only the last ``WINDOW`` microbatches enter a one-machine bound (fewer actions
only weaken it), which keeps the walk linear in ``m``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pipesim.schedules.ir import Action, F, I, W
from pipesim.search.fits import counts_memory, how_many, room_bytes, whole
from pipesim.search.greedy import Problem

WINDOW = 6  # microbatches whose actions enter one one-machine bound


@dataclass(slots=True)
class _Stage:
    """One stage of the device: its durations (ms), bytes, and the floors found so far."""

    stage: int
    forward_ms: float
    input_ms: float
    weight_ms: float
    trip_ms: float
    taken: float
    grad: float
    budget: float  # room left beside one microbatch in flight here (and earlier stages)
    starts: list[float] = field(default_factory=list)  # F starts
    inputs: list[float] = field(default_factory=list)  # I ends
    weights: list[float] = field(default_factory=list)  # W ends


def serial_ms(problem: Problem, chain) -> list[float]:
    """The bound of the walk (module docstring) for each device (0 for one without
    stages); ``chain`` holds the durations and chains as ``pipesim.search.bound`` counts
    them. The devices are walked together, so that a forward waits for the floor of the
    one before it on another device, and an input backward for the one after it."""
    m, paced = problem.microbatches, counts_memory(problem)
    devices = [_levels(problem, chain, d) for d in range(problem.devices)]
    where = [(d, k) for d, levels in enumerate(devices) for k in range(len(levels))]
    where.sort(key=lambda at: devices[at[0]][at[1]].stage)
    ahead = [_ahead(levels, m) if paced else None for levels in devices]
    hop = problem.hop_ms
    for j in range(m):
        arrives = 0.0  # the floor of F(s,j)'s input: the forward before it, and its hop
        for s, (d, k) in enumerate(where):
            level = devices[d][k]
            start = max(arrives, _start(devices[d], k, j, chain, ahead[d], paced))
            level.starts.append(start)
            arrives = start + level.forward_ms + hop[s]
        after = None  # the floor of I(s+1,j)'s end
        for s, (d, k) in reversed(list(enumerate(where))):
            level = devices[d][k]
            end = level.starts[j] + level.trip_ms
            if after is not None:
                end = max(end, after + hop[s] + level.input_ms)
            _ended(level, j, end)
            after = level.inputs[j]
    return [_end_floor(levels, m, chain) if levels else 0.0 for levels in devices]


def _ended(level: _Stage, j: int, input_end: float) -> None:
    """Record microbatch j's floors at ``level``: its I ends no earlier than
    ``input_end`` and the previous one's end plus I; its W after both."""
    if j:
        input_end = max(input_end, level.inputs[j - 1] + level.input_ms)
    weight = input_end + level.weight_ms
    if j:
        weight = max(weight, level.weights[j - 1] + level.weight_ms)
    level.inputs.append(input_end)
    level.weights.append(weight)


def _levels(problem: Problem, chain, device: int) -> list[_Stage]:
    mine = [s for s in range(problem.stages) if problem.placement[s] == device]
    room, held, levels = room_bytes(problem), 0.0, []
    for s in mine:
        taken = max(problem.taken_bytes[s], 0.0)
        held += taken
        grad = min(max(problem.weight_grad_bytes[s], 0.0), taken)
        level = _Stage(
            s,
            chain.forward[s],
            chain.input[s],
            chain.weight[s],
            chain.trip[s],
            taken,
            grad,
            room - held,
        )
        levels.append(level)
    return levels


def _ahead(levels: list[_Stage], microbatches: int) -> list[list[int]]:
    """``ahead[k][l]`` (l > k): how many later microbatches can have started ``F`` at
    level k when ``F`` at level l starts (``q``; ``microbatches`` where nothing binds)."""
    found = [[microbatches] * len(levels) for _ in levels]
    for k, lower in enumerate(levels):
        for deeper in range(k + 1, len(levels)):
            budget = levels[deeper].budget
            found[k][deeper] = how_many(lower.taken, budget, microbatches) if budget >= 0 else 0
    return found


def _start(levels, k: int, j: int, chain, ahead, paced: bool) -> float:
    """The floor of ``F`` at level k of microbatch j."""
    level = levels[k]
    start = chain.head[level.stage] if j == 0 else level.starts[j - 1] + level.forward_ms
    if k:
        lower = levels[k - 1]
        start = max(start, lower.starts[j] + chain.head[level.stage] - chain.head[lower.stage])
    if not paced:
        return max(start, _one_machine(_forced(levels, k, j, None, math.inf)))
    known = [j - 1] * (k + 1)  # per level: the last earlier microbatch known started
    for deeper in range(k + 1, len(levels)):
        before = j - ahead[k][deeper] - 1
        known.append(before)
        if before >= 0:
            start = max(start, levels[deeper].starts[before] + levels[deeper].forward_ms)
    start = max(start, _first_fit(levels, known, level.budget, start))
    return max(start, _one_machine(_forced(levels, k, j, known, level.budget)))


def _first_fit(levels, known: list[int], budget: float, time: float) -> float:
    """The first time from ``time`` on at which the earlier microbatches (up to
    ``known[l]`` at level l) hold at most ``budget`` bytes by the floors."""
    if budget < 0:
        return time  # below one microbatch: nothing to prove here
    events = []
    for level, last in zip(levels, known, strict=True):
        i = last
        while i >= 0 and level.weights[i] > time:
            events.append((level.inputs[i], level.taken - level.grad))
            events.append((level.weights[i], level.grad))
            i -= 1
    events = [(end, size) for end, size in events if end > time]
    held = sum(size for _, size in events)
    for end, size in sorted(events):
        if held <= budget * (1 + 1e-12):
            break
        time, held = end, held - size
    return time


def _forced(levels, k: int, j: int, known: list[int] | None, budget: float):
    """``(floor of start, duration)`` of actions that end before ``F`` at level k of
    microbatch j starts: the forwards before it, and the backwards memory forces home
    (``known``: the last earlier microbatch per level whose forward started; None: no
    memory argument), over the last ``WINDOW`` microbatches."""
    actions = [(lower.starts[j], lower.forward_ms) for lower in levels[:k]]
    memory = known is not None and budget != math.inf
    known = known if known is not None else [j - 1] * (k + 1)
    for at, last in enumerate(known):
        level = levels[at]
        for i in range(max(0, last - WINDOW + 1), last + 1):
            actions.append((level.starts[i], level.forward_ms))
        if not memory:
            continue
        # a pending I here keeps this level's bytes and those of the levels before it
        # (their I comes after); a pending W its weight-gradient part
        held = sum(lv.taken for lv in levels[: at + 1])
        for size, ends, duration in (
            (held, level.inputs, level.input_ms),
            (level.grad, level.weights, level.weight_ms),
        ):
            if size <= 0:
                continue
            home = last - whole(max(budget, 0.0) / size)
            for i in range(max(0, home - WINDOW + 1), home + 1):
                actions.append((ends[i] - duration, duration))
    return actions


def _one_machine(actions: list[tuple[float, float]]) -> float:
    """The earliest all of ``actions`` can have ended on one device, each started no
    earlier than its floor: the largest ``tau + work released at tau or later``."""
    best, work = 0.0, 0.0
    for release, duration in sorted(actions, reverse=True):
        work += duration
        best = max(best, release + work)
    return best


def _end_floor(levels: list[_Stage], m: int, chain) -> float:
    """The step's end: the last ends with what must follow them, each forward floor plus
    the work not yet started, and the one-machine bound on the last microbatches."""
    found = 0.0
    for k, level in enumerate(levels):
        after = max(chain.weight[level.stage], chain.below[level.stage])
        found = max(found, level.inputs[-1] + after, level.weights[-1])
        each = sum(lv.forward_ms for lv in levels[k:])
        each += sum(lv.input_ms + lv.weight_ms for lv in levels)
        for j in range(max(0, m - 2 * WINDOW), m):
            found = max(found, level.starts[j] + (m - j) * each)
    actions = []
    for level in levels:
        for i in range(max(0, m - WINDOW), m):
            actions.append((level.starts[i], level.forward_ms))
            actions.append((level.inputs[i] - level.input_ms, level.input_ms))
            actions.append((level.weights[i] - level.weight_ms, level.weight_ms))
    return max(found, _one_machine(actions))


def precedences(problem: Problem, device: int) -> list[tuple[Action, Action]]:
    """Pairs ``(before, after)`` of the device's actions where ``before`` ends before
    ``after`` starts in every order that keeps each stage's kinds in microbatch order:
    room for chunk 1, and the backwards memory forces home (module docstring). Cuts for
    the exact mode's model, which keeps that order too; none where memory does not count."""
    if not counts_memory(problem):
        return []
    room, m = room_bytes(problem), problem.microbatches
    mine = [s for s in range(problem.stages) if problem.placement[s] == device]
    taken = [max(problem.taken_bytes[s], 0.0) for s in mine]
    grad = [
        min(max(problem.weight_grad_bytes[s], 0.0), t) for s, t in zip(mine, taken, strict=True)
    ]
    budget = [room - sum(taken[: k + 1]) for k in range(len(mine))]
    pairs = []
    for k, stage in enumerate(mine):
        if budget[k] < 0:
            continue
        ahead = [
            how_many(taken[k], budget[d], m) if budget[d] >= 0 else 0
            for d in range(k + 1, len(mine))
        ]
        for j in range(m):
            after = Action(stage, F, j)
            known = [j - 1] * (k + 1) + [j - q - 1 for q in ahead]
            for d in range(k + 1, len(mine)):
                if known[d] >= 0:
                    pairs.append((Action(mine[d], F, known[d]), after))
            for at, last in enumerate(known):
                held = sum(taken[: at + 1])  # a pending I keeps the levels before it too
                for size, kind in ((held, I), (grad[at], W)):
                    home = last - whole(budget[k] / size) if size > 0 else -1
                    if home >= 0:
                        pairs.append((Action(mine[at], kind, home), after))
    return pairs


__all__ = ["WINDOW", "precedences", "serial_ms"]
