"""The V candidates built the ways the Zero Bubble authors build theirs, for ``v-auto``.

Four constructions, each in its own module, whose orders ``v-auto`` weighs beside its own
(the engine times them all on the scenario's costs and links, and the fastest within the
limit wins); the first three are re-expressed from the Zero Bubble authors' builders:

* V-Half and V-Min squeezed greedily with their W placed (``pipesim.search.v_patterns``);
* ZB-V built pass by pass on the real costs and the links' latency
  (``pipesim.search.v_timed``);
* the controllable-memory family, repeated, squeezed and reordered under the limit's count
  of chunk activations (``pipesim.search.v_memory``), where that count is at most half of
  1F1B's and the case is small enough for its passes;
* under the same tight limit, microbatches let in one per period and passes run by due
  time (``pipesim.search.v_paced``), a few periods.
"""

from __future__ import annotations

from collections.abc import Iterator

from pipesim.schedules.ir import Schedule
from pipesim.search.greedy import Problem
from pipesim.search.v_memory import memory_schedules
from pipesim.search.v_paced import paced_schedules
from pipesim.search.v_patterns import pattern_schedules
from pipesim.search.v_timed import timed_v_schedule

# The controllable-memory family runs where the limit holds at most this many chunk
# activations per stage of the model (half of 1F1B's, a V-Half's: 1F1B's device 0 holds
# 2D chunk activations over 2D stages), on at most this many devices and stage-microbatches:
# its blocks grow with the square of the devices and each block's grid with the
# microbatches (about a second at 8 devices and 24 microbatches).
MEMORY_FAMILY_CHUNKS = 0.5
MEMORY_FAMILY_DEVICES = 8
MEMORY_FAMILY_SIZE = 400
MEMORY_FAMILY_OFFERS = 6  # the best timed orders offered to the engine
# The paced orders under the same tight limit, on cases of more than this many actions:
# on smaller ones the search's insertion climbs (``pipesim.search.insertion``) already
# reach about as fast an order, and a different start there can end a little slower.
PACED_LEAST_ACTIONS = 250


def v_candidates(problem: Problem, name: str) -> Iterator[tuple[Schedule, str]]:
    """``(schedule, source)`` for each candidate of the four constructions."""
    for schedule in pattern_schedules(problem.devices, problem.microbatches, name):
        yield schedule, "greedy building block"
    timed = timed_v_schedule(problem, name)
    if timed is not None:
        yield timed, "zbv timed"
    chunks = limit_chunks(problem)
    size = problem.stages * problem.microbatches
    small = problem.devices <= MEMORY_FAMILY_DEVICES and size <= MEMORY_FAMILY_SIZE
    tight = chunks <= MEMORY_FAMILY_CHUNKS * problem.stages
    if small and tight:
        for schedule in memory_schedules(problem, chunks, MEMORY_FAMILY_OFFERS, name):
            yield schedule, "controllable-memory block"
    if tight and chunks > 0 and 3 * size > PACED_LEAST_ACTIONS:
        for schedule in paced_schedules(problem, name):
            yield schedule, "paced"


def limit_chunks(problem: Problem) -> int:
    """How many of the largest chunk activations the limit holds per device."""
    chunk_bytes = max(problem.taken_bytes, default=0.0)
    if chunk_bytes <= 0:
        return 0
    return int(problem.limit_bytes / chunk_bytes * (1 + 1e-9))


__all__ = [
    "MEMORY_FAMILY_CHUNKS",
    "MEMORY_FAMILY_OFFERS",
    "PACED_LEAST_ACTIONS",
    "limit_chunks",
    "v_candidates",
]
