"""Option values as a user types them: every bad one is one ``pipesim: error:`` line and
exit code 2 (never click's usage block, never a traceback), and ``--jobs`` never asks for
more processes than the machine has CPUs."""

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import pipesim.cli.sweep
from pipesim.cli import main

SCENARIOS = Path(__file__).parents[2] / "scenarios"
GPIPE = str(SCENARIOS / "gpipe-vs-1f1b.yaml")
PLAN = str(SCENARIOS / "plan-llama-70b-64xh100.yaml")
SMALL_SPACE = ("--space", "parallel.tensor=8", "--space", "pipeline.schedule=1f1b")


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def assert_one_error_line(result, *words):
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("pipesim: error: ")
    for word in words:
        assert word in line
    assert "Traceback" not in result.output and "Usage:" not in result.output


@pytest.mark.parametrize(
    "args, words",
    [
        (("sweep", GPIPE, "--grid", "pipeline.microbatches=4", "--jobs", "0"), ("--jobs", "x>=1")),
        (("plan", PLAN, "--gpus", "64", "--top", "0"), ("--top", "x>=1")),
        (
            ("sweep", GPIPE, "--grid", "pipeline.microbatches=4", "--executor", "threads"),
            ("--executor", "'threads'", "'local', 'dask'"),
        ),
        (("plan", PLAN, "--gpus", "64", "--executor", "threads"), ("--executor", "'dask'")),
        (("run", GPIPE, "--runs", "0"), ("--runs", "x>=1")),
        (("compare", GPIPE, "--runs", "x"), ("--runs", "'x'")),
        (("run", GPIPE, "--evaluator", "x"), ("--evaluator", "'fast'", "'simpy'")),
        (("explain", GPIPE, "--format", "csv"), ("--format", "'csv'", "'text', 'json'")),
        (("plan", PLAN), ("--gpus", "pipesim plan --help")),
        (("run", GPIPE, "--bogus"), ("--bogus", "pipesim run --help")),
        (("--bogus",), ("--bogus",)),
        (("bogus",), ("bogus",)),
        (("run",), ("SCENARIO", "pipesim run --help")),
        (("serve",), ("SCENARIO",)),
        (("run", GPIPE, "--runs"), ("--runs", "requires an argument")),
        (("run", GPIPE, "extra"), ("extra",)),
        # plan finds this only after planning; its "planning over" note must not come first
        (
            (
                "plan",
                PLAN,
                "--gpus",
                "64",
                "--space",
                "parallel.tensor=3",
                "--emit",
                "x.yaml",
                "--no-progress",
                "--jobs",
                "1000",
            ),
            ("no candidate fits",),
        ),
    ],
)
def test_a_bad_option_is_one_error_line(args, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_one_error_line(invoke(*args), *words)
    assert list(tmp_path.iterdir()) == []


def test_help_is_shown_as_click_shows_it():
    for args in (["--help"], ["run", "--help"], ["plan", "-h"]):
        result = invoke(*args)
        assert result.exit_code == 0 and result.stderr == ""
        assert result.stdout.startswith("Usage: ")


@pytest.mark.parametrize("command", ["run", "compare"])
def test_a_negative_seed_is_one_error_line(command):
    result = invoke(command, GPIPE, "--runs", "3", "--seed", "-1")
    assert_one_error_line(result, "--seed", "-1", "x>=0")


def test_jobs_are_capped_by_the_cpus_with_a_note(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    asked = []
    real = pipesim.cli.sweep.run_sweep

    def recording(*args, jobs, **kwargs):
        asked.append(jobs)
        return real(*args, jobs=jobs, **kwargs)

    monkeypatch.setattr(pipesim.cli.sweep, "run_sweep", recording)
    grid = ("--grid", "pipeline.microbatches=4,8", "--no-progress")
    result = invoke("sweep", GPIPE, *grid, "--jobs", "1000")
    assert result.exit_code == 0, result.output
    assert asked == [2]
    assert result.stderr.splitlines() == [
        "pipesim: note: --jobs 1000: capped at 2, the CPUs of this machine"
    ]
    assert invoke("sweep", GPIPE, *grid, "--jobs", "2").stderr == ""
    assert asked == [2, 2]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["explain", "scenarios/seed-pipelined.yaml", "--max-gaps", "٣"], "--max-gaps"),
        (["run", "scenarios/seed-pipelined.yaml", "--runs", "１２"], "--runs"),
        (["sweep", "scenarios/gpipe-vs-1f1b.yaml", "--max-points", "1_000"], "--max-points"),
        (
            ["serve", "scenarios/serve-bursty-trace.yaml", "--max-rate", "--max-search-s", "١"],
            "--max-search-s",
        ),
    ],
)
def test_a_number_in_other_digits_is_refused_not_read(args, option):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"pipesim: error: {option}: ")
    assert "in ASCII digits" in result.stderr and result.stderr.count("\n") == 1
