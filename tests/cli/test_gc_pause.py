"""The cyclic garbage collector is paused at the command line's edge, for the whole of a
command, and nowhere else: the library called from Python leaves it as the caller set it."""

import gc
from pathlib import Path

import pytest
from click.testing import CliRunner

import pipesim
import pipesim.cli.run
import pipesim.cli.validate
from pipesim.cli import main
from pipesim.cli.gc_pause import no_cyclic_gc

SEED = str(Path(__file__).parents[2] / "scenarios" / "seed-pipelined.yaml")


def spy(monkeypatch, module, name: str) -> list[bool]:
    """Wrap ``module.name`` so each call records whether the collector was on."""
    seen: list[bool] = []
    real = getattr(module, name)

    def wrapped(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)
    return seen


def test_the_pause_restores_what_it_found():
    assert gc.isenabled()
    with no_cyclic_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with no_cyclic_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the caller had it off: it stays off
    finally:
        gc.enable()


@pytest.mark.parametrize(
    ("module", "name", "args"),
    [
        (pipesim.cli.run, "run_scenario", ["run", SEED]),
        (pipesim.cli.validate, "validate_scenario", ["validate", SEED]),
    ],
)
def test_a_command_runs_with_the_collector_paused_and_on_again_after(
    monkeypatch, module, name, args
):
    assert gc.isenabled()
    seen = spy(monkeypatch, module, name)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert seen == [False]
    assert gc.isenabled()


def test_a_failing_command_turns_the_collector_on_again(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipeline: {schedule: no-such-policy, devices: 2, microbatches: 2}\n")
    result = CliRunner().invoke(main, ["run", str(bad)])
    assert result.exit_code == 2, result.output
    assert gc.isenabled()


def test_the_library_leaves_the_collector_alone(monkeypatch):
    """``get_schedule`` and ``simulate`` never switch the collector off: a caller's process
    is the caller's."""
    switched_off: list[str] = []
    monkeypatch.setattr(gc, "disable", lambda: switched_off.append("gc.disable()"))
    scenario = pipesim.load_scenario(SEED)
    schedule = pipesim.get_schedule("interleaved-1f1b", 4, 8, 2)
    assert schedule.num_actions > 0
    trace = pipesim.simulate(scenario.schedule, scenario.costs, scenario.topology)
    assert trace.makespan_ms == pytest.approx(7.0)
    assert switched_off == []
    assert gc.isenabled()
