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

import importlib

# Each public name and the module it lives in, imported on first use (PEP 562): a command
# that needs one corner of pipesim, or ``import pipesim`` itself, loads only that corner.
_PUBLIC = {
    "Action": "pipesim.schedules.ir",
    "apply_overrides": "pipesim.scenario.load",
    "build_report": "pipesim.sim.metrics",
    "compare_schedules": "pipesim.analysis.compare",
    "ConstraintError": "pipesim.schedules.ir",
    "Costs": "pipesim.sim.costs",
    "critical_path": "pipesim.analysis.critical",
    "DeadlockError": "pipesim.sim.engine",
    "Evaluator": "pipesim.sim.fast",
    "EvaluatorCache": "pipesim.sim.fast",
    "explain": "pipesim.analysis.critical",
    "explain_plan": "pipesim.analysis.plan",
    "find_max_rate": "pipesim.analysis.max_rate",
    "get_schedule": "pipesim.schedules",
    "Link": "pipesim.sim.links",
    "list_schedules": "pipesim.schedules",
    "load_scenario": "pipesim.scenario.build",
    "load_serving": "pipesim.scenario.serving",
    "Mode": "pipesim.scenario.schema",
    "parse_grid": "pipesim.analysis.sweep",
    "Plan": "pipesim.analysis.plan",
    "plan": "pipesim.analysis.plan",
    "PlanRow": "pipesim.analysis.plan",
    "read_mapping": "pipesim.scenario.load",
    "Report": "pipesim.sim.metrics",
    "Result": "pipesim.analysis.run",
    "run_emitted": "pipesim.analysis.plan",
    "run_scenario": "pipesim.analysis.run",
    "run_serving": "pipesim.scenario.serving",
    "run_serving_sweep": "pipesim.analysis.serving_sweep",
    "run_sweep": "pipesim.analysis.sweep",
    "Scenario": "pipesim.scenario.build",
    "scenario_for_schedule": "pipesim.analysis.compare",
    "ScenarioError": "pipesim.scenario.build",
    "Schedule": "pipesim.schedules.ir",
    "ScheduleError": "pipesim.schedules.ir",
    "simulate": "pipesim.sim.engine",
    "simulate_with": "pipesim.sim.fast",
    "Topology": "pipesim.sim.links",
    "uniform_costs": "pipesim.sim.costs",
    "vary": "pipesim.scenario.vary",
}

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


def __getattr__(name: str) -> object:
    """A public name, imported from its module on first use and kept here (PEP 562)."""
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(_PUBLIC[name]), name)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
