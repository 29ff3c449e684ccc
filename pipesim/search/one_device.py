"""One device alone: its own actions in the order it chooses, the rest of the pipeline
reduced to time lags, its memory limit kept; searched for the best such order.

The other parts of the bound count a device's idle with closed forms (a warm-up that
forwards cannot fill, a tail that weight passes cannot cover, the states at its last
forward). Under a tight limit on a V the idle comes from how the two chunks share the
room: the chunk-0 forwards that enter before the first gradient comes back leave room for
only so many chunk-1 forwards, whose bytes must come back before the next chunk-0 forward
enters, and so on to the end, where the last forwards wait for room and the last
microbatch's way back is left uncovered. This part searches those orders outright.

**The relaxation.** Keep one device and its stages ``s_0 < s_1 < ...``; let every other
device run any number of actions at once. What remains of the engine's rules, per
microbatch ``j`` (``head``, ``trip``, ``below`` as in ``pipesim.search.bound``):

* ``F(s_k, j)`` starts no earlier than ``head(s_k) + j F(t)`` for every stage ``t < s_k``
  (the device of ``t`` runs ``j + 1`` forwards there first, each after ``head(t)``, and
  the chain from ``t`` on follows the last), and no earlier than ``F(s_(k-1), j)``
  started plus ``head(s_k) - head(s_(k-1))`` (the forward chain between them);
* ``I(s, j)`` starts no earlier than ``F(s, j)`` started plus ``trip(s) - I(s)``, than
  ``I(s_(k+1), j)`` ended plus the hops and input backwards between the two stages, and
  than ``head(s+1) + trip(s+1) + hop(s) + j I(s+1)`` (the first ``I(s+1)`` to end ends
  no earlier than ``head(s+1) + trip(s+1)``, the others one at a time after it);
  ``W(s, j)`` starts after ``I(s, j)`` ends;
* the step ends no earlier than each ``I(s, j)`` end plus ``below(s)``, and than every
  action's end;
* the device runs one action at a time and holds at most the limit: an ``F`` takes its
  stage's bytes at its start, an ``I`` gives back all but the weight-gradient part at its
  end, a ``W`` the rest.

Every valid schedule, restricted to the device, keeps all of these, so no valid schedule
ends before the best order of the relaxation. Each stage may run each kind in microbatch
order: ``pipesim.search.exact_model``'s relabelling gives every valid schedule such a
twin with the same device timelines, and each rule above is between the ``j``-th actions
of two kinds or on the ``j``-th of one. An order is then a sequence of kinds, best
started each as early as the rules allow (the bytes held depend only on the sequence:
every byte given back is given back by an earlier action of the same device).

**The search** goes best first over sequences (the first actions of an order), by a floor
under every order that begins with them. For every order, one no worse begins with one
of the sequences in the queue (below), so at every moment the least floor there is a
lower bound, and the first complete sequence taken from it is a best order. The floor of
a sequence: its step so far (the latest end plus end-chain); the clock plus all the work
left; for each kind, the
last of its actions starts after the remaining actions of every kind it waits on
(directly or not), no earlier than its own earliest start and its lags after the last of
those, and its end-chain follows; and the last forward of the deepest stage starts after
every other forward left and every backward and weight pass the memory forces before it
(at that moment the last microbatch holds the activations of all the device's stages,
and each other one at least the activations up to a stage while its ``I`` there has not
ended, and that stage's weight-gradient part while its ``W`` has not, so only as many as
fit in the room left can still await each), after which its round trip and the chain
down to the end follow. A sequence's floor is also never below its parent's. Two rules
leave out sequences that cannot do better than others kept:

* right after a weight pass started at ``t``, an action that could have started at ``t``
  within the limit is not run: swapping the two keeps their span, runs the other action
  no later and the weight pass no later than the end of the pair (nothing on the device
  waits on it), and holds no more bytes in between; nor a weight pass of a lower kind
  (the two swapped). Swapping until none is left turns any order into one of those
  searched (call them normal), no worse;
* a sequence with the same count of each kind as one already taken from the queue that
  did not end with a weight pass, and a clock, a step so far and an earliest start of
  every pending action no earlier than that one's, is left out: whatever follows it can
  follow the other as early, and swapping that order into a normal one reorders only
  what follows the other's last action (a swap moves an action back across weight
  passes, never across another action), so a normal order through the other is no
  worse.

After ``BUDGET`` states (all the devices together, the devices whose other parts are
highest first) the least floor still in the queue is what a device proves.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from pipesim.search.fits import counts_memory, room_bytes, whole
from pipesim.search.greedy import Problem

BUDGET = 50_000  # states taken from the queue in all, every device together (in units:
WORK = 64  # each state costs one more per this many pending starts compared with others)
KEPT = 64  # states kept per count of each kind, to test new ones against


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of action of the device, run in microbatch order: its duration (ms), the
    bytes it takes at its start and gives back at its end, the earliest start of its
    ``j``-th (``release + j * stride``), ``after``: ``(kind, lag)`` pairs, each saying
    it starts no earlier than that kind's action of the same microbatch started plus
    ``lag``, and ``tail``: what must follow its end before the step ends."""

    ms: float
    takes: float
    gives: float
    release: float
    stride: float
    after: tuple[tuple[int, float], ...]
    tail: float = 0.0
    filler: bool = False  # a weight pass: nothing on the device waits on it


def alone_ms(problem: Problem, chain, floor_ms: float, own: list[float]) -> tuple[float, int]:
    """The best floor the devices' relaxations prove above ``floor_ms`` (a proven lower
    bound on the makespan) and the device that proves it (-1: none does), within
    ``BUDGET`` states in all, spent on the devices in the order of ``own`` (each device's
    own floor from the other parts), highest first; ``chain``: the durations and chains
    of ``pipesim.search.bound``."""
    best, where, budget = floor_ms, -1, BUDGET
    for device in sorted(range(problem.devices), key=lambda d: -own[d]):
        if budget <= 0:
            break
        found, used = one_device_ms(problem, chain, device, best, budget)
        budget -= used
        if found > best * (1 + 1e-9):  # more than the float noise of summing the same
            best, where = found, device
    return best, where


def one_device_ms(
    problem: Problem, chain, device: int, floor_ms: float, budget: int = BUDGET
) -> tuple[float, int]:
    """No order of the device's relaxation ends before the first value (at least
    ``floor_ms``, a proven lower bound on the makespan), as the search finds it within
    ``budget`` (``BUDGET``'s units); the second is what it spent."""
    mine = [s for s in range(problem.stages) if problem.placement[s] == device]
    if not mine or not math.isfinite(floor_ms):
        return floor_ms, 0
    return _Search(problem, chain, mine).least(floor_ms, budget)


def _bytes(problem: Problem, stage: int) -> tuple[float, float]:
    taken = max(problem.taken_bytes[stage], 0.0)
    return taken, min(max(problem.weight_grad_bytes[stage], 0.0), taken)


def _down_ms(problem: Problem, chain, low: int, high: int) -> float:
    """From the end of ``I(high)`` to the start of ``I(low)``: hops and input backwards."""
    hops = sum(problem.hop_ms[t] for t in range(low, high))
    return hops + sum(chain.input[t] for t in range(low + 1, high))


def forward_kinds(problem: Problem, chain, mine: list[int]) -> list[Kind]:
    """``F``, ``I``, ``W`` of each of the device's stages (in that order, ``3k`` onwards
    for its ``k``-th stage)."""
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
        kinds.append(
            Kind(chain.input[s], 0.0, taken - grad, release, stride, after, chain.below[s])
        )
        after = ((3 * k + 1, chain.input[s]),)
        kinds.append(Kind(chain.weight[s], 0.0, grad, 0.0, 0.0, after, filler=True))
    return kinds


@dataclass(slots=True)
class _State:
    """A sequence so far: its floor (ms; ``exact`` once the floor below was taken), clock
    and step so far (ms), the bytes held, each kind's count, per kind the starts of the
    microbatches from ``lows[kind]`` on that a later kind still waits on, and the weight
    pass just run (its kind, start and the bytes held before it) or None."""

    floor: float
    clock: float
    cost: float
    held: float
    counts: tuple[int, ...]
    starts: tuple[tuple[float, ...], ...]
    lows: tuple[int, ...]
    filled: tuple[int, float, float] | None
    exact: bool = False


class _Search:
    """The best-first search of one device's relaxation (module docstring)."""

    def __init__(self, problem: Problem, chain, mine: list[int]):
        self.kinds = kinds = forward_kinds(problem, chain, mine)
        self.m = problem.microbatches
        self.room = room_bytes(problem) if counts_memory(problem) else math.inf
        n = len(kinds)
        ancestors = [sorted(_ancestors(kinds, t)) for t in range(n)]
        self.ms = [kind.ms for kind in kinds]
        # per kind, each before those that wait on it: what the floor of its last needs
        self.plan = [
            (
                t,
                ancestors[t],
                kinds[t].release + (self.m - 1) * kinds[t].stride,
                kinds[t].after,
                kinds[t].ms + kinds[t].tail,
            )
            for t in sorted(range(n), key=lambda t: len(ancestors[t]))
        ]
        self.waiting = [
            [t for t in range(n) if any(p == q for p, _ in kinds[t].after)] for q in range(n)
        ]
        taken = [_bytes(problem, s) for s in mine]
        self.spare = self.room - sum(a for a, _ in taken)
        self.forced = []  # (kind, how many other microbatches may still await it then)
        for k, (_, grad) in enumerate(taken):
            holds = sum(a for a, _ in taken[: k + 1])  # I(s_k) pending: stages 0..k held
            for t, size in ((3 * k + 1, holds), (3 * k + 2, grad)):
                self.forced.append((t, whole(self.spare / size) if size > 0 else self.m))
        self.back = chain.trip[mine[-1]] + max(chain.weight[mine[0]], chain.below[mine[0]])
        for low, high in zip(mine, mine[1:], strict=False):
            self.back += _down_ms(problem, chain, low, high) + chain.input[low]
        self.seen: dict = {}

    def least(self, floor_ms: float, budget: int) -> tuple[float, int]:
        """The least floor of a sequence not yet taken further (every order goes through
        one of them) once the best is found or ``budget`` was spent (``BUDGET``'s units),
        at least ``floor_ms``; and what was spent."""
        n = len(self.kinds)
        if self.spare < 0 or budget <= 0:
            return floor_ms, 0
        first = _State(floor_ms, 0.0, 0.0, 0.0, (0,) * n, ((),) * n, (0,) * n, None)
        queue, tie, self.spent = [(floor_ms, 0, 0, first)], 0, 0
        while queue and self.spent < budget:
            floor, depth, _, state = heapq.heappop(queue)
            if not state.exact:  # its parent's floor so far: take the floor below too
                state.floor, state.exact = max(floor, self._floor(state)), True
                if state.floor > floor:
                    tie += 1
                    heapq.heappush(queue, (state.floor, depth, tie, state))
                    continue
            if self._beaten(state):
                continue
            if all(count == self.m for count in state.counts):
                return floor, self.spent  # the relaxation's best order
            for child in self._children(state):
                tie += 1
                heapq.heappush(queue, (child.floor, -sum(child.counts), tie, child))
        return (queue[0][0] if queue else floor_ms), self.spent

    def _children(self, state: _State):
        """Each kind's next action after ``state``, as early as the rules allow, as a new
        state (its floor at least ``state``'s), but for those the rules cut."""
        counts, starts, lows = state.counts, state.starts, state.lows
        for t, kind in enumerate(self.kinds):
            j = counts[t]
            if j == self.m or state.held + kind.takes > self.room:
                continue
            ready = kind.release + j * kind.stride
            for p, lag in kind.after:
                if counts[p] <= j:
                    ready = math.inf
                    break
                ready = max(ready, starts[p][j - lows[p]] + lag)
            if ready == math.inf or _in_its_place(state.filled, t, kind, ready, self.room):
                continue
            yield self._advance(state, t, max(state.clock, ready))

    def _advance(self, state: _State, t: int, begin: float) -> _State:
        """``state`` after kind ``t``'s next action, started at ``begin``."""
        kind = self.kinds[t]
        counts = list(state.counts)
        counts[t] += 1
        starts, lows = list(state.starts), list(state.lows)
        if self.waiting[t]:
            starts[t] += (begin,)
        else:
            lows[t] += 1
        for p, _ in kind.after:  # t's count may let p forget a start
            low = min(counts[w] for w in self.waiting[p])
            starts[p], lows[p] = starts[p][low - lows[p] :], low
        end = begin + kind.ms
        cost = max(state.cost, end + kind.tail)
        filled = (t, begin, state.held) if kind.filler else None
        held = state.held + kind.takes - kind.gives
        return _State(
            state.floor, end, cost, held, tuple(counts), tuple(starts), tuple(lows), filled
        )

    def _floor(self, state: _State) -> float:
        """No sequence that goes on from ``state`` ends before this (module docstring)."""
        m, counts, clock = self.m, state.counts, state.clock
        left = [(m - count) * ms for count, ms in zip(counts, self.ms, strict=True)]
        found = max(state.cost, clock + sum(left))
        last = [-math.inf] * len(left)  # the floor of each kind's last start
        for t, ancestors, release, after, ms_and_tail in self.plan:
            if counts[t] == m:
                if state.lows[t] < m:
                    last[t] = state.starts[t][m - 1 - state.lows[t]]
                continue
            start = clock + left[t] - self.ms[t]
            for p in ancestors:
                start += left[p]
            start = max(start, release)
            for p, lag in after:
                start = max(start, last[p] + lag)
            last[t] = start
            found = max(found, start + ms_and_tail)
        deepest = len(left) - 3
        if counts[deepest] < m:
            # the last forward of the deepest stage starts after every other forward
            # left and the backwards and weight passes memory forces before it
            work = sum(left[0::3]) - self.ms[deepest]
            for t, kept in self.forced:
                work += max(0, m - 1 - kept - counts[t]) * self.ms[t]
            found = max(found, clock + work + self.back)
        return found

    def _beaten(self, state: _State) -> bool:
        """Whether a state kept with the same counts was no later in its clock, its step
        so far and every pending start; else ``state`` is kept (up to ``KEPT``) unless it
        ends with a weight pass (module docstring)."""
        counts, clock, pending = state.counts, state.clock, []
        for t, kind in enumerate(self.kinds):
            for p, lag in kind.after:
                low, starts = state.lows[p], state.starts[p]
                pending.extend(
                    max(starts[j - low] + lag, clock) for j in range(counts[t], counts[p])
                )
        kept = self.seen.setdefault(counts, [])
        self.spent += 1 + len(pending) * len(kept) // WORK
        for other_clock, other_cost, other in kept:
            if other_clock <= clock and other_cost <= state.cost:
                if all(a <= b for a, b in zip(other, pending, strict=True)):
                    return True
        if len(kept) < KEPT and state.filled is None:
            kept.append((clock, state.cost, pending))
        return False


def _ancestors(kinds: list[Kind], t: int) -> set[int]:
    """The kinds whose action of the same microbatch kind ``t``'s waits on, directly or
    not."""
    found, stack = set(), [t]
    while stack:
        for p, _ in kinds[stack.pop()].after:
            if p not in found:
                found.add(p)
                stack.append(p)
    return found


def _in_its_place(filled, t: int, kind: Kind, ready: float, room: float) -> bool:
    """Whether the action could have run instead of the weight pass just run (``filled``:
    its kind, start and the bytes held before it), or is a weight pass of a lower kind."""
    if filled is None:
        return False
    other, start, held = filled
    if ready > start or held + kind.takes > room:
        return False
    return not kind.filler or t < other


__all__ = ["BUDGET", "Kind", "alone_ms", "forward_kinds", "one_device_ms"]
