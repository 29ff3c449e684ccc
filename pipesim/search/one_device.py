"""One device alone: its own actions in the order it chooses, the rest of the pipeline
reduced to time lags, its memory limit kept; the idle no such order avoids.

The other parts of the bound count a device's idle with closed forms (a warm-up that
forwards cannot fill, a tail that weight passes cannot cover). Under a tight limit on a V
the idle comes from how the two chunks share the room: the chunk-0 forwards that enter
before the first gradient comes back leave room for only so many chunk-1 forwards, whose
bytes must come back before the next chunk-0 forward enters, and so on. This part
searches those orders outright, one device at a time.

**The relaxation.** Keep one device ``d`` and its stages ``s_0 < s_1 < ...``; let every
other device run any number of actions at once. What remains of the engine's rules, per
microbatch ``j`` (``head``, ``trip``, ``below`` as in ``pipesim.search.bound``):

* ``F(s_k, j)`` starts no earlier than ``head(s_k) + j F(t)`` for every stage ``t <
  s_k`` (the device of ``t`` runs ``j + 1`` forwards there first, each after
  ``head(t)``), and no earlier than ``F(s_(k-1), j)`` started plus ``head(s_k) -
  head(s_(k-1))`` (the forward chain between them);
* ``I(s, j)`` starts no earlier than ``F(s, j)`` started plus ``trip(s) - I(s)``, than
  ``I(s_(k+1), j)`` ended plus the hops and input backwards between the two stages, and
  than ``head(s+1) + trip(s+1) + hop(s) + j I(s+1)`` (the ``j + 1`` input backwards of
  the stage above run one at a time); ``W(s, j)`` starts after ``I(s, j)`` ends;
* the step ends no earlier than ``I(s, j)`` ended plus ``below(s)``, and no earlier than
  the ``(j+1)``-th last ``I(s)`` end plus ``below(s) + j I(s-1)`` (the stage below runs
  those ``j + 1`` input backwards one at a time after them);
* the device runs one action at a time and holds at most the limit: an ``F`` takes its
  stage's bytes at its start, an ``I`` gives back all but the weight-gradient part at its
  end, a ``W`` the rest.

Every valid schedule, restricted to ``d``, keeps all of these, so the least idle of the
relaxation is a floor on the idle of every schedule. Each stage may run each kind in
microbatch order (``pipesim.search.exact_model``'s relabelling keeps every rule above:
each is between the ``j``-th of two kinds, or on the ``j``-th of one kind), so an order
is a sequence of kinds; started each as early as the rules allow (the memory depends only
on the sequence: every byte given back is given back by an earlier action of the same
device), it does at least as much work by every time as any timing of the same sequence.

**Two ends.** Let ``C`` be the step's end. The idle of the device in ``[0, C]`` is at least
its idle in ``[0, T]`` plus its idle in ``[C - T', C]`` when ``T + T' <= C``, which holds
when ``T + T'`` is at most a proven lower bound on ``C``. The first is floored by the
search above; the second by the same search run backwards in time from ``C``: reversed, a
``W`` takes its weight-gradient bytes at its start, an ``I`` the rest of its stage's
activation, an ``F`` gives the activation back at its end; the step's end-chains become
earliest starts, and the lags turn around (``W`` before ``I``, ``I(s_k)`` after
``I(s_(k-1))``, ``F(s)`` ``trip(s) - F(s)`` after ``I(s)``, ``F(s_k)`` after
``F(s_(k+1))``). So::

    makespan >= busy + least idle in [0, T] + least idle in the last T'

**The search** is best first by idle so far (the idle of a sequence only grows as it goes
on), a state being the count of each kind done, the clock, and the earliest start that
the actions already run impose on each pending one; a state that another with the same
counts beats on the clock and on every pending start is dropped (anything the one can do
next, the other can do no later). A state whose clock passes the horizon ends its
sequence; the first such state taken from the queue has the least idle. After ``BUDGET``
states the least idle still in the queue is returned instead: no sequence can do better.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from pipesim.search.fits import counts_memory, room_bytes
from pipesim.search.greedy import Problem

BUDGET = 600  # states taken from the queue per search
KEPT = 6  # states kept per count of each kind, to test new ones against
EPS = 1e-9  # ms: a start that late is the same start


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of action of the device, run in microbatch order: its duration (ms), the
    bytes it takes at its start and gives back at its end, the earliest start of its
    ``j``-th (``release + j * stride``), and ``after``: ``(kind, lag)`` pairs, each saying
    it starts no earlier than that kind's action of the same microbatch started plus
    ``lag``."""

    ms: float
    takes: float
    gives: float
    release: float
    stride: float
    after: tuple[tuple[int, float], ...]
    filler: bool = False  # a weight pass: nothing on the device waits on it but its I


def one_device_ms(problem: Problem, chain, device: int, floor_ms: float) -> float:
    """The device's work plus the least idle in the first and the last ``floor_ms / 2``
    (module docstring); ``floor_ms`` is a proven lower bound on the makespan, ``chain``
    the durations and chains of ``pipesim.search.bound``. 0 for a device without stages."""
    mine = [s for s in range(problem.stages) if problem.placement[s] == device]
    if not mine or not math.isfinite(floor_ms) or floor_ms <= 0:
        return 0.0
    m = problem.microbatches
    busy = m * sum(chain.forward[s] + chain.input[s] + chain.weight[s] for s in mine)
    room = room_bytes(problem) if counts_memory(problem) else math.inf
    half = floor_ms / 2
    ahead = least_idle_ms(forward_kinds(problem, chain, mine), m, room, half)
    behind = least_idle_ms(reverse_kinds(problem, chain, mine), m, room, half)
    return busy + ahead + behind


def _bytes(problem: Problem, stage: int) -> tuple[float, float]:
    taken = max(problem.taken_bytes[stage], 0.0)
    return taken, min(max(problem.weight_grad_bytes[stage], 0.0), taken)


def _down_ms(problem: Problem, chain, low: int, high: int) -> float:
    """From the end of ``I(high)`` to the start of ``I(low)``: hops and input backwards."""
    hops = sum(problem.hop_ms[t] for t in range(low, high))
    return hops + sum(chain.input[t] for t in range(low + 1, high))


def forward_kinds(problem: Problem, chain, mine: list[int]) -> list[Kind]:
    """``F``, ``I``, ``W`` of each of the device's stages (in that order, ``3k`` onwards
    for its ``k``-th stage), as time runs."""
    kinds, last = [], problem.stages - 1
    for k, s in enumerate(mine):
        taken, grad = _bytes(problem, s)
        stride = max((chain.forward[t] for t in range(s)), default=0.0)
        after = ((3 * (k - 1), chain.head[s] - chain.head[mine[k - 1]]),) if k else ()
        kinds.append(Kind(chain.forward[s], taken, 0.0, chain.head[s], stride, after))
        after = ((3 * k, chain.trip[s] - chain.input[s]),)
        if k + 1 < len(mine):
            deeper = mine[k + 1]
            after += ((3 * k + 4, chain.input[deeper] + _down_ms(problem, chain, s, deeper)),)
        release = chain.head[s] + chain.trip[s] - chain.input[s]
        stride = chain.input[s + 1] if s < last else 0.0
        kinds.append(Kind(chain.input[s], 0.0, taken - grad, release, stride, after))
        after = ((3 * k + 1, chain.input[s]),)
        kinds.append(Kind(chain.weight[s], 0.0, grad, 0.0, 0.0, after, filler=True))
    return kinds


def reverse_kinds(problem: Problem, chain, mine: list[int]) -> list[Kind]:
    """The same actions with time running back from the step's end: ``W``, ``I``, ``F``
    of each stage (``3k`` onwards), the ``j``-th being the ``j``-th last."""
    kinds = []
    for k, s in enumerate(mine):
        taken, grad = _bytes(problem, s)
        kinds.append(Kind(chain.weight[s], grad, 0.0, 0.0, 0.0, (), filler=True))
        after = ((3 * k, chain.weight[s]),)
        if k:
            lower = mine[k - 1]
            after += ((3 * k - 2, chain.input[lower] + _down_ms(problem, chain, lower, s)),)
        stride = chain.input[s - 1] if s else 0.0
        kinds.append(Kind(chain.input[s], taken - grad, 0.0, chain.below[s], stride, after))
        after = ((3 * k + 1, chain.trip[s] - chain.forward[s]),)
        if k + 1 < len(mine):
            deeper = mine[k + 1]
            between = chain.head[deeper] - chain.head[s] - chain.forward[s]
            after += ((3 * k + 5, chain.forward[deeper] + between),)
        kinds.append(Kind(chain.forward[s], 0.0, taken, 0.0, 0.0, after))
    return kinds


@dataclass(slots=True)
class _State:
    """A sequence so far: its clock and idle (ms), the bytes held, each kind's count, and
    per kind the starts of the microbatches that a later kind still waits on, from
    ``lows[kind]`` on."""

    clock: float
    idle: float
    held: float
    counts: tuple[int, ...]
    starts: tuple[tuple[float, ...], ...]
    filled: tuple[int, float, float] | None = None  # the weight pass just run: kind, start, held before


def least_idle_ms(
    kinds: list[Kind], microbatches: int, room: float, horizon_ms: float, budget: int = BUDGET
) -> float:
    """The least idle before ``horizon_ms`` of any sequence of ``kinds`` (each run
    ``microbatches`` times, in microbatch order) whose bytes stay within ``room``, or a
    floor under it once ``budget`` states have been taken from the queue."""
    if horizon_ms <= 0:
        return 0.0
    waiting = [[t for t, kind in enumerate(kinds) if any(p == k for p, _ in kind.after)]
               for k in range(len(kinds))]
    start = _State(0.0, 0.0, 0.0, (0,) * len(kinds), ((),) * len(kinds))
    queue, seen, tie = [(0.0, 0.0, 0, start)], {}, 0
    for _ in range(budget):
        if not queue:
            return 0.0  # no sequence at all: nothing to prove here
        idle, _, _, state = heapq.heappop(queue)
        if state.clock >= horizon_ms - EPS:
            return idle
        if all(count == microbatches for count in state.counts):
            # done before the horizon: idle from here on
            done = _State(horizon_ms, idle + horizon_ms - state.clock, 0.0, (), ())
            heapq.heappush(queue, (done.idle, -done.clock, tie, done))
            continue
        for child in _children(kinds, waiting, state, microbatches, room, horizon_ms):
            if child.clock < horizon_ms - EPS and _beaten(seen, child, kinds, waiting):
                continue
            tie += 1
            heapq.heappush(queue, (child.idle, -child.clock, tie, child))
    return queue[0][0] if queue else 0.0


def _low(state_counts, waiting: list[int], count: int) -> int:
    """From which microbatch on a kind's starts are kept: the first some kind waiting on
    it has not run (its own count where none waits)."""
    return min((state_counts[t] for t in waiting), default=count)


def _children(kinds, waiting, state: _State, microbatches: int, room: float, horizon: float):
    """Each kind's next action run as early as the rules allow after ``state``. Right after
    a weight pass, an action that could have started in its place is not run (swapping
    the two ends every later action no later: the module docstring), nor a weight pass of
    a lower kind (the two swapped)."""
    counts, starts = state.counts, state.starts
    for t, kind in enumerate(kinds):
        j = counts[t]
        if j == microbatches or state.held + kind.takes > room:
            continue
        ready = kind.release + j * kind.stride
        for p, lag in kind.after:
            if counts[p] <= j:
                ready = math.inf
                break
            ready = max(ready, starts[p][j - _low(counts, waiting[p], counts[p])] + lag)
        if ready == math.inf or _in_its_place(state.filled, t, kind, ready, room):
            continue
        begin = max(state.clock, ready)
        if begin >= horizon:
            yield _State(horizon, state.idle + horizon - state.clock, 0.0, (), ())
            continue
        yield _advance(kinds, waiting, state, t, begin)


def _in_its_place(filled, t: int, kind: Kind, ready: float, room: float) -> bool:
    """Whether the action could have run instead of the weight pass just run (``filled``:
    its kind, start and the bytes held before it), or is a weight pass of a lower kind."""
    if filled is None:
        return False
    other, start, held = filled
    if ready > start or held + kind.takes > room:
        return False
    return not kind.filler or t < other


def _advance(kinds, waiting, state: _State, t: int, begin: float) -> _State:
    """``state`` after kind ``t``'s next action, started at ``begin``."""
    counts = list(state.counts)
    lows = [_low(counts, waiting[k], counts[k]) for k in range(len(kinds))]
    counts[t] += 1
    starts = list(state.starts)
    if waiting[t]:
        starts[t] = starts[t] + (begin,)
    for k in range(len(kinds)):
        drop = _low(counts, waiting[k], counts[k]) - lows[k]
        if drop and waiting[k]:
            starts[k] = starts[k][drop:]
    kind = kinds[t]
    return _State(
        begin + kind.ms,
        state.idle + begin - state.clock,
        state.held + kind.takes - kind.gives,
        tuple(counts),
        tuple(starts),
        (t, begin, state.held) if kind.filler else None,
    )


def _beaten(seen: dict, state: _State, kinds, waiting) -> bool:
    """Whether a state kept with the same counts starts no later than ``state`` at its
    clock and at every pending action; else ``state`` is kept (up to ``KEPT``)."""
    counts, clock = state.counts, state.clock
    pending = []
    for t, kind in enumerate(kinds):
        for p, lag in kind.after:
            low = _low(counts, waiting[p], counts[p])
            for j in range(counts[t], counts[p]):
                pending.append(max(state.starts[p][j - low] + lag, clock))
    kept = seen.setdefault(counts, [])
    for other_clock, other in kept:
        if other_clock <= clock and all(a <= b for a, b in zip(other, pending, strict=True)):
            return True
    if len(kept) < KEPT:
        kept.append((clock, pending))
    return False


__all__ = ["BUDGET", "Kind", "forward_kinds", "least_idle_ms", "one_device_ms", "reverse_kinds"]
