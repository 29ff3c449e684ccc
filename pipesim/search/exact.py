"""The exact mode (``pipeline.search: exact``): the heuristic, then a constraint program.

The heuristic (``pipesim.search.auto``) finds a good order in seconds and a cheap bound
says how far from the best it can be. The exact mode goes on from there: it states the
whole problem, every order of the split actions on the same placement, costs, links and
memory limit, as a CP-SAT program (``pipesim.search.exact_model``, after the Zero Bubble
paper's ILP for small cases), starts the solver from the heuristic's order, and lets it
run for at most ``time_limit_s`` seconds. Three outcomes:

* the solver proves an order optimal: it is returned, with ``optimal: true`` and the
  bound equal to its makespan up to the solver's time resolution (a tick, 1e-6 to 1e-7
  of the step, per action on the longest chain; ``pipesim.search.exact_model``); where
  the cheap bound already meets the heuristic's makespan, the solver is not run at all;
* time runs out: the best order either side found, and the best bound proven so far
  (``optimal: false``), never below the cheap bound;
* the solver finds nothing better: the heuristic's order stands; the answer is never
  slower than the heuristic's, since both run on the engine and the faster is kept.

Whatever the solver's own timing says, the order it returns is run on the engine, and the
engine's makespan and peak are the ones reported, as for every candidate of the search.
A proven optimum is the same on every run; an order found when time runs out depends on
how far the solver got (its threads race), so two runs may differ there, never in being
at least as fast as the heuristic's.
OR-Tools is an optional extra (``pip install 'pipesim[exact]'``), imported only here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from pipesim.schedules.ir import Action, I, Kind, Schedule, ScheduleError, W, single_chain
from pipesim.search.auto import TOLERANCE, Evaluated, evaluate, placement_of, search_schedule
from pipesim.search.bound import MARGIN, chains
from pipesim.search.exact_model import ExactModel, Solved
from pipesim.search.greedy import Problem, make_problem
from pipesim.search.result import ExactUnavailable, SearchResult
from pipesim.search.tail import Tail, engine_options
from pipesim.sim.costs import Costs
from pipesim.sim.engine import DeadlockError, simulate
from pipesim.sim.links import Topology
from pipesim.sim.trace import Lane

DEFAULT_TIME_LIMIT_S = 10.0
OPTIMAL_WITHIN = 1e-8  # relative: the cheap bound meets the makespan (up to its margin)
INSTALL = "pip install 'pipesim[exact]'"


def require_solver() -> None:
    """Raise ExactUnavailable, saying how to install it, where OR-Tools is missing."""
    try:
        from ortools.sat.python import cp_model  # noqa: F401
    except ImportError:
        raise ExactUnavailable(
            f"the exact search needs OR-Tools (ortools>=9.10), which is not installed; "
            f"install it with: {INSTALL}"
        ) from None


def exact_schedule(
    name: str,
    devices: int,
    microbatches: int,
    costs: Costs,
    topology: Topology | None = None,
    memory_limit_bytes: float | None = None,
    progress: Callable[[int], None] | None = None,
    tail: Tail | None = None,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    workers: int | None = None,
) -> SearchResult:
    """The best order of the family ``name`` the solver finds or proves, within the limit.

    The arguments are ``search_schedule``'s; ``time_limit_s`` bounds the solver's run
    (the heuristic before it takes its usual seconds), ``workers`` its threads (None: the
    CPUs, at most 8). The result's ``heuristic_makespan_ms`` is the heuristic's own."""
    require_solver()
    began = time.perf_counter()
    heuristic = search_schedule(
        name, devices, microbatches, costs, topology, memory_limit_bytes, progress, tail
    )
    if heuristic.gap <= OPTIMAL_WITHIN:  # the cheap bound proves it: nothing to solve
        return replace(
            heuristic,
            seconds=time.perf_counter() - began,
            mode="exact",
            optimal=True,
            heuristic_makespan_ms=heuristic.makespan_ms,
        )
    placement = placement_of(name, devices)
    problem = make_problem(placement, microbatches, costs, topology, heuristic.limit_bytes)
    solved = solve(problem, costs, topology, tail, heuristic, time_limit_s, workers)
    found = _run_solved(solved, problem, costs, topology, tail, name)
    return replace(_combined(heuristic, solved, found), seconds=time.perf_counter() - began)


def _combined(heuristic: SearchResult, solved: Solved, found: Evaluated | None) -> SearchResult:
    """The heuristic's result with the solver's order where it runs faster within the
    limit, and its bound where it is higher."""
    best = Evaluated(
        heuristic.schedule,
        heuristic.makespan_ms,
        heuristic.peak_activation_bytes,
        heuristic.source,
    )
    if (
        found is not None
        and found.peak_bytes <= heuristic.limit_bytes * (1 + TOLERANCE) + TOLERANCE
        and found.makespan_ms < heuristic.makespan_ms * (1 - TOLERANCE)
    ):
        best = found
    bound_ms, part = heuristic.lower_bound_ms, heuristic.lower_bound_part
    if solved.bound_ms * (1 - MARGIN) > bound_ms:
        bound_ms = solved.bound_ms * (1 - MARGIN)
        part = f"exact model (CP-SAT, {solved.status.lower()})"
    return replace(
        heuristic,
        schedule=best.schedule,
        makespan_ms=best.makespan_ms,
        peak_activation_bytes=best.peak_bytes,
        candidates=heuristic.candidates + 1,
        source=best.source,
        lower_bound_ms=bound_ms,
        lower_bound_part=part,
        mode="exact",
        optimal=(solved.proven and best.makespan_ms <= bound_ms + solved.resolution_ms)
        or best.makespan_ms <= bound_ms * (1 + OPTIMAL_WITHIN),
        heuristic_makespan_ms=heuristic.makespan_ms,
    )


def solve(
    problem: Problem,
    costs: Costs,
    topology: Topology | None,
    tail: Tail | None,
    start: SearchResult,
    time_limit_s: float,
    workers: int | None = None,
) -> Solved:
    """Build the model of ``problem``, hint it with ``start``'s order as the engine times
    it, bounded above by its makespan and below by its cheap bound, and solve it."""
    trace = simulate(start.schedule, costs, topology, **engine_options(tail))
    model = ExactModel(
        problem,
        costs.backward_ms,
        costs.overhead_ms,
        tail,
        horizon_ms=trace.makespan_ms,
        floor_ms=start.lower_bound_ms,
    )
    model.hint(hint_starts(trace, problem, costs))
    return model.solve(time_limit_s, workers)


def hint_starts(trace, problem: Problem, costs: Costs) -> dict[Action, float]:
    """Each split action's start in a trace; a full ``B`` counts as its ``I`` then its
    ``W`` at once (durations as the model counts them)."""
    input_ms = chains(problem, costs.backward_ms, costs.overhead_ms).input
    starts: dict[Action, float] = {}
    for row in range(len(trace.start)):
        action = trace.actions[row]
        if trace.lane[row] != Lane.COMPUTE or action is None:
            continue
        begin = float(trace.start[row])
        if action.kind == Kind.B:
            starts[Action(action.stage, I, action.microbatch)] = begin
            after = begin + input_ms[action.stage]
            starts[Action(action.stage, W, action.microbatch)] = after
        else:
            starts[action] = begin
    return starts


def _run_solved(solved: Solved, problem: Problem, costs, topology, tail, name: str):
    """The solver's order run on the engine (None where it found none or it cannot run)."""
    if solved.orders is None:
        return None
    chain = single_chain(problem.stages, problem.microbatches)
    schedule = Schedule(solved.orders, problem.placement, chain, name)
    try:
        return evaluate(schedule, costs, topology, "exact (CP-SAT)", tail)
    except (ScheduleError, DeadlockError):
        return None


__all__ = [
    "DEFAULT_TIME_LIMIT_S",
    "INSTALL",
    "ExactUnavailable",
    "exact_schedule",
    "hint_starts",
    "require_solver",
    "solve",
]
