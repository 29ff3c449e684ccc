"""Round trips: how the memory limit paces the forwards of one stage.

A microbatch that starts ``F(s)`` on a device holds bytes there until it comes back:
the activation of ``s`` until ``I(s)`` ends, then the weight-gradient part until ``W(s)``
ends; and the same for every earlier stage ``t`` of the same device (the V's chunk 0),
whose ``I(t)`` ends later still, after the gradient has walked down from ``s`` to ``t``.
A new forward at ``s`` needs room for its own bytes (those of ``s`` and of every such
``t``) beside what the microbatches before it still hold, so it waits until enough of
their input backwards and weight passes have ended.

The walk keeps floors (earliest possible times) for the ``j``-th forward start at ``s``
(``phi_j``) and for the ``j``-th end of each of those backwards, one list per stage and
kind, each the larger of what can be proved:

* ``phi_j >= phi_(j-1) + F(s)`` (one device runs them one at a time), ``phi_1 >=
  head(s)``;
* the ``j``-th ``I(s)`` to end: ``>= phi_j + trip(s)`` (the first ``j`` to end include a
  microbatch whose forward started at ``phi_j`` or later) and ``>=`` the ``(j-1)``-th
  plus ``I(s)``; the ``j``-th ``I(t)``: the ``j``-th ``I`` of the stage above it on the
  device plus the chain of hops and input backwards between them, and the ``(j-1)``-th
  plus ``I(t)``; the ``j``-th ``W``: its ``I``'s plus ``W``, and the ``(j-1)``-th plus
  ``W``;
* memory: at ``phi_j`` the ``j - 1`` microbatches before hold at least ``activation x
  (those whose I has not ended) + weight-gradient part x (those whose I has ended and W
  not)`` per stage, and that plus the new forward's bytes fits the limit. An action whose
  floor is after ``T`` has not ended at ``T``, so counting as ended only those whose floor
  is ``<= T`` overstates what is held, never understates it: ``phi_j`` is at least the
  first ``T`` at which that count fits. (The weight-gradient part is counted at most at the
  activation's size, so that each end only gives back; the first ``T`` then only moves
  later as ``j`` grows, and one pass over the floors finds every ``phi_j``.)

Then ``makespan >= (m-th I(t) end) + max(W(t), drain(t))`` for each such stage ``t``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pipesim.search.fits import room_bytes
from pipesim.search.greedy import Problem


@dataclass(slots=True)
class _Level:
    """One stage of the device at or before the paced stage: its bytes and the floors under
    the ends of its input backwards and weight passes, in the order they end."""

    taken: float
    grad: float
    input_ms: float
    weight_ms: float
    down_ms: float  # from the end of the previous level's I to this one's: hops and I's
    inputs: list[float] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    seen_inputs: int = 0  # how many floors of each list are <= the time tried
    seen_weights: int = 0

    def held(self, before: int) -> float:
        """What ``before`` microbatches hold at least, by the floors seen so far."""
        inputs, weights = self.seen_inputs, self.seen_weights
        return self.taken * (before - inputs) + self.grad * (inputs - weights)

    def next_end(self) -> float:
        """The earliest floor not yet seen (inf when every one is)."""
        found = math.inf
        if self.seen_inputs < len(self.inputs):
            found = self.inputs[self.seen_inputs]
        if self.seen_weights < len(self.weights):
            found = min(found, self.weights[self.seen_weights])
        return found

    def see(self, time: float) -> None:
        while self.seen_inputs < len(self.inputs) and self.inputs[self.seen_inputs] <= time:
            self.seen_inputs += 1
        while self.seen_weights < len(self.weights) and self.weights[self.seen_weights] <= time:
            self.seen_weights += 1

    def add(self, input_end: float) -> float:
        """Floor the next microbatch's ends, its I no earlier than ``input_end``; returns
        the floor of its I's end, for the level below."""
        if self.inputs:
            input_end = max(input_end, self.inputs[-1] + self.input_ms)
        weight_end = input_end + self.weight_ms
        if self.weights:
            weight_end = max(weight_end, self.weights[-1] + self.weight_ms)
        self.inputs.append(input_end)
        self.weights.append(weight_end)
        return input_end


def levels_of(problem: Problem, stage: int, input_ms, weight_ms) -> list[_Level]:
    """The stages of ``stage``'s device up to it, ``stage`` first (its I ends first)."""
    device = problem.placement[stage]
    mine = [t for t in range(stage, -1, -1) if problem.placement[t] == device]
    levels, above = [], stage
    for t in mine:
        down = sum(problem.hop_ms[u] + input_ms[u] for u in range(t, above))
        taken = max(problem.taken_bytes[t], 0.0)
        grad = min(max(problem.weight_grad_bytes[t], 0.0), taken)
        levels.append(_Level(taken, grad, input_ms[t], weight_ms[t], down))
        above = t
    return levels


def paced_ends(
    problem: Problem,
    stage: int,
    forwards: tuple[float, float, float],
    durations: tuple[tuple[float, ...], tuple[float, ...]],
    paced: bool,
) -> tuple[list[float], list[_Level]]:
    """The floors of every forward start at ``stage`` and of every end at each of its
    levels (module docstring). ``forwards``: the head, the round trip and the forward of
    ``stage``; ``durations``: each stage's input backward and weight pass as the bound
    counts them; ``paced``: whether the memory arguments apply."""
    first_start, trip_ms, forward_ms = forwards
    levels = levels_of(problem, stage, *durations)
    budget = room_bytes(problem) - sum(level.taken for level in levels)
    starts, time = [], -math.inf
    for j in range(problem.microbatches):
        start = starts[-1] + forward_ms if j else first_start
        if j and paced:
            time = _first_fit(levels, j, budget, time)
            start = max(start, time)
        starts.append(start)
        end = start + trip_ms
        for level in levels:
            end = level.add(end + level.down_ms)
    return starts, levels


def _first_fit(levels: list[_Level], before: int, budget: float, time: float) -> float:
    """The first time, from ``time`` on, at which what ``before`` microbatches hold (by
    the floors) leaves ``budget`` bytes for a new forward."""
    for level in levels:
        level.see(time)
    while sum(level.held(before) for level in levels) > budget:
        later = min(level.next_end() for level in levels)
        if later == math.inf:
            break  # nothing left to give back: the limit is below one microbatch
        time = later
        for level in levels:
            level.see(time)
    return time


__all__ = ["levels_of", "paced_ends"]
