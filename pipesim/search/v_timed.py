"""ZB-V built greedily on the real costs and links: the Zero Bubble paper's V heuristic.

``pipesim.schedules.policies.zbv`` is ZB-V's fixed order, written for equal F, I and W and
no latency. The Zero Bubble paper (Qi et al., ICLR 2024, section 6) builds its V instead
by placing passes one at a time while keeping a clock per device, so the order follows the
real durations and the link's latency; the authors' builder (``zbv.py`` in
sail-sg/zero-bubble-pipeline-parallelism) does it in three phases:

* warm-up: one chunk-0 forward on every device; then, from the last device up, chunk-0
  forwards on the devices above while they fit in memory (room left for ``2 + 2d`` more)
  and would end before the chunk-1 forward comes back, then the chunk-1 forward; then
  forwards of both chunks, in turn, from the bottom, until every device has as many as the
  one above it;
* steady state, 2m rounds: W passes where memory needs them; one input backward per
  device (chunk 1's, travelling down, where its gradient is there or chunk 0's are all
  done; else chunk 0's), each preceded by the W passes that fit before its gradient arrives
  and, where the wait would exceed the largest bubble so far, one more W; then one forward
  per device the same way (the chunk-1 forward where it has arrived);
* cool-down: the W passes still owed.

A device's bubble is the time it waits after its first forward. A second build is given
the first one's bubbles as allowance (a device may wait up to the largest bubble less its
own) and kept while it lowers the largest bubble; four variants (one more W before a
backward or not, before a forward or not) are tried, and the one with the least largest
bubble wins, the first on ties.

Backwards are numbered as the builder meets them: "first" is chunk 1's (stage 2D-1-d),
which starts at device 0 and travels down; "second" is chunk 0's (stage d), back up. A W
follows the numbering of its backward.
"""

from __future__ import annotations

from collections import deque

from pipesim.schedules.ir import Action, F, I, Schedule, W, single_chain, v_placement
from pipesim.search.greedy import Problem

_FORWARD, _BACKWARD, _WEIGHT = range(3)
_KINDS = (F, I, W)


class _Failed(RuntimeError):
    """A variant that runs out of memory or order (the builder gives up on it)."""


def timed_v_schedule(problem: Problem, name: str) -> Schedule | None:
    """The best of the four variants (module docstring), or None where none can be built."""
    best = None
    for fill_backward in (True, False):
        for fill_forward in (True, False):
            try:
                built = _improved(problem, fill_forward, fill_backward)
            except _Failed:
                continue
            if best is None or built[1] < best[1]:
                best = built
    if best is None:
        return None
    p = problem.devices
    lists = tuple(tuple(best[0][d]) for d in range(p))
    return Schedule(lists, v_placement(p), single_chain(2 * p, problem.microbatches), name)


def _improved(problem: Problem, fill_forward: bool, fill_backward: bool):
    """One build, then builds with the previous bubbles as allowance while the largest
    bubble keeps falling; the last that lowered it."""
    builder = _Builder(problem, fill_forward, fill_backward, None)
    builder.run()
    best = (builder.orders, builder.worst_bubble())
    while True:
        builder = _Builder(problem, fill_forward, fill_backward, list(builder.bubble))
        builder.run()
        if builder.worst_bubble() >= best[1]:
            return best
        best = (builder.orders, builder.worst_bubble())


class _Builder:
    """One build: a clock, memory, bubble and owed W passes per device."""

    def __init__(self, problem: Problem, fill_forward: bool, fill_backward: bool, allowance):
        self.problem, self.p, self.m = problem, problem.devices, problem.microbatches
        self.fill_forward, self.fill_backward = fill_forward, fill_backward
        self.allowance = allowance or [-1.0] * self.p
        self.counts = [[0] * 6 for _ in range(self.p)]  # [kind * 2 + chunk]
        self.ends: dict[tuple[int, int, int, int], float] = {}
        self.clock, self.held = [0.0] * self.p, [0.0] * self.p
        self.bubble = [0.0] * self.p
        self.owed: list[deque[int]] = [deque() for _ in range(self.p)]
        self.orders: list[list[Action]] = [[] for _ in range(self.p)]
        self.limit = problem.limit_bytes * (1 + 1e-12)
        self.latency = max(problem.hop_ms, default=0.0)

    def stage(self, kind: int, chunk: int, d: int) -> int:
        return d if (kind == _FORWARD) == (chunk == 0) else 2 * self.p - 1 - d

    def source(self, kind: int, chunk: int, d: int) -> int | None:
        """The device the pass's input comes from (None: its own)."""
        if kind == _WEIGHT:
            return None
        other = d + 1 if chunk == 1 else d - 1
        return other if 0 <= other < self.p else None

    def hop(self, kind: int, chunk: int, d: int) -> float:
        other = self.source(kind, chunk, d)
        if other is None:
            return self.latency  # as the builder reads a pass with no input
        here, there = self.stage(kind, chunk, d), self.stage(kind, chunk, other)
        return self.problem.hop_ms[min(here, there)]

    def cost(self, kind: int, chunk: int, d: int) -> float:
        durations = (self.problem.forward_ms, self.problem.input_ms, self.problem.weight_ms)
        return durations[kind][self.stage(kind, chunk, d)]

    def change(self, kind: int, chunk: int, d: int) -> float:
        stage = self.stage(kind, chunk, d)
        taken, kept = self.problem.taken_bytes[stage], self.problem.weight_grad_bytes[stage]
        return (taken, kept - taken, -kept)[kind]

    def end(self, kind: int, chunk: int, d: int, n: int) -> float:
        return self.ends.get((kind, chunk, d, n), -1.0)

    def worst_bubble(self, d: int = -1) -> float:
        worst = max(self.bubble)
        if d >= 0:
            worst = max(worst, max(self.allowance) - self.allowance[d])
        return worst

    def put(self, kind: int, chunk: int, d: int) -> None:
        n = self.counts[d][kind * 2 + chunk]
        change = self.change(kind, chunk, d)
        if (
            n >= self.m
            or self.held[d] + change > self.limit
            or not self._after_own(kind, chunk, d, n)
        ):
            raise _Failed(f"{kind=} {chunk=} {d=} {n=}")
        done = no_wait = self.clock[d] + self.cost(kind, chunk, d)
        other = self.source(kind, chunk, d)
        if other is not None:
            arrived = self.ends.get((kind, chunk, other, n))
            if arrived is None:
                raise _Failed(f"{kind=} {chunk=} {d=} {n=}: input not built")
            done = max(done, arrived + self.hop(kind, chunk, d) + self.cost(kind, chunk, d))
        if self.counts[d][0] > 0:
            self.bubble[d] += done - no_wait
        self.ends[kind, chunk, d, n] = self.clock[d] = done
        self.held[d] += change
        self.orders[d].append(Action(self.stage(kind, chunk, d), _KINDS[kind], n))
        if kind == _BACKWARD:
            self.owed[d].append(chunk)
        self.counts[d][kind * 2 + chunk] += 1

    def _after_own(self, kind: int, chunk: int, d: int, n: int) -> bool:
        """The pass before it on its own device (F0 before F1 before I1 before I0; a W
        after its backward) is placed."""
        if kind == _WEIGHT:
            return (_BACKWARD, chunk, d, n) in self.ends
        slot = kind * 2 + chunk
        return slot == 0 or (divmod(slot - 1, 2) + (d, n)) in self.ends

    def put_weight(self, d: int) -> None:
        if not self.owed[d]:
            raise _Failed(f"device {d}: no W owed")
        self.put(_WEIGHT, self.owed[d].popleft(), d)

    def run(self) -> None:
        _warm_up(self)
        for _ in range(2 * self.m):
            _steady_round(self)
        for d in range(self.p):
            while self.owed[d]:
                self.put_weight(d)


def _warm_up(b: _Builder) -> None:
    p, m = b.p, b.m
    for d in range(p):
        b.put(_FORWARD, 0, d)
    for d in range(p - 1, -1, -1):  # chunk-0 forwards above while they fit and are early
        if d < p - 1:
            back = b.end(_FORWARD, 1, d + 1, 0) + b.hop(_FORWARD, 1, d)
            room = b.problem.taken_bytes[d] * (2 + 2 * d)
            while (
                b.held[d] + room <= b.limit
                and b.clock[d] + b.cost(_FORWARD, 0, d) <= back
                and b.counts[d][0] < m
            ):
                for above in range(d + 1):
                    b.put(_FORWARD, 0, above)
        b.put(_FORWARD, 1, d)
    chunk = 0
    for d in range(1, p):  # forwards of both chunks in turn, until level with the device above
        idle = 0
        while sum(b.counts[d][:2]) < sum(b.counts[d - 1][:2]) or (
            b.counts[d][1] <= b.counts[d - 1][1] < m
        ):
            before = sum(map(sum, b.counts))
            for below in range(p - 1, d - 1, -1):
                if b.counts[below][chunk] < m:
                    b.put(_FORWARD, chunk, below)
            chunk = 1 - chunk
            idle = idle + 1 if sum(map(sum, b.counts)) == before else 0
            if idle > 2:
                raise _Failed(f"device {d}: the warm-up makes no progress")


def _steady_round(b: _Builder) -> None:
    p, m = b.p, b.m
    for d in range(p):  # room for a backward's bytes
        while b.held[d] + b.change(_BACKWARD, 0, d) > b.limit:
            b.put_weight(d)
    firsts, seconds = [], []
    for d in range(p):
        if b.counts[d][3] >= b.counts[d][2]:
            firsts.append(d)
        elif d == p - 1 or b.end(_BACKWARD, 1, d + 1, b.counts[d][3]) >= 0 or b.counts[d][2] >= m:
            seconds.append(d)
        else:
            firsts.append(d)
    for d, chunk in [(d, 1) for d in reversed(seconds)] + [(d, 0) for d in firsts]:
        n = b.counts[d][2 + chunk]
        other = b.source(_BACKWARD, chunk, d)
        arrival = None if other is None else b.end(_BACKWARD, chunk, other, n)
        _fill(b, d, arrival, b.hop(_BACKWARD, chunk, d), chunk == 1 or b.fill_backward)
        b.put(_BACKWARD, chunk, d)
    for d in range(p):
        chunk = _next_forward(b, d)
        if chunk is None:
            continue
        while b.held[d] + b.change(_FORWARD, chunk, d) > b.limit:
            b.put_weight(d)
        n = b.counts[d][chunk]
        other = b.source(_FORWARD, chunk, d)
        arrival = None if other is None else b.end(_FORWARD, chunk, other, n)
        _fill(b, d, arrival, b.hop(_FORWARD, chunk, d), b.fill_forward)
        b.put(_FORWARD, chunk, d)


def _fill(b: _Builder, d: int, arrival: float | None, hop: float, one_more: bool) -> None:
    """Before a pass whose input ends at ``arrival`` (None: from its own device), the owed W
    passes that end before the input is there; and, with ``one_more``, one more where the
    wait would still exceed the largest bubble allowed."""
    weight_cost = lambda: b.cost(_WEIGHT, b.owed[d][0], d)  # noqa: E731
    while b.owed[d] and arrival is not None and arrival + hop >= b.clock[d] + weight_cost():
        b.put_weight(d)
    if arrival is None:  # the builder then reads the last W's end
        arrival, hop = b.end(_WEIGHT, 1, b.p - 1, b.m - 1), b.latency
    if b.owed[d] and arrival + hop - b.clock[d] > b.worst_bubble(d) - b.bubble[d]:
        if one_more:
            b.put_weight(d)


def _next_forward(b: _Builder, d: int) -> int | None:
    """The chunk of the device's next forward: chunk 0 while it leads, chunk 1 where it
    has come back (or on the last device), else chunk 0 where it has arrived."""
    counts, m = b.counts[d], b.m
    if counts[1] >= m:
        return None
    if counts[1] >= counts[0]:
        return 0
    if d == b.p - 1 or b.end(_FORWARD, 1, d + 1, counts[1]) >= 0:
        return 1
    if counts[0] < m and (d == 0 or b.end(_FORWARD, 0, d - 1, counts[0]) >= 0):
        return 0
    return None
