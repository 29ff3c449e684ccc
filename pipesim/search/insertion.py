"""The insertion climb: any pass moved a few places along its device's list.

The improvement pass (``pipesim.search.improve``) tries the moves the trace suggests and
adjacent swaps. Under a tight memory limit that is often not enough: the faster order
runs a forward two or three places earlier (before an input backward it used to wait
for), or a W several places later, and every step in between is slower or no faster.
This climb widens the neighbourhood: each pass (F, I or W) may move up to ``reach``
places earlier or later on its device, as long as it passes no pass of its own stage
and kind (each stage keeps its microbatch order), none of its own microbatch on its
stage (an F stays before its I, an I before its W) and, where the device holds the next
stage too (the V's turn), not its own microbatch's F or I there.

It is a first-improvement climb that also crosses plateaus, as the improvement pass's
second climb does: a move that keeps the makespan is taken when it lowers a second
measure, by default ``improve.settle``'s (the devices' finish times in sum, then the input
backwards' ends in sum); ``end_sum`` (every pass's end in sum) leads elsewhere on the
plateau, and a search may climb with both. After a move is taken, the scan
goes on from that move rather than from the first device's first pass, so a long list
of moves that no longer help is not tried again before the new ones. It stops when no
move helps or after ``budget`` candidates; nothing is random.

A repeated move (``repeated``) makes the same move for every later microbatch: the pass
of microbatch ``j + r`` goes next to the same neighbour of microbatch ``j + r``. A faster
steady state needs every round changed at once, which no single move gives (each alone
is slower while its neighbours' rounds stay as they were).

Larger cases cannot afford that many candidates (each simulation costs more, and there
are more moves). Their climb chases instead (``chased``): once a move is taken, the same
move for the next microbatch is tried at once, then the one after, while each helps. On a
plateau the plain scan takes such a run of moves too, but one at a time, each after
trying every other move of its pass's device again; chased, a run costs one candidate a
step. With moves of one place (adjacent swaps: more candidates go to the chases than to
longer moves), on V-Min's memory (6 devices, 12 microbatches, I = 1.2 F, W = 0.6 F,
0.1 ms links) 1,500 candidates take the search's order from 55.3 to 53.3 ms.

On V-Min's memory (4 devices, 4 microbatches, I = 1.2 F, W = 0.6 F) the climb takes the
search's order from 18.2 to 18.0 ms, the optimum the exact mode proves; at 8 microbatches
the plain moves take it from 33.1 to 32.7 ms and the repeated ones on to 31.7 ms (the
exact mode finds 31.2 in 20 s).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pipesim.schedules.ir import Action, Kind, Schedule
from pipesim.search.improve import Move, Run, better, moved, settle
from pipesim.sim.trace import Lane, Trace

Score = Callable[[float, Trace], tuple[float, ...]]  # the makespan first, then the plateau's
# Larger V cases under a tight limit (above the full phase's size, at most CHASE_MOST_ACTIONS
# actions): one chasing climb (``chase_phase``) from the best, each pass at most CHASE_REACH
# places, on about CHASE_ACTIONS actions' worth of simulations (at most
# CHASE_MOST_CANDIDATES candidates).
CHASE_MOST_ACTIONS = 1_000
CHASE_ACTIONS = 1_000_000
CHASE_MOST_CANDIDATES = 1_500
CHASE_REACH = 1


def end_sum(makespan_ms: float, trace: Trace) -> tuple[float, float]:
    """``(makespan, sum of every compute pass's end)``: a plateau measure that rewards
    any pass run earlier, not only the last on each device."""
    return makespan_ms, float(trace.end[trace.lane == Lane.COMPUTE].sum())


def blocks(action: Action, other: Action) -> bool:
    """Whether ``action`` may not pass ``other`` on their device: same stage and kind
    (microbatch order), the same stage and microbatch (F before I before W), or the same
    microbatch's F or I on the next stage held by the same device (the V's turn)."""
    if action.stage == other.stage:
        return action.kind == other.kind or action.microbatch == other.microbatch
    adjacent = abs(action.stage - other.stage) == 1 and action.microbatch == other.microbatch
    return adjacent and action.kind == other.kind != Kind.W


def insertion_moves(schedule: Schedule, reach: int) -> list[Move]:
    """Every move of one pass up to ``reach`` places along its device's list, each
    device in turn, nearer places first."""
    moves: list[Move] = []
    for device, actions in enumerate(schedule.device_actions):
        for at, action in enumerate(actions):
            for to in range(at - 1, max(-1, at - reach - 1), -1):
                if blocks(action, actions[to]):
                    break
                moves.append((device, at, to))
            for to in range(at + 1, min(len(actions), at + reach + 1)):
                if blocks(action, actions[to]):
                    break
                moves.append((device, at, to))
    return moves


def repeated(schedule: Schedule, move: Move) -> Schedule | None:
    """``move``, and the same move for every later microbatch: the pass of microbatch
    ``j + r`` goes next to the same neighbour of microbatch ``j + r`` as the move puts
    microbatch ``j``'s, so every round of the steady state changes at once. None where
    that breaks the device's own order."""
    device, at, to = move
    actions = list(schedule.device_actions[device])
    action, beside = actions[at], actions[to]
    present = set(actions)
    for r in range(len(actions)):
        mover = Action(action.stage, action.kind, action.microbatch + r)
        anchor = Action(beside.stage, beside.kind, beside.microbatch + r)
        if mover not in present or anchor not in present:
            break
        actions.remove(mover)
        actions.insert(actions.index(anchor) + (to > at), mover)
    if not in_order(actions):
        return None
    lists = list(schedule.device_actions)
    lists[device] = tuple(actions)
    return replace(schedule, device_actions=tuple(lists))


def in_order(actions: list[Action]) -> bool:
    """Whether each pass follows, on its device, its stage's previous microbatch and the
    passes it needs that the device holds (its F before its I before its W; an F after
    the previous stage's, an I after the next stage's)."""
    position = {action: at for at, action in enumerate(actions)}
    for at, action in enumerate(actions):
        stage, kind, mb = action.stage, action.kind, action.microbatch
        needs = [Action(stage, kind, mb - 1)]
        if kind == Kind.F:
            needs.append(Action(stage - 1, Kind.F, mb))
        elif kind == Kind.I:
            needs += [Action(stage, Kind.F, mb), Action(stage + 1, Kind.I, mb)]
        else:
            needs.append(Action(stage, Kind.I, mb))
        if any(position.get(need, -1) > at for need in needs):
            return False
    return True


def insertion_climb(
    schedule: Schedule,
    budget: int,
    run: Run,
    reach: int,
    score: Score = settle,
    floor_ms: float = 0.0,
    repeat: bool = False,
    chase: bool = False,
) -> Schedule:
    """Climb from ``schedule`` by insertion moves (``repeat``: each ``repeated``) with at
    most ``budget`` calls of ``run`` (a candidate's makespan if it fits the memory
    limit, else None, and its trace), each step lowering ``score``, until the makespan
    reaches ``floor_ms`` (a lower bound: nothing is faster). ``chase``: after each move
    taken, the same move for the next microbatches while each helps (``chased``).
    Returns the best found."""
    makespan_ms, trace = run(schedule)
    budget -= 1
    if makespan_ms is None or trace is None:
        return schedule
    current, best, cursor = schedule, score(makespan_ms, trace), 0
    while budget > 0 and best[0] > floor_ms:
        moves = insertion_moves(current, reach)
        taken = None
        for k in range(len(moves)):
            if budget <= 0:
                break
            at = (cursor + k) % len(moves)
            candidate = repeated(current, moves[at]) if repeat else moved(current, moves[at])
            if candidate is None or candidate.device_actions == current.device_actions:
                continue
            budget -= 1
            found_ms, found_trace = run(candidate)
            if found_ms is None or found_trace is None:
                continue
            found = score(found_ms, found_trace)
            if better(found, best):
                if chase:
                    candidate, found, budget = chased(
                        current, moves[at], (candidate, found), budget, run, score
                    )
                current, best, taken = candidate, found, at
                break
        if taken is None:
            break
        cursor = taken
    return current


def chased(
    schedule: Schedule,
    move: Move,
    taken: tuple[Schedule, tuple[float, ...]],
    budget: int,
    run: Run,
    score: Score,
) -> tuple[Schedule, tuple[float, ...], int]:
    """After ``move`` on ``schedule`` gave ``taken`` (the order and its score), the same
    move for microbatch ``j + 1``, ``j + 2``...: its pass goes next to the same neighbour of
    the next microbatch, one candidate each, for as long as each lowers the score (a
    steady state's rounds, changed one after another; the climb's scan would find each
    only after trying every other move once more). Returns the order, its score and the
    budget left."""
    device, at, to = move
    mover, beside = schedule.device_actions[device][at], schedule.device_actions[device][to]
    current, best = taken
    for r in range(1, len(schedule.device_actions[device])):
        actions = current.device_actions[device]
        nxt = Action(mover.stage, mover.kind, mover.microbatch + r)
        anchor = Action(beside.stage, beside.kind, beside.microbatch + r)
        if budget <= 0 or nxt not in actions or anchor not in actions:
            break
        source, target = actions.index(nxt), actions.index(anchor)
        step = 1 if target > source else -1
        if (target > source) != (to > at) or any(
            blocks(nxt, actions[k]) for k in range(source + step, target + step, step)
        ):
            break
        candidate = moved(current, (device, source, target))
        budget -= 1
        found_ms, trace = run(candidate)
        if found_ms is None or trace is None:
            break
        found = score(found_ms, trace)
        if not better(found, best):
            break
        current, best = candidate, found
    return current, best, budget


def climb_each(
    starts: list[tuple[Schedule, Run]],
    budget: int,
    reach: int,
    floor_ms: float,
    best: Callable[[], tuple[Schedule, Run]] | None = None,
) -> None:
    """Climb from each ``(schedule, run)`` with ``settle``, until the makespan reaches
    ``floor_ms``, on ``budget`` candidates in all. Given ``best`` (the best so far, when
    called): from each start with ``end_sum`` too, on half the budget shared evenly, then
    from ``best()`` by repeated moves on the other half."""
    scores = (settle, end_sum) if best is not None else (settle,)
    share = budget // 2 if best is not None else budget
    each = share // (len(scores) * max(len(starts), 1))
    for schedule, run in starts:
        for score in scores:
            insertion_climb(schedule, each, run, reach, score, floor_ms)
    if best is not None:
        schedule, run = best()
        insertion_climb(schedule, budget - share, run, reach, settle, floor_ms, repeat=True)


def insertion_phase(search, budget: int, reach: int, tight: bool, floor_ms: float) -> None:
    """The insertion climbs of a search (``pipesim.search.auto``; ``search`` gives its
    ``best``, its fastest candidate per construction ``by_source`` and a ``runner(source)``
    that offers candidates): from the best with ``settle``; under a ``tight`` limit from
    the fastest candidate another construction built too (the climb from there often ends
    in another basin), each with ``end_sum`` as well, on half the budget, and then from
    the best so far by repeated moves on the other half."""
    best = search.best
    starts = [best]
    root = best.source.rsplit(" from ", 1)[-1]  # the construction it came from
    others = [found for source, found in search.by_source.items() if source != root]
    if tight and others:
        starts.append(min(others, key=lambda found: found.makespan_ms))
    runs = [
        (start.schedule, search.runner(f"insertion climb from {start.source}")) for start in starts
    ]

    def best_now() -> tuple[Schedule, Run]:
        now = search.best
        return now.schedule, search.runner(f"repeated moves from {now.source}")

    climb_each(runs, budget, reach, floor_ms, best_now if tight else None)


def chase_phase(search, actions: int, floor_ms: float) -> None:
    """The climb of a larger V case under a tight limit (``search`` as for
    ``insertion_phase``; ``actions`` per candidate): from the best, by moves of at most
    ``CHASE_REACH`` places, each move taken chased for the next microbatches
    (``chased``), until the bound ``floor_ms``. Its candidates only add to the search's:
    the best is kept, so the result is never slower."""
    if actions > CHASE_MOST_ACTIONS:
        return
    budget = min(CHASE_MOST_CANDIDATES, CHASE_ACTIONS // actions)
    best = search.best
    run = search.runner(f"chased moves from {best.source}")
    insertion_climb(best.schedule, budget, run, CHASE_REACH, settle, floor_ms, chase=True)


__all__ = [
    "CHASE_MOST_ACTIONS",
    "blocks",
    "chase_phase",
    "chased",
    "climb_each",
    "insertion_phase",
    "end_sum",
    "in_order",
    "insertion_climb",
    "insertion_moves",
    "repeated",
]
