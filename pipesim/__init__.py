"""pipesim: where the time goes in a pipeline-parallel step.

The public API is small: load a scenario, simulate it, read the Report.

>>> from pipesim import load_scenario, run_scenario
>>> result = run_scenario(load_scenario("scenarios/seed-pipelined.yaml"))
>>> result.report.makespan_ms
7.0
"""

from pipesim.analysis.run import Result, run_scenario
from pipesim.scenario.build import Scenario, ScenarioError, load_scenario
from pipesim.schedules import get_schedule, list_schedules
from pipesim.schedules.ir import Action, ConstraintError, Schedule, ScheduleError
from pipesim.sim.engine import DeadlockError, simulate
from pipesim.sim.metrics import Report, build_report

__version__ = "0.1.0"

__all__ = [
    "Action",
    "ConstraintError",
    "DeadlockError",
    "Report",
    "Result",
    "Scenario",
    "ScenarioError",
    "Schedule",
    "ScheduleError",
    "build_report",
    "get_schedule",
    "list_schedules",
    "load_scenario",
    "run_scenario",
    "simulate",
]
