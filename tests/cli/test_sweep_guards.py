"""``pipesim sweep`` refuses, in one line and before any point runs, a grid too large to
hold and a Dask scheduler it could never reach."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import pipesim.analysis.sweep as sweep_module
from pipesim.analysis.executor import check_executor
from pipesim.analysis.sweep import MAX_POINTS, SweepError, check_size, parse_grid
from pipesim.cli import main

SCENARIOS = Path(__file__).parents[2] / "scenarios"
GPIPE = str(SCENARIOS / "gpipe-vs-1f1b.yaml")
SERVE = str(SCENARIOS / "serve-bursty-trace.yaml")
THOUSAND = ",".join(str(n) for n in range(1, 1001))
HUGE = [
    "--grid",
    f"pipeline.microbatches={THOUSAND}",
    "--grid",
    f"costs.forward_ms={THOUSAND}",
    "--grid",
    f"costs.backward_ms={THOUSAND}",
]


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipesim: error: "), result.stderr
    return lines[0]


def refuse_to_run(*args, **kwargs):
    raise AssertionError("a point ran")


@pytest.mark.parametrize("scenario", [GPIPE, SERVE])
def test_a_grid_over_the_limit_is_refused_before_any_point_runs(monkeypatch, scenario):
    monkeypatch.setattr(sweep_module, "run_chunk", refuse_to_run)
    start = time.perf_counter()
    line = one_error_line(invoke("sweep", scenario, *HUGE))
    assert time.perf_counter() - start < 10  # never builds the 10**9 points
    assert "1,000,000,000 points" in line
    assert f"the limit of {MAX_POINTS:,}" in line
    assert "--max-points N" in line


def test_max_points_sets_the_limit_both_ways():
    grid = ["--grid", "pipeline.microbatches=4,8", "--grid", "pipeline.schedule=gpipe,1f1b"]
    line = one_error_line(invoke("sweep", GPIPE, *grid, "--max-points", "3"))
    assert "4 points, over the limit of 3" in line
    result = invoke("sweep", GPIPE, *grid, "--max-points", "4", "--no-progress")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("1f1b") == 2


def test_max_points_takes_a_positive_whole_number():
    one_error_line(invoke("sweep", GPIPE, "--grid", "pipeline.microbatches=4", "--max-points", "0"))


def test_check_size_counts_without_building_the_grid():
    axes = parse_grid([f"a={THOUSAND}", f"b={THOUSAND}"])
    assert check_size(axes, 1_000_000) == 1_000_000
    with pytest.raises(SweepError, match=r"^--grid: 1,000,000 points, over the limit of 999,999;"):
        check_size(axes, 999_999)


@pytest.mark.parametrize(
    "scheduler",
    [
        "inproc://x",
        "ucx://x",
        "inproc://192.0.2.2/1/1",  # another process's in-process cluster
        "tcp://host",
        "tcp://host:0",
        "tcp://host:70000",
        "tcp://host:port",
        "host:8786",
        "tls://host:8786",
    ],
)
def test_a_scheduler_that_is_not_tcp_host_port_is_one_line_at_once(monkeypatch, scheduler):
    monkeypatch.setattr(sweep_module, "run_chunk", refuse_to_run)
    message = f"--scheduler {scheduler!r}: allowed: tcp://HOST:PORT (a port from 1 to 65535)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_executor("dask", scheduler, ValueError)
    start = time.perf_counter()
    grid = ("--grid", "pipeline.microbatches=4,8")
    line = one_error_line(
        invoke("sweep", GPIPE, *grid, "--executor", "dask", "--scheduler", scheduler)
    )
    assert time.perf_counter() - start < 5
    assert line == f"pipesim: error: {message}"


@pytest.mark.parametrize(
    "scheduler", ["tcp://127.0.0.1:8786", "tcp://sched.example:1", "tcp://[::1]:8786"]
)
def test_tcp_host_port_is_accepted(scheduler):
    check_executor("dask", scheduler, ValueError)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_an_unreachable_scheduler_is_one_line_within_seconds():
    pytest.importorskip("distributed")
    port = closed_port()
    start = time.perf_counter()
    grid = ("--grid", "pipeline.microbatches=4,8")
    args = ("--executor", "dask", "--scheduler", f"tcp://127.0.0.1:{port}", "--no-progress")
    line = one_error_line(invoke("sweep", GPIPE, *grid, *args))
    assert time.perf_counter() - start < 8  # a 3 s connect timeout, and importing dask
    assert line == (
        f"pipesim: error: --scheduler tcp://127.0.0.1:{port}: no Dask scheduler answered within 3 s"
    )


def test_a_scenario_no_point_or_schedule_can_run_is_one_error_line(tmp_path):
    """Where every row would fail for one reason, that reason is the scenario's: exit 2 and
    one line naming the file and the field, as run says, and no table written."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "schema_version: 1\nname: t\npipeline: {schedule: 1f1b, devices: 2}\n"
        "costs: {forward_ms: 1, backward_ms: 2}\n"
    )
    out = tmp_path / "out.json"
    runner = CliRunner()
    run = runner.invoke(main, ["run", str(scenario)])
    compare = runner.invoke(
        main, ["compare", str(scenario), "--schedules", "gpipe,1f1b", "-o", str(out)]
    )
    assert compare.exit_code == run.exit_code == 2
    assert compare.stderr == run.stderr
    assert compare.stderr.startswith(f"pipesim: error: {scenario}: pipeline.microbatches: ")
    sweep = runner.invoke(
        main,
        [
            "sweep",
            "scenarios/gpipe-vs-1f1b.yaml",
            "--grid",
            "nokey=1,2",
            "--jobs",
            "1",
            "-o",
            str(out),
        ],
    )
    assert sweep.exit_code == 2
    assert sweep.stderr.count("\n") == 1
    assert sweep.stderr.startswith(
        "pipesim: error: scenarios/gpipe-vs-1f1b.yaml: nokey: unknown key"
    )
    assert not out.exists()
    # points that fail for their own values are rows of a report
    mixed = runner.invoke(
        main,
        [
            "sweep",
            "scenarios/gpipe-vs-1f1b.yaml",
            "--grid",
            "pipeline.microbatches=0,4",
            "--jobs",
            "1",
        ],
    )
    assert mixed.exit_code == 0
    assert "greater than or equal to 1" in mixed.stdout


def test_a_sweep_none_of_whose_points_ran_is_refused_with_the_first_reason():
    result = CliRunner().invoke(
        main,
        [
            "sweep",
            "scenarios/gpipe-vs-1f1b.yaml",
            "--grid",
            "pipeline.microbatches=0,-1",
            "--jobs",
            "1",
        ],
    )
    assert result.exit_code == 2
    assert result.stderr == (
        "pipesim: error: scenarios/gpipe-vs-1f1b.yaml: none of the 2 points ran; the first, "
        "pipeline.microbatches=0: pipeline.microbatches: Input should be greater than or "
        "equal to 1 (got 0)\n"
    )
