"""A command imports what it uses: a table-only ``pipesim run`` loads neither pandas, nor
matplotlib, nor numba (each costs a good part of a second at start-up), and neither does
``import pipesim`` itself; each public name still arrives on first use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "matplotlib", "numba", "scipy", "pyarrow", "dask", "torch")


def loaded_after(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; which of HEAVY it left loaded, and its output."""
    probe = (
        f"{code}\nimport sys, json\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
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
