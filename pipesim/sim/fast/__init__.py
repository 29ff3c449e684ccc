"""The fast evaluator: a deterministic step as one longest-path sweep, without SimPy.

The front: ``simulate_with`` runs a step on the evaluator asked for (``Evaluator``: auto,
fast or simpy) and says which ran; ``fast_unsupported`` says why the sweep cannot
reproduce the engine, or None; an ``EvaluatorCache`` held by the caller keeps what
repeated calls reuse. Inside, one idea a module:

* ``choose``: which evaluator runs a step (the engine or the sweep);
* ``evaluator``: the fast evaluator itself, durations and link times in, Trace out;
* ``index``: a schedule's dependency graph as flat arrays, from the schedule's columns
  (``pipesim.schedules.columns``), where the validator's verdict says the engine would
  run it;
* ``kernel``: the longest-path sweep over that graph, compiled by numba where installed;
* ``native``: the same sweep compiled from C (``sweep.c``) at install, where it could be;
* ``rows``: the Trace from the sweep's times;
* ``cache``: what repeated calls reuse, on an object the caller holds.
"""

from pipesim.sim.fast.cache import EvaluatorCache
from pipesim.sim.fast.choose import Evaluator, fast_unsupported, parse_evaluator, simulate_with
from pipesim.sim.fast.evaluator import fast_simulate

__all__ = [
    "Evaluator",
    "EvaluatorCache",
    "fast_simulate",
    "fast_unsupported",
    "parse_evaluator",
    "simulate_with",
]
