"""``pipesim plan``: the fastest configuration that fits, every candidate simulated.

Given a model, a cluster and a number of GPUs, the planner answers "how should I run this
job?" in four passes, each a plain function of the one before, each a module here:

1. **space** (``space``): every layout and pipeline choice, as scenario keys;
2. **prune** (``prune``): combinations that cannot run, and candidates that cannot
   fit in the GPU's memory, found by walking each schedule without simulating it; every
   pruned candidate is counted under its reason;
3. **fold, bound and score** (``fold``, ``bound``, ``bounding``, ``score``): candidates
   that are the same step under another name once; a floor under each survivor's step
   time; then the exact timelines on the fast evaluator, lowest floor first, of only
   those whose floor can still change the results or the front, shared between
   candidates whose timeline inputs are equal, on local processes or a Dask cluster; a
   scored candidate is a ``PlanRow`` (``row``);
4. **rank and confirm** (``rank``, ``planner``): fastest first; the top ``confirm``
   candidates are built again from scratch as the scenario ``--emit`` writes and simulated
   with the SimPy engine. Any difference beyond 1e-9 relative is a bug, raised as
   PlanMismatch.

``explain`` takes the winner's step apart term by term against the runner-up's. Beside
the passes: ``digests`` (a step's inputs by value, for the fold and the timeline cache),
``chunks`` (how candidates are cut for the workers, so that each schedule is built by one
of them) and ``warm`` (numba's loops loaded once before the workers fork); one set of
local workers serves the assessment and every wave of scoring, keeping its caches.

Closed-form planners (bubble = (p-1)/m) misjudge zero-bubble, V-shape and bidirectional
schedules, uneven stages and real links; here every number is a simulated step.

    >>> result = plan(read_mapping(path), path, gpus=64)
    >>> result.results[0].step_time_ms, describe(result.results[0])
"""

from pipesim.analysis.plan.axes import DELAY_AXIS, EXPERT_AXIS
from pipesim.analysis.plan.explain import Breakdown, PlanExplanation, explain_plan
from pipesim.analysis.plan.planner import (
    Plan,
    PlanMismatch,
    PlanSoFar,
    Stop,
    confirm_top,
    plan,
    run_emitted,
)
from pipesim.analysis.plan.prune import memory_program, peak_activation_bytes
from pipesim.analysis.plan.rank import describe, distinct, emit_mapping, pareto, rank
from pipesim.analysis.plan.row import METRICS, PlanRow
from pipesim.analysis.plan.score import Outcome, Scorer
from pipesim.analysis.plan.space import (
    AXIS_ATTRIBUTES,
    Candidate,
    PlanError,
    Space,
    build_space,
    enumerate_space,
)

__all__ = [
    "AXIS_ATTRIBUTES",
    "DELAY_AXIS",
    "EXPERT_AXIS",
    "METRICS",
    "Breakdown",
    "Candidate",
    "Outcome",
    "Plan",
    "PlanError",
    "PlanExplanation",
    "PlanMismatch",
    "PlanRow",
    "PlanSoFar",
    "Scorer",
    "Space",
    "Stop",
    "build_space",
    "confirm_top",
    "describe",
    "distinct",
    "emit_mapping",
    "enumerate_space",
    "explain_plan",
    "memory_program",
    "pareto",
    "peak_activation_bytes",
    "plan",
    "rank",
    "run_emitted",
]
