"""Two evaluators, one answer: choose between the SimPy engine and the fast sweep.

The SimPy engine (``pipesim.sim.engine``) is the reference: it runs anything, including
channels shared by several senders, random durations and link times, blocking sends and
torch's runtime posts. The fast evaluator (``pipesim.sim.fast.evaluator``) computes the
same timeline for deterministic scenarios as one longest-path sweep over the dependency
graph, for sweeps, planning and schedule search. Where both apply they agree to
floating-point equality (DESIGN.md, "Two evaluators, one answer").

``Evaluator.AUTO`` takes the fast one wherever it is exact and the engine elsewhere;
``FAST`` insists (ValueError naming why where it cannot); ``SIMPY`` always runs the
engine. ``simulate_with`` returns the Trace and the evaluator that ran.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum

from pipesim.schedules.ir import Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.engine import DurationScale, check_arguments, simulate
from pipesim.sim.fast.cache import EvaluatorCache
from pipesim.sim.fast.evaluator import fast_simulate, unsupported
from pipesim.sim.links import Topology
from pipesim.sim.trace import Trace


class Evaluator(StrEnum):
    """Which evaluator computes a step: as asked for (``--evaluator``), any of the three;
    as ``Report.evaluator`` records it, the one that ran (``FAST`` or ``SIMPY``). A str
    enum: it prints, compares and writes to JSON and CSV as its value."""

    AUTO = "auto"
    FAST = "fast"
    SIMPY = "simpy"


def parse_evaluator(name: str) -> Evaluator:
    """``name`` as an Evaluator; ValueError naming the allowed ones where it is none."""
    try:
        return Evaluator(name)
    except ValueError:
        raise ValueError(f"unknown evaluator {name!r}; allowed: {', '.join(Evaluator)}") from None


def fast_unsupported(
    schedule: Schedule,
    costs: Costs,
    topology: Topology | None = None,
    *,
    cache: EvaluatorCache | None = None,
    **simulate_kwargs: object,
) -> str | None:
    """None where the fast evaluator reproduces the engine exactly; else why not (one line).

    ``simulate_kwargs`` are those ``simulate`` would take: ``duration_scale`` or
    ``link_scale`` make a step random, which only the engine runs. ``cache``: as for
    ``simulate_with``.
    """
    if simulate_kwargs.get("duration_scale") is not None:
        return "durations vary at random (duration_scale): only the engine draws them"
    if simulate_kwargs.get("link_scale") is not None:
        return "link times vary at random (link_scale): only the engine draws them"
    return unsupported(schedule, costs, topology, cache)


def simulate_with(
    schedule: Schedule,
    costs: Costs,
    topology: Topology | None = None,
    *,
    evaluator: Evaluator | str = Evaluator.AUTO,
    tail_ms: Sequence[float] | None = None,
    tail_after_flush: bool = True,
    optimizer_ms: Sequence[float] | None = None,
    duration_scale: DurationScale | None = None,
    link_scale: Callable[[int, int], float] | None = None,
    cache: EvaluatorCache | None = None,
) -> tuple[Trace, Evaluator]:
    """Simulate one step with the chosen evaluator; return the Trace and the evaluator
    that ran (``FAST`` or ``SIMPY``). Arguments as for ``simulate``; ``cache``: what
    repeated calls reuse (the fast evaluator's, see ``EvaluatorCache``; None: one for
    this call)."""
    evaluator = parse_evaluator(evaluator)
    engine_kwargs = dict(
        tail_ms=tail_ms,
        tail_after_flush=tail_after_flush,
        optimizer_ms=optimizer_ms,
        duration_scale=duration_scale,
        link_scale=link_scale,
    )
    if evaluator is Evaluator.SIMPY:
        return simulate(schedule, costs, topology, **engine_kwargs), Evaluator.SIMPY
    check_arguments(schedule, costs, tail_ms, optimizer_ms)  # the engine's, for the sweep too
    cache = cache or EvaluatorCache()
    reason = fast_unsupported(
        schedule,
        costs,
        topology,
        cache=cache,
        duration_scale=duration_scale,
        link_scale=link_scale,
    )
    if reason is None:
        trace = fast_simulate(
            schedule,
            costs,
            topology,
            tail_ms=tail_ms,
            tail_after_flush=tail_after_flush,
            optimizer_ms=optimizer_ms,
            cache=cache,
        )
        if trace is not None:
            return trace, Evaluator.FAST
        # an invalid schedule or a deadlock: the engine raises its own error, with the grid
    elif evaluator is Evaluator.FAST:
        raise ValueError(f"the fast evaluator cannot run this scenario: {reason}")
    return simulate(schedule, costs, topology, **engine_kwargs), Evaluator.SIMPY


__all__ = ["Evaluator", "fast_unsupported", "parse_evaluator", "simulate_with"]
