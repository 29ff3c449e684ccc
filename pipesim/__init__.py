"""pipesim: where the time goes in a pipeline-parallel step.

The front door: everything a user of the library needs, by task, so a notebook or a
script imports from ``pipesim`` and not from the modules behind it.

>>> from pipesim import load_scenario, run_scenario
>>> result = run_scenario(load_scenario("scenarios/seed-pipelined.yaml"))
>>> result.report.makespan_ms
7.0

- one step: ``load_scenario``, ``run_scenario`` (a ``Result``: the ``Report``, the trace and
  its attachments), or by hand ``get_schedule`` + ``simulate`` (``Costs`` or
  ``uniform_costs``, a ``Topology`` of ``Link``) + ``build_report``;
  ``simulate_with`` picks the evaluator (``Evaluator``), an ``EvaluatorCache`` keeps a
  schedule's graph for repeated calls; ``critical_path`` and ``explain`` read a trace.
- varying a scenario: ``read_mapping``, then ``vary`` (the key paths ``--set`` takes) or
  ``apply_overrides`` (``--set``'s own ``key=value`` strings).
- comparing schedules and sweeping a grid: ``compare_schedules`` (``scenario_for_schedule``:
  one scenario under another schedule, cut into the chunks it needs), ``parse_grid`` and
  ``run_sweep``.
- planning a job: ``plan`` (a ``Plan`` of ranked ``PlanRow``), ``explain_plan``,
  ``run_emitted`` (a planned candidate through ``pipesim run``).
- serving: ``load_serving``, ``run_serving``, ``find_max_rate``, ``run_serving_sweep``.
"""

from pipesim.analysis.compare import compare_schedules, scenario_for_schedule
from pipesim.analysis.critical import critical_path, explain
from pipesim.analysis.max_rate import find_max_rate
from pipesim.analysis.plan import Plan, PlanRow, explain_plan, plan, run_emitted
from pipesim.analysis.run import Result, run_scenario
from pipesim.analysis.serving_sweep import run_serving_sweep
from pipesim.analysis.sweep import parse_grid, run_sweep
from pipesim.scenario.build import Scenario, ScenarioError, load_scenario
from pipesim.scenario.load import apply_overrides, read_mapping
from pipesim.scenario.schema import Mode
from pipesim.scenario.serving import load_serving, run_serving
from pipesim.scenario.vary import vary
from pipesim.schedules import get_schedule, list_schedules
from pipesim.schedules.ir import Action, ConstraintError, Schedule, ScheduleError
from pipesim.sim.costs import Costs, uniform_costs
from pipesim.sim.engine import DeadlockError, simulate
from pipesim.sim.fast import Evaluator, EvaluatorCache, simulate_with
from pipesim.sim.links import Link, Topology
from pipesim.sim.metrics import Report, build_report

__version__ = "0.1.0"

__all__ = [
    "Action",
    "ConstraintError",
    "Costs",
    "DeadlockError",
    "Evaluator",
    "EvaluatorCache",
    "Link",
    "Mode",
    "Plan",
    "PlanRow",
    "Report",
    "Result",
    "Scenario",
    "ScenarioError",
    "Schedule",
    "ScheduleError",
    "Topology",
    "apply_overrides",
    "build_report",
    "compare_schedules",
    "critical_path",
    "explain",
    "explain_plan",
    "find_max_rate",
    "get_schedule",
    "list_schedules",
    "load_scenario",
    "load_serving",
    "parse_grid",
    "plan",
    "read_mapping",
    "run_emitted",
    "run_scenario",
    "run_serving",
    "run_serving_sweep",
    "run_sweep",
    "scenario_for_schedule",
    "simulate",
    "simulate_with",
    "uniform_costs",
    "vary",
]
