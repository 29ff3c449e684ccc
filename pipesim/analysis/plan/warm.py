"""numba's loops loaded once in the planner's own process, before its workers fork.

A plan on local processes runs on one set of worker processes, each a fork of the
planner's process (``pipesim.analysis.executor.KeptPool``). A worker that finds numba's
compiled loops missing imports numba and loads them from numba's disk cache (the V-shape
squeeze of ``pipesim.schedules.policies.squeeze_loop`` and the fast evaluator's sweep),
about a second of each worker's time. Loaded once in the planner's process first, they
are in every fork from the start. A small plan (``LOAD_AFTER`` candidates) does not pay
for it and leaves numba unloaded.
"""

from __future__ import annotations

from pipesim.schedules import get_schedule
from pipesim.schedules.policies.squeeze_loop import load_compiled
from pipesim.sim.costs import uniform_costs
from pipesim.sim.fast import EvaluatorCache, fast_simulate

LOAD_AFTER = 2_000  # candidates to assess on worker processes


def load_compiled_loops() -> None:
    """Load numba's squeeze and the compiled sweep (the C one where the install built
    it, else numba's) into this process (nothing where numba is missing)."""
    if not load_compiled():
        return
    schedule = get_schedule("1f1b", 2, 2, 1)  # the smallest sweep, on numba's loop
    fast_simulate(schedule, uniform_costs(2, 1.0, 2.0), cache=EvaluatorCache(compiled=True))


__all__ = ["LOAD_AFTER", "load_compiled_loops"]
