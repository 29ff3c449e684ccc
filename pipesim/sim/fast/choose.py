"""Two evaluators, one answer: choose between the SimPy engine and the fast sweep.

The SimPy engine (``pipesim.sim.engine``) is the reference: it runs anything, including
channels shared by several senders, random durations and link times, blocking sends and
torch's runtime posts. The fast evaluator (``pipesim.sim.fast``) computes the same
timeline for deterministic scenarios as one longest-path sweep over the dependency graph,
for sweeps, planning and schedule search. Where both apply they agree to floating-point
equality (DESIGN.md, "Two evaluators, one answer").

``evaluator``: ``"auto"`` takes the fast one wherever it is exact and the engine
elsewhere; ``"fast"`` insists (ValueError naming why where it cannot); ``"simpy"`` always
runs the engine. ``evaluate`` returns the Trace and the name of the one that ran.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pipesim.schedules.ir import Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.engine import DurationScale, check_arguments, simulate
from pipesim.sim.fast.evaluator import fast_simulate, unsupported
from pipesim.sim.links import Topology
from pipesim.sim.trace import Trace

EVALUATORS = ("auto", "fast", "simpy")


def fast_unsupported(
    schedule: Schedule,
    costs: Costs,
    topology: Topology | None = None,
    **simulate_kwargs: object,
) -> str | None:
    """None where the fast evaluator reproduces the engine exactly; else why not (one line).

    ``simulate_kwargs`` are those ``simulate`` would take: ``duration_scale`` or
    ``link_scale`` make a step random, which only the engine runs.
    """
    if simulate_kwargs.get("duration_scale") is not None:
        return "durations vary at random (duration_scale): only the engine draws them"
    if simulate_kwargs.get("link_scale") is not None:
        return "link times vary at random (link_scale): only the engine draws them"
    return unsupported(schedule, costs, topology)


def evaluate(
    schedule: Schedule,
    costs: Costs,
    topology: Topology | None = None,
    *,
    evaluator: str = "auto",
    tail_ms: Sequence[float] | None = None,
    tail_after_flush: bool = True,
    duration_scale: DurationScale | None = None,
    link_scale: Callable[[int, int], float] | None = None,
) -> tuple[Trace, str]:
    """Simulate one step with the chosen evaluator; return the Trace and ``"fast"`` or
    ``"simpy"``, the one that ran. Arguments as for ``simulate``."""
    if evaluator not in EVALUATORS:
        raise ValueError(f"unknown evaluator {evaluator!r}; allowed: {', '.join(EVALUATORS)}")
    engine_kwargs = dict(
        tail_ms=tail_ms,
        tail_after_flush=tail_after_flush,
        duration_scale=duration_scale,
        link_scale=link_scale,
    )
    if evaluator == "simpy":
        return simulate(schedule, costs, topology, **engine_kwargs), "simpy"
    check_arguments(schedule, costs, tail_ms)  # the engine's checks, for the sweep too
    reason = fast_unsupported(
        schedule, costs, topology, duration_scale=duration_scale, link_scale=link_scale
    )
    if reason is None:
        trace = fast_simulate(
            schedule, costs, topology, tail_ms=tail_ms, tail_after_flush=tail_after_flush
        )
        if trace is not None:
            return trace, "fast"
        # an invalid schedule or a deadlock: the engine raises its own error, with the grid
    elif evaluator == "fast":
        raise ValueError(f"the fast evaluator cannot run this scenario: {reason}")
    return simulate(schedule, costs, topology, **engine_kwargs), "simpy"


__all__ = ["EVALUATORS", "evaluate", "fast_unsupported"]
