"""A lower bound on the makespan of every order the search could return, without a solver.

The search finds a good order, not a proven best one. This module says how far from the
best it can be: the largest of a few durations that no valid order of the same actions
(per stage ``F``, ``I``, ``W``; or ``F``, ``B``), on the same placement, costs and links,
within the same per-device memory limit, can beat. The search's makespan over it is the
gap: 0 means the order found is optimal.

The bound holds for any timed schedule that keeps the engine's rules, whatever order each
device runs: a device runs one action at a time; ``F(s,i)`` starts after ``F(s-1,i)``
ended and its activation crossed the hop; ``I(s,i)`` after ``F(s,i)`` and after
``I(s+1,i)`` ended and its gradient crossed back; ``W(s,i)`` after ``I(s,i)``; a device
never holds more activation bytes than the limit. Messages that queue on a busy channel
or keep their sender busy only add time, so each hop counts its time on an idle link.

A full backward ``B`` is counted as an ``I`` of ``min(I, B)`` followed at once by a ``W``
of the rest: an order that runs ``B`` is then an order of the split actions that sends
its gradient and frees its bytes no earlier, so one bound covers both (1F1B is among the
search's candidates). Every action also pays ``Costs.overhead_ms``.

Notation, per stage ``s``: ``head(s)`` the forward chain before it (forwards and hops of
stages ``0..s-1``), the earliest ``F(s,i)`` can start; ``trip(s)`` the round trip from
the start of ``F(s,i)`` to the end of ``I(s,i)``: the forwards of stages ``s..S-1``, the
input backwards of the same stages, and every hop between them twice; ``drain(s)`` what
must follow the end of ``I(s,i)``: its own ``W``, or the input backwards and hops down to
some earlier stage ``t`` and ``W(t,i)`` after them. The parts of the bound:

* **a device's work** (``busy``: m times its stages' ``F + I + W``). Let ``iota`` be the
  start of its first ``I`` and ``e`` the end of its last. Before ``iota`` it can only run
  forwards, at most as many as its memory holds (nothing is freed before an ``I`` ends),
  and none before the head of its first stage; ``iota`` is no earlier than the first
  gradient can arrive (``head + trip - I`` of its deepest stage). After ``e`` it can only
  run ``W`` passes, at most as many as the limit keeps pending (each holds its
  weight-gradient bytes), while the gradient of that last ``I`` (at its first stage ``s``)
  still walks down: ``e >= iota - forwards + busy - W passes`` and ``makespan >= e +
  max(W passes, drain below s)``. So::

      makespan >= max(head, first gradient - forwards that fit) + busy
                  + max(0, chain below s - W passes that fit)

  The same holds with the last forward of its deepest stage in place of ``e``: that
  microbatch still needs ``trip + drain``, and the work left on the device is at most
  that forward, its backwards, and an ``I`` and a ``W`` for each other microbatch in
  flight or a ``W`` for each waiting for one, as many as the memory holds beside it. (The
  warm-up term counts only when more forwards come than fit before ``iota``; else
  ``head``.)

* **round trips** (per stage ``s``, ``pipesim.search.round_trips``): a microbatch holds
  the activation of ``s`` (and of every earlier stage of the same device: it is still in
  flight there) until its ``I`` there ends, and the weight-gradient part until its ``W``
  ends, so the ``j``-th forward at ``s`` waits until enough of the earlier ones have come
  back to make room; their ``I`` ends at least ``trip(s)`` after their forward started.
  This floors every forward start ``phi_j`` (about ``ceil(m / k)`` round trips when ``k``
  fit, the forwards back to back when memory does not bind), and::

      makespan >= (m-th I end) + drain(s),    makespan >= phi_j + (m - j + 1) x work

  where ``work`` is what a microbatch not yet started at ``s`` still needs of the device.
  With ``m = 1`` this is the critical path of one microbatch through all stages.

* **serial round trips** (per device, ``pipesim.search.serial``): the same pacing with
  what the round trips leave out under a tight limit: a V's chunk-0 forward waits for room
  beside the chunk-1 forwards before it, the earlier microbatches hold the bytes of every
  stage of the device, and the backward and weight passes that give the bytes back run
  one at a time on the device, between its forwards (a one-machine bound on what must
  have ended before each forward).

* **the last forward** (per device with one or two stages, ``pipesim.search.last_forward``): the
  device part above takes the most work the memory can leave after the last forward,
  whatever that state costs before it. Going through every state instead (``a`` in
  flight, ``b`` waiting for their ``W``), each floors that forward's start (the warm-up
  floor plus the work done before it; the round-trip floor of the ``I`` and ``W`` it
  implies ended) and leaves ``F + a (I + W) + b W`` against the last way back; the least
  over the states is a bound. It meets the Zero Bubble H1 makespan at 1F1B's memory on
  few microbatches, and on a V under a tight limit it counts the long round trip.

* **one device alone** (``pipesim.search.one_device``): each device's own actions in the
  order it picks, the rest of the pipeline reduced to the chains above as time lags (and
  each other stage's forwards and input backwards run one at a time), its memory limit
  kept; a best-first search over those orders, within a budget of states spent on the
  devices whose other parts are highest first, floors the best of them. On a V under a
  tight limit it sees how the two chunks share the room through the warm-up, the steady
  state and the end, which the parts above count only one at a time.

* **the end-of-step tail** (``with_tail``, where the scenario has data parallelism): after
  the flush every device reduces its gradients, so the longest tail adds to every part;
  overlapped (``dp_overlap``), device d's tail starts when its own last action ends, no
  earlier than its warm-up floor plus all its work, and whichever device ends last still
  runs its own tail, at least the shortest.

The largest part is the bound, lowered by ``MARGIN`` so that float sums taken in another
order than the engine's never lift it above an optimal makespan.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.search.fits import counts_memory, held_by_one, in_flight, most_ms, room_bytes
from pipesim.search.greedy import Problem
from pipesim.search.last_forward import last_forward_ms
from pipesim.search.one_device import alone_ms
from pipesim.search.round_trips import paced_ends
from pipesim.search.serial import serial_ms
from pipesim.search.tail import Tail

MARGIN = 1e-9  # relative: the bound is lowered by this much


@dataclass(frozen=True, slots=True)
class LowerBound:
    """No valid order is faster than ``makespan_ms``; ``part`` says which part gives it."""

    makespan_ms: float
    part: str


@dataclass(frozen=True, slots=True)
class _Chains:
    """Per stage durations as the bound counts them (ms), and the chains they make."""

    forward: tuple[float, ...]
    input: tuple[float, ...]  # the backward that sends the gradient on (I, or B's share)
    weight: tuple[float, ...]  # what may follow it on the device (W, or the rest of B)
    head: tuple[float, ...]
    trip: tuple[float, ...]
    below: tuple[float, ...]  # after I(s) ends: the chain down to some W(t), t < s


def chains(problem: Problem, backward_ms: tuple[float, ...], overhead_ms: float) -> _Chains:
    """The durations and chains of ``problem``; ``backward_ms``: each stage's full B."""
    stages, hop = problem.stages, problem.hop_ms
    forward = tuple(f + overhead_ms for f in problem.forward_ms)
    first = [min(i, b) for i, b in zip(problem.input_ms, backward_ms[:stages], strict=True)]
    input_ = tuple(i + overhead_ms for i in first)
    weight = tuple(
        max(min(w + overhead_ms, b - i), 0.0)
        for w, b, i in zip(problem.weight_ms, backward_ms[:stages], first, strict=True)
    )
    head = [0.0] * stages
    for s in range(1, stages):
        head[s] = head[s - 1] + forward[s - 1] + hop[s - 1]
    trip = [0.0] * stages
    for s in reversed(range(stages)):
        there_and_back = 0.0 if s == stages - 1 else trip[s + 1] + 2 * hop[s]
        trip[s] = forward[s] + input_[s] + there_and_back
    below = [0.0] * stages
    for s in range(1, stages):
        # down one hop and one I to s-1, then either its W or on down
        below[s] = hop[s - 1] + input_[s - 1] + max(weight[s - 1], below[s - 1])
    return _Chains(forward, input_, weight, tuple(head), tuple(trip), tuple(below))


def lower_bound(
    problem: Problem,
    backward_ms: tuple[float, ...],
    overhead_ms: float = 0.0,
    tail: Tail | None = None,
) -> LowerBound:
    """The largest of the parts (module docstring) for ``problem``, whose memory limit and
    placement are those of the search; ``backward_ms`` is each stage's full backward;
    ``tail``: the end-of-step work per device (``with_tail``)."""
    chain = chains(problem, backward_ms, overhead_ms)
    devices = range(problem.devices)
    work = [device_floor_ms(problem, chain, d) for d in devices]
    serial = serial_ms(problem, chain)
    last = [last_forward_floor_ms(problem, chain, d) for d in devices]
    parts = [(work[d], f"work of device {d}") for d in devices]
    for s in range(problem.stages):
        name = f"round trips of stage {s} (at most {in_flight(problem, s)} in flight)"
        parts.append((round_trips_ms(problem, chain, s), name))
    parts += [(serial[d], f"serial round trips of device {d}") for d in devices]
    parts += [(last[d], f"last forward of device {d}") for d in devices]
    ms, part = max(parts, key=lambda found: found[0])
    # each device's own parts: the one-device searches go to the highest first
    own = [max(work[d], serial[d], last[d]) for d in devices]
    alone, device = alone_ms(problem, chain, ms, own)
    if device >= 0:
        ms, part = alone, f"device {device} alone, in its best order"
    if tail is not None:
        ms, part = with_tail(problem, chain, tail, (ms, part))
    return LowerBound(max(ms, 0.0) * (1 - MARGIN), part)


def with_tail(
    problem: Problem, chain: _Chains, tail: Tail, found: tuple[float, str]
) -> tuple[float, str]:
    """The bound ``found`` (on the last compute end) lifted by the end-of-step work.

    After the flush, every device's tail starts when the last action ends: add the longest.
    Overlapped (``dp_overlap``), device d's starts when its own last action ends, which is
    no earlier than its warm-up floor plus all its work (``own_end_ms``); and whichever
    device ends last still runs its own tail, at least the shortest."""
    ms, part = found
    if tail.after_flush:
        return ms + tail.longest_ms, f"{part}, then the longest end-of-step all-reduce"
    shortest = min(max(t, 0.0) for t in tail.tail_ms)
    parts = [(ms + shortest, f"{part}, then the shortest end-of-step all-reduce")]
    for d in range(problem.devices):
        ends = own_end_ms(problem, chain, d) + max(tail.tail_ms[d], 0.0)
        parts.append((ends, f"work of device {d}, then its own all-reduce"))
    return max(parts, key=lambda each: each[0])


def stages_on(problem: Problem, device: int) -> list[int]:
    return [s for s in range(problem.stages) if problem.placement[s] == device]


def device_floor_ms(problem: Problem, chain: _Chains, device: int) -> float:
    """The device's work plus the idle no order avoids: before its first gradient arrives
    (what forwards cannot fill), and at the end, where neither the ``W`` passes that can
    wait nor the work left after its last forward covers the chain still to run."""
    mine = stages_on(problem, device)
    if not mine:
        return 0.0
    m, first, deepest = problem.microbatches, mine[0], mine[-1]
    room = room_bytes(problem) if counts_memory(problem) else float("inf")
    warm_up, busy = _warm_up_and_busy(problem, chain, mine, room)
    pending = most_ms([(chain.weight[s], problem.weight_grad_bytes[s]) for s in mine], room, m)
    ends = [warm_up + max(0.0, chain.below[first] - pending)]
    # After the last forward of its deepest stage: that microbatch's way back, against the
    # work left then (its own, and what the others in flight or waiting for W hold). When
    # more forwards come than fit before the first gradient, it comes after the warm-up.
    start = warm_up if m > in_flight(problem, deepest) else chain.head[first]
    back = chain.trip[deepest] + max(chain.weight[deepest], chain.below[deepest])
    ends.append(start + max(0.0, back - left_after_last_forward(problem, chain, mine, room)))
    return max(ends) + busy


def last_forward_floor_ms(problem: Problem, chain: _Chains, device: int) -> float:
    """The states at the device's last forward (``pipesim.search.last_forward``), for a
    device that holds one or two stages (0 otherwise)."""
    mine = stages_on(problem, device)
    if len(mine) not in (1, 2):
        return 0.0
    room = room_bytes(problem) if counts_memory(problem) else float("inf")
    warm_up, busy = _warm_up_and_busy(problem, chain, mine, room)
    return last_forward_ms(problem, chain, mine, warm_up, busy)


def own_end_ms(problem: Problem, chain: _Chains, device: int) -> float:
    """No order ends the device's own last action before its warm-up floor plus its work."""
    mine = stages_on(problem, device)
    if not mine:
        return 0.0
    room = room_bytes(problem) if counts_memory(problem) else float("inf")
    return sum(_warm_up_and_busy(problem, chain, mine, room))


def _warm_up_and_busy(problem: Problem, chain: _Chains, mine: list[int], room: float):
    """``(warm_up, busy)``: before ``warm_up`` the device can have done only forwards that
    fit (or none, before the head of its first stage); ``busy`` is all its work."""
    m = problem.microbatches
    busy = m * sum(chain.forward[s] + chain.input[s] + chain.weight[s] for s in mine)
    gradient = min(chain.head[s] + chain.trip[s] - chain.input[s] for s in mine)
    forwards = most_ms(
        [(chain.forward[s], problem.taken_bytes[s]) for s in mine], room, m, nested=True
    )
    return max(chain.head[mine[0]], gradient - forwards), busy


def left_after_last_forward(problem: Problem, chain: _Chains, mine: list[int], room) -> float:
    """The most work a device can have left once the last forward of its deepest stage
    starts: that forward and its microbatch's backwards, and for the others, an ``I`` and
    a ``W`` per stage where one is in flight, a ``W`` where one waits for it, as many as
    the room beside that microbatch holds."""
    deepest = mine[-1]
    own = chain.forward[deepest] + sum(chain.input[s] + chain.weight[s] for s in mine)
    kinds = []
    for s in mine:
        kinds.append((chain.input[s] + chain.weight[s], problem.taken_bytes[s]))
        kinds.append((chain.weight[s], problem.weight_grad_bytes[s]))
    others = problem.microbatches - 1
    left = room - held_by_one(problem, deepest)
    # one stage: each other microbatch is in flight there or waits for its W, not both
    total = others if len(mine) == 1 else None
    return own + most_ms(kinds, left, others, total)


def round_trips_ms(problem: Problem, chain: _Chains, stage: int) -> float:
    """The round trips of ``stage`` as memory paces them (``pipesim.search.round_trips``):
    the last input backward of each stage of the device up to ``stage``, then its own
    ``W`` or the chain below it; and each forward's floor plus the work of the microbatches
    not yet started there."""
    starts, levels = paced_ends(
        problem,
        stage,
        (chain.head[stage], chain.trip[stage], chain.forward[stage]),
        (chain.input, chain.weight),
        counts_memory(problem),
    )
    device, m = problem.placement[stage], problem.microbatches
    mine = [t for t in range(stage, -1, -1) if problem.placement[t] == device]
    found = max(
        max(level.inputs[-1] + max(chain.weight[t], chain.below[t]), level.weights[-1])
        for t, level in zip(mine, levels, strict=True)
    )
    each = sum(
        (chain.forward[t] if t >= stage else 0.0) + chain.input[t] + chain.weight[t]
        for t in stages_on(problem, device)
    )
    return max(found, max(start + (m - j) * each for j, start in enumerate(starts)))


__all__ = ["MARGIN", "LowerBound", "chains", "lower_bound", "own_end_ms", "with_tail"]
