"""The package's front doors: ``pipesim`` exports what a user of one step, compare, sweeps,
planning and serving needs, and the tutorials import from the fronts, not from the
modules behind them."""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest

import pipesim

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
# Where a tutorial may import from: the package, and the front of a layer package.
FRONTS = {"pipesim", "pipesim.plot", "pipesim.calibrate", "pipesim.schedules"}
FRONTS |= {"pipesim.analysis.plan"}


def test_every_exported_name_is_the_object_its_home_module_defines():
    assert sorted(pipesim.__all__) == sorted(set(pipesim.__all__))
    for name in pipesim.__all__:
        value = getattr(pipesim, name)
        home = importlib.import_module(value.__module__)
        assert getattr(home, name) is value, name


@pytest.mark.parametrize(
    "names",
    [
        ("load_serving", "run_serving", "find_max_rate", "run_serving_sweep"),
        ("plan", "explain_plan", "run_emitted", "Plan", "PlanRow"),
        ("compare_schedules", "scenario_for_schedule", "parse_grid", "run_sweep"),
        ("read_mapping", "vary", "apply_overrides"),
        ("simulate_with", "Evaluator", "EvaluatorCache", "critical_path", "explain"),
    ],
    ids=["serving", "planning", "compare and sweep", "varying a scenario", "evaluators"],
)
def test_each_task_has_its_names_at_the_front(names):
    assert set(names) <= set(pipesim.__all__)


def imported_modules(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pipesim"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("pipesim")}
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_tutorials_import_from_the_fronts(path: Path):
    cells = json.loads(path.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    modules = set().union(*(imported_modules(text) for text in code))
    assert modules, "a tutorial that imports nothing from pipesim"
    assert modules <= FRONTS, sorted(modules - FRONTS)
