"""A command imports what it uses: a table-only ``pipesim run`` loads neither pandas, nor
matplotlib, nor numba (each costs a good part of a second at start-up), and neither does
``import pipesim`` itself; each public name still arrives on first use. Nor does a run on
the fast evaluator load what only some runs use: SimPy (the engine's runs), tqdm (a bar
on a terminal), numpy.random (a Monte Carlo study), the schedule search (zb-auto, v-auto)
or the figure and HTML report modules (--gantt, --html)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "matplotlib", "numba", "scipy", "pyarrow", "dask", "torch")
# what a plain run on the fast evaluator leaves alone; each is loaded where it is used
SOME_RUNS = (
    "simpy",
    "tqdm",
    "numpy.random",
    "pipesim.search.auto",
    "pipesim.search.exact",
    "pipesim.plot.figures",
    "pipesim.plot.gantt",
    "pipesim.plot.memory",
    "pipesim.plot.html.training",
)


def loaded_after(code: str, watched: tuple[str, ...] = HEAVY) -> dict:
    """Run ``code`` in a fresh interpreter; which of ``watched`` it left loaded (under
    "heavy"), and its output."""
    probe = (
        f"{code}\nimport sys, json\nprint(json.dumps([m for m in {watched!r} if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return {"heavy": json.loads(done.stdout.splitlines()[-1]), "stdout": done.stdout}


def test_a_table_only_run_imports_no_heavy_library():
    found = loaded_after(
        "from pipesim.cli import main\n"
        "main(['run', 'scenarios/seed-pipelined.yaml'], standalone_mode=False)"
    )
    assert found["heavy"] == []
    assert "makespan          7.000 ms" in found["stdout"]  # and it did run the step


def run_code(*args: str) -> str:
    return f"from pipesim.cli import main\nmain({['run', *args]!r}, standalone_mode=False)"


@pytest.mark.parametrize(
    ("fmt", "shown"), [("table", "makespan          7.000 ms"), ("json", '"makespan_ms": 7.0,')]
)
def test_a_fast_run_loads_no_engine_bar_search_or_figures(fmt, shown):
    found = loaded_after(
        run_code("scenarios/seed-pipelined.yaml", "--format", fmt, "--evaluator", "fast"),
        SOME_RUNS,
    )
    assert found["heavy"] == []
    assert shown in found["stdout"]  # and it did run the step


def test_each_is_loaded_where_it_is_used():
    found = loaded_after(
        run_code("scenarios/seed-pipelined.yaml", "--evaluator", "simpy"), SOME_RUNS
    )
    assert found["heavy"] == ["simpy"]  # the engine's run loads SimPy, and only that
    assert "evaluator         simpy" in found["stdout"]


def test_importing_the_package_imports_no_analysis():
    found = loaded_after(
        "import pipesim, sys\nassert 'pipesim.analysis.run' not in sys.modules, 'eager'"
    )
    assert found["heavy"] == []


@pytest.mark.parametrize("name", ["run_scenario", "plan", "Report", "simulate_with"])
def test_a_public_name_arrives_on_first_use_and_is_kept(name):
    import pipesim

    value = getattr(pipesim, name)
    assert vars(pipesim)[name] is value  # the second lookup is a plain attribute
    assert name in dir(pipesim)


def test_an_unknown_name_is_an_attribute_error():
    import pipesim

    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        pipesim.nonesuch  # noqa: B018


def test_help_still_lists_every_command_in_order():
    from click.testing import CliRunner

    from pipesim.cli import COMMANDS, main

    shown = CliRunner().invoke(main, ["--help"]).output
    places = [shown.index(f"  {name} ") for name in COMMANDS]
    assert places == sorted(places)
