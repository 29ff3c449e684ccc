"""Where numba cannot be imported and no C loop was built, ``run --evaluator fast``,
``sweep`` and ``plan`` say once on stderr that the fast evaluator sweeps in plain Python
and how much slower that is; with either, or on the engine, nothing is said."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from pipesim.cli import fallback, main

SCENARIO = "scenarios/seed-pipelined.yaml"


@pytest.fixture
def without_numba(monkeypatch):
    monkeypatch.setattr(fallback, "numba_installed", lambda: False)
    monkeypatch.setattr(fallback, "native_built", lambda: False)
    monkeypatch.setattr(fallback, "_said", [])


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def said(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "numba is not installed" in line]


def test_run_on_the_fast_evaluator_says_it_once(without_numba):
    first = invoke("run", SCENARIO, "--evaluator", "fast")
    assert first.exit_code == 0
    [line] = said(first.stderr)
    assert line.startswith("pipesim: note: ")
    assert f"plain Python, {fallback.SLOWDOWN} slower" in line
    again = invoke("run", SCENARIO, "--evaluator", "fast")  # the same process: not again
    assert again.exit_code == 0 and said(again.stderr) == []


def test_the_engine_needs_no_numba(without_numba):
    done = invoke("run", SCENARIO, "--evaluator", "simpy")
    assert done.exit_code == 0 and said(done.stderr) == []


def test_sweep_says_it_after_its_output(without_numba, tmp_path):
    out = tmp_path / "sweep.csv"
    done = invoke("sweep", SCENARIO, "--grid", "pipeline.microbatches=4,8", "-o", str(out))
    assert done.exit_code == 0, done.output
    assert out.exists() and len(said(done.stderr)) == 1


@pytest.mark.parametrize("numba, c", [(True, False), (False, True)])
def test_nothing_is_said_where_a_compiled_loop_is_there(monkeypatch, numba, c):
    monkeypatch.setattr(fallback, "_said", [])
    monkeypatch.setattr(fallback, "numba_installed", lambda: numba)
    monkeypatch.setattr(fallback, "native_built", lambda: c)
    done = invoke("run", SCENARIO, "--evaluator", "fast")
    assert done.exit_code == 0 and said(done.stderr) == []


def test_numba_is_found_here():
    assert fallback.numba_installed()  # the test install has numba: it is a dependency
