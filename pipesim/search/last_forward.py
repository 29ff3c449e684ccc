"""The last forward: what a device holds when its last microbatch starts, case by case.

``pipesim.search.bound`` floors a device's step by its work plus the idle no order
avoids: before its first gradient arrives, and after its last forward, where the work
left must cover the last microbatch's way back. It takes the most work the memory can
leave after that forward, and so the most favourable state of the device then, whatever
that state costs earlier. This part goes through every state instead, and takes the
least of what each one forces.

A device with one stage ``s`` (``zb-auto``'s placement). Each stage runs its forwards,
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
"""

from __future__ import annotations

import math

from pipesim.search.fits import counts_memory, how_many, room_bytes
from pipesim.search.greedy import Problem
from pipesim.search.round_trips import paced_ends


def last_forward_ms(problem: Problem, chain, stage: int, warm_up: float, busy: float) -> float:
    """The least over the states at the start of the last forward of ``stage`` (module
    docstring) of what each forces, for a device that holds ``stage`` alone (0 for one
    that holds more). ``chain``: the durations and chains as ``pipesim.search.bound``
    counts them; ``warm_up`` (ms): the device's warm-up floor; ``busy`` (ms): all its work."""
    device = problem.placement[stage]
    if sum(1 for d in problem.placement if d == device) != 1:
        return 0.0
    m, paced = problem.microbatches, counts_memory(problem)
    starts, levels = paced_ends(
        problem,
        stage,
        (chain.head[stage], chain.trip[stage], chain.forward[stage]),
        (chain.input, chain.weight),
        paced,
    )
    inputs, weights = levels[0].inputs, levels[0].weights
    forward, input_, weight = chain.forward[stage], chain.input[stage], chain.weight[stage]
    back = chain.trip[stage] + max(weight, chain.below[stage])
    taken = max(problem.taken_bytes[stage], 0.0)
    grad = min(max(problem.weight_grad_bytes[stage], 0.0), taken)
    room = room_bytes(problem) if paced else math.inf
    best = math.inf
    for a in range(1, how_many(taken, room, m) + 1):
        floor = starts[-1] if a == m else max(starts[-1], inputs[m - 1 - a])
        most_b = how_many(grad, room - a * taken, m - a)
        for b in range(most_b + 1):
            left = forward + a * (input_ + weight) + b * weight
            phi = floor if a + b == m else max(floor, weights[m - a - b - 1])
            found = phi + max(back, left)
            if a < m:
                found = max(found, warm_up + busy - left + max(back, left))
            best = min(best, found)
    return 0.0 if best == math.inf else best


__all__ = ["last_forward_ms"]
