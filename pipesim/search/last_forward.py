"""The last forward: what a device holds when its last microbatch starts, case by case.

``pipesim.search.bound`` floors a device's step by its work plus the idle no order
avoids: before its first gradient arrives, and after its last forward, where the work
left must cover the last microbatch's way back. It takes the most work the memory can
leave after that forward, and so the most favourable state of the device then, whatever
that state costs earlier. This part goes through every state instead, and takes the
least of what each one forces.

A device with one stage ``s`` (``zb-auto``'s placement) first. Each stage runs its forwards,
input backwards and weight passes in microbatch order without loss
(``pipesim.search.exact_model`` shows the relabelling), so the last forward is ``F(s,
m-1)``; let ``phi`` be its start. At ``phi`` every other action of the device has ended
or not yet started. Say ``a`` microbatches are in flight there (``m-1`` and the ``a - 1``
before it whose ``I`` has not ended: ``m-a .. m-1``) and ``b`` wait only for their ``W``
(``m-a-b .. m-a-1``); they hold ``a x activation + b x weight-gradient part``, within
the limit. Then:

* after ``phi`` the device runs exactly ``left = F + a x (I + W) + b x W``, and the last
  microbatch still needs its round trip and what follows its ``I`` (``back = trip +
  max(W, chain below)``): ``makespan >= phi + max(back, left)``;
* before ``phi`` it ran all the rest, ``busy - left``. With ``a < m`` some ``I`` ended
  before ``phi``, so the first started before it, no earlier than the first gradient can
  arrive, and before it only the forwards that fit ran: ``phi >= warm_up + busy - left``
  (``warm_up`` as the device part counts it);
* ``phi`` is no earlier than the floors of ``pipesim.search.round_trips``: the ``m``-th
  forward start, the end of ``I(s, m-1-a)`` (it ended before ``phi``) and of ``W(s,
  m-a-b-1)``.

Every order is in one of the states, so the least over them of the largest of these is a
bound. At the limit 1F1B holds, the full in-flight state (``a = p`` at the first device,
no weight pass pending) pays the rest of the last microbatch's way back in idle, ``(p -
1)(F - W + 2 hop)``, which the device part leaves out; a state with weight passes
pending pays instead an ``I`` that had to end before ``phi`` (the limit is full, so a
pending ``W`` holds the next forward back). With 4 devices and 8 microbatches that is the
Zero Bubble H1 makespan ``m (F + I + W) + (p - 1)(F + I - W) + 4 (p - 1) hop``, the
optimum; with more microbatches per device a state with many pending weight passes can
keep the device busy as far as this device alone can tell, and the bound stays below it.

A V's device holds two stages ``u < v`` (chunk 0 and chunk 1). Its last forward is ``F(v,
m-1)``: every ``F(u, k)`` comes before ``F(v, k)``. A state is then ``x`` microbatches
whose ``I(v)`` has not ended (each holds both activations), ``y >= x`` whose ``I(u)`` has
not (the gradient reaches ``u`` after ``v``), and the weight passes pending beside them;
``left = F(v) + x (I + W)(v) + y (I + W)(u) +`` the pending ``W`` passes, ``phi`` floored
by the ends of ``I(v, m-1-x)`` and ``I(u, m-1-y)``, and ``back`` the round trip from
``v``. The pending weight passes enter only as a range of ``left``, from none to the most
that fit in the room left (counted as fractions): over it ``phi + max(back, left)`` only
grows and ``warm_up + busy - left + max(back, left)`` only shrinks, each from ``left =
back`` on, so the value nearest ``back`` gives the least either can force. Under a tight
limit (Zero Bubble V-Min's memory) this pays the V's long round trip per two microbatches
at the turn's device, which its work alone hides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipesim.search.fits import ROOM, counts_memory, how_many, room_bytes
from pipesim.search.greedy import Problem
from pipesim.search.round_trips import paced_ends

STATES = 1024  # states a device's walk looks at one by one; more are taken in ranges


def last_forward_ms(problem: Problem, chain, mine: list[int], warm_up: float, busy: float) -> float:
    """The least over the states at the start of the device's last forward (module
    docstring) of what each forces, for a device that holds the stages ``mine``, one or
    two of them (0 for more). ``chain``: the durations and chains as
    ``pipesim.search.bound`` counts them; ``warm_up`` (ms): the device's warm-up floor;
    ``busy`` (ms): all its work."""
    if len(mine) not in (1, 2):
        return 0.0
    paced = counts_memory(problem)
    stage = mine[-1]
    starts, levels = paced_ends(
        problem,
        stage,
        (chain.head[stage], chain.trip[stage], chain.forward[stage]),
        (chain.input, chain.weight),
        paced,
    )
    room = room_bytes(problem) if paced else math.inf
    floors = _Floors(starts[-1], levels, warm_up + busy)
    if len(mine) == 1:
        best = _one_stage(problem, chain, stage, floors, room)
    else:
        best = _two_stages(problem, chain, mine, floors, room)
    return 0.0 if best == math.inf else best


@dataclass(frozen=True, slots=True)
class _Floors:
    """What the states share: the floor of the last forward's start, the round trips'
    floors per stage of the device (deepest first), and the warm-up floor plus the work."""

    last_start: float
    levels: list
    warm_and_busy: float

    def least(self, phi: float, left: tuple[float, float], back: float, ended: bool) -> float:
        """The least the states with ``phi`` (their floor of the last forward's start) or
        later and work after it in ``left = (least, most)`` force: ``phi + max(back,
        left)``, and with an ``I`` ended before ``phi`` (``ended``) the warm-up floor
        plus the work before ``phi``. The first only grows with the work after ``phi``,
        the second only shrinks, both from ``back`` on: the work nearest ``back``."""
        work = min(max(back, left[0]), left[1])
        found = phi + max(back, work)
        if ended:
            found = max(found, self.warm_and_busy - work + max(back, work))
        return found


def _bytes(problem: Problem, stage: int) -> tuple[float, float]:
    taken = max(problem.taken_bytes[stage], 0.0)
    return taken, min(max(problem.weight_grad_bytes[stage], 0.0), taken)


def _blocks(first: int, last: int, outer: int):
    """``first .. last`` in consecutive ranges ``(lo, hi)``, one each where ``outer``
    times the count stays within ``STATES``, wider where it would not."""
    size = max(1, math.ceil(outer * (last - first + 1) / STATES))
    for lo in range(first, last + 1, size):
        yield lo, min(lo + size - 1, last)


def _one_stage(problem: Problem, chain, stage: int, floors: _Floors, room: float) -> float:
    """The states ``(a, b)`` of a device with one stage; a range of ``b`` at once takes
    the floor of its largest (the earliest ``W`` known ended) and the range of its work."""
    m = problem.microbatches
    inputs, weights = floors.levels[0].inputs, floors.levels[0].weights
    forward, input_, weight = chain.forward[stage], chain.input[stage], chain.weight[stage]
    back = chain.trip[stage] + max(weight, chain.below[stage])
    taken, grad = _bytes(problem, stage)
    best, most_a = math.inf, how_many(taken, room, m)
    for a in range(1, most_a + 1):
        floor = floors.last_start if a == m else max(floors.last_start, inputs[m - 1 - a])
        held = forward + a * (input_ + weight)
        for low, high in _blocks(0, how_many(grad, room - a * taken, m - a), most_a):
            phi = floor if a + high == m else max(floor, weights[m - a - high - 1])
            left = (held + low * weight, held + high * weight)
            best = min(best, floors.least(phi, left, back, a < m))
    return best


def _two_stages(problem: Problem, chain, mine: list[int], floors: _Floors, room: float) -> float:
    """The states of a device with two stages ``u < v`` (a V's), ``x`` microbatches
    whose ``I(v)`` has not ended and ``y >= x`` whose ``I(u)`` has not; the weight passes
    pending beside them are not enumerated: they add at most what fits in the room left
    (the fractional count) to the work after ``phi``. A range of ``y`` at once takes the
    floor of its largest and the work from its least to its most."""
    m, (u, v) = problem.microbatches, mine
    deep, shallow = floors.levels
    back = chain.trip[v] + max(chain.weight[v], chain.below[v])
    (taken_v, grad_v), (taken_u, grad_u) = _bytes(problem, v), _bytes(problem, u)
    pending = [(chain.weight[v], grad_v), (chain.weight[u], grad_u)]
    best, most_x = math.inf, how_many(taken_v + taken_u, room, m)
    for x in range(1, most_x + 1):
        floor = floors.last_start if x == m else max(floors.last_start, deep.inputs[m - 1 - x])
        held = chain.forward[v] + x * (chain.input[v] + chain.weight[v])
        for low, high in _blocks(x, m, most_x):
            spare = room - x * taken_v - low * taken_u
            if spare < -ROOM * max(room, 1.0):
                break
            phi = floor if high == m else max(floor, shallow.inputs[m - 1 - high])
            least = held + low * (chain.input[u] + chain.weight[u])
            most = least + (high - low) * (chain.input[u] + chain.weight[u])
            most += _fractional_ms(pending, max(spare, 0.0), m - x)
            best = min(best, floors.least(phi, (least, most), back, x < m))
    return best


def _fractional_ms(kinds: list[tuple[float, float]], room: float, each: int) -> float:
    """The most time actions of ``kinds`` (``(ms, bytes)``) can take with their bytes in
    ``room``, each count at most ``each``, counts taken as fractions (never below the
    whole answer)."""
    total = 0.0
    for duration, size in sorted(kinds, key=lambda k: -math.inf if k[1] <= 0 else -k[0] / k[1]):
        count = each if size <= 0 else min(each, room / size)
        total += count * duration
        room = max(room - count * max(size, 0.0), 0.0) if room != math.inf else room
    return total


__all__ = ["last_forward_ms"]
