"""Ctrl-C from the command line, as a user sends it (issue 20): ``pipesim plan``,
``sweep``, ``serve`` and a Monte Carlo ``run`` stop at once, with exit code 130 and the one
line ``pipesim: interrupted``, no worker process left, and, with
``--partial-on-interrupt``, a partial output that is valid and says it is partial.

Each test starts ``python -m pipesim`` in a process of its own, waits until it is at work
(its workers exist, or its progress bar, on a pseudo-terminal as a user's, counts), sends
SIGINT to its process group (as a terminal does) or to the main process alone, and reads
the outcome. How long the stop took is judged only by the ``timing`` tests (against one
second, CI's tolerant step); the others allow a busy machine a generous ``PATIENCE_S``.
"""

from __future__ import annotations

import csv
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
import yaml

import pipesim
from tests.analysis.test_plan import small_base
from tests.cli.test_signals import alive, all_dead, children

SCENARIOS = Path(__file__).parents[2] / "scenarios"
PATIENCE_S = 60  # for a busy machine to start the command, or to stop it
STOP_S = 1.0  # what a user waits for after Ctrl-C (judged by the timing tests)
INTERRUPTED = "pipesim: interrupted"

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2,
    reason="reads /proc, and needs two CPUs for two worker processes",
)


@pytest.fixture
def long_plan(tmp_path) -> Path:
    """The small planning scenario at 2,048 samples a step: 41,472 candidates on 8 GPUs,
    half a minute of exhaustive scoring on one CPU (long steps: a fast machine's plan is
    still at work a second after its bar moves), seconds of which each test uses."""
    base = small_base()
    base["model"]["global_batch"] = 2048
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(base))
    return path


def plan_args(scenario: Path, jobs: int, *extra: str) -> tuple[str, ...]:
    """A plan that runs for a while: --exhaustive, or the floors would leave it a second."""
    return ("plan", str(scenario), "--gpus", "8", "--jobs", str(jobs), "--exhaustive", *extra)


# a sweep of 200 points of 5,000 microbatches on 8 devices: a minute of work on 2 CPUs
SWEEP = (
    "sweep",
    str(SCENARIOS / "gpipe-vs-1f1b.yaml"),
    "--set",
    "pipeline.devices=8",
    "--grid",
    "pipeline.microbatches=" + ",".join(str(5_000 + n) for n in range(200)),
)


def environment() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(Path(pipesim.__file__).parents[1]))


class Command:
    """``python -m pipesim ARGS`` in its own process group, as a terminal's foreground
    job: output piped; errors piped, or on a pseudo-terminal (``terminal=True``) so that
    the progress bar is drawn."""

    def __init__(self, args: tuple[str, ...], folder: Path, terminal: bool = False) -> None:
        self.terminal, self.screen = None, b""
        errors = subprocess.PIPE
        if terminal:
            self.terminal, errors = pty.openpty()
            # a terminal 160 columns wide: at the new one's width of 0 no bar is drawn
            fcntl.ioctl(errors, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pipesim", *args],
            cwd=folder,
            env=environment(),
            stdout=subprocess.PIPE,
            stderr=errors,
            start_new_session=True,
        )
        if terminal:
            os.close(errors)
        self.workers: set[int] = set()

    def wait_for_workers(self, count: int = 2) -> None:
        deadline = time.monotonic() + PATIENCE_S
        while len(self.workers) < count:
            assert self.process.poll() is None, self.process.communicate()
            assert time.monotonic() < deadline, f"no {count} workers"
            self.workers = children(self.process.pid)
            time.sleep(0.05)

    def wait_for_screen(self, pattern: str) -> re.Match:
        """Read the terminal until ``pattern`` appears on it."""
        deadline = time.monotonic() + PATIENCE_S
        while (found := re.search(pattern, self.screen.decode(errors="replace"))) is None:
            assert time.monotonic() < deadline, self.screen[-500:]
            self._read(0.05)
        return found

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.terminal], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.terminal, 65536)
        except OSError:  # the other end closed: every writer is gone
            return False
        self.screen += data
        return bool(data)

    def interrupt(self, group: bool = True) -> float:
        """Ctrl-C (to the group, as a terminal sends it, or to the main process alone);
        the seconds until the process had ended."""
        self.workers |= children(self.process.pid)
        sent = time.monotonic()
        if group:
            os.killpg(self.process.pid, signal.SIGINT)
        else:
            self.process.send_signal(signal.SIGINT)
        try:
            self._wait(time.monotonic() + PATIENCE_S)
        finally:
            self._kill_leftovers()
        return time.monotonic() - sent

    def _wait(self, deadline: float) -> None:
        """Wait for the process to end, reading its terminal meanwhile (a terminal nobody
        reads fills up, and blocks whoever writes to it)."""
        while self.process.poll() is None:
            assert time.monotonic() < deadline, "still running"
            if self.terminal is None:
                time.sleep(0.01)
            elif not self._read(0.01):
                self.process.wait(timeout=max(deadline - time.monotonic(), 0))

    def outcome(self) -> tuple[int, str, str]:
        """Exit code, output, and errors (the terminal's text, with its line ends)."""
        stdout = self.process.stdout.read().decode()
        if self.terminal is None:
            stderr = self.process.stderr.read().decode()
        else:
            while self._read(1.0):
                pass
            stderr = self.screen.decode(errors="replace").replace("\r\n", "\n")
        return self.process.returncode, stdout, stderr

    def _kill_leftovers(self) -> None:
        """A failed test leaves nothing running (a worker that outlived its parent)."""
        if self.process.poll() is None:
            self.process.kill()
        for pid in self.workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def last_line(screen: str) -> str:
    """What a terminal shows last: the text after the last carriage return or new line,
    a progress bar's redraws left out."""
    return re.split(r"[\r\n]", screen.rstrip("\n"))[-1]


def plan_json_is_partial(path: Path) -> dict:
    data = json.loads(path.read_text())
    assert data["complete"] is False and data["interrupted"] == "SIGINT"
    finished, total = data["candidates_finished"], data["candidates_total"]
    assert 0 < finished < total == data["space_size"]
    assert finished == sum(data["pruned"].values()) + data["scored"]
    steps = [row["step_time_ms"] for row in data["results"]]
    assert steps == sorted(steps) and data["confirmed"] == 0
    return data


# ---------------------------------------------------------------------------
# Every test: exit 130, one line, no worker left, a valid and marked partial output


@linux_only
@pytest.mark.parametrize("group", [True, False], ids=["group", "main-process"])
def test_ctrl_c_stops_a_pooled_plan_and_keeps_its_finished_part(tmp_path, long_plan, group):
    out = tmp_path / "plan.json"
    args = plan_args(long_plan, 2, "--no-progress", "--partial-on-interrupt", "-o", out.name)
    command = Command(args, tmp_path)
    command.wait_for_workers()
    time.sleep(1.0)  # a few chunks scored
    command.interrupt(group)
    assert command.outcome() == (130, "", INTERRUPTED + "\n")
    assert all_dead(command.workers)
    plan_json_is_partial(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json", "plan.yaml"]


@linux_only
def test_ctrl_c_at_a_terminal_stops_a_one_process_plan(tmp_path, long_plan):
    out = tmp_path / "plan.csv"
    args = plan_args(long_plan, 1, "--partial-on-interrupt", "-o", out.name)
    command = Command(args, tmp_path, terminal=True)
    # the bar counts candidates, with their rate and the time left
    bar = r"plan: +\d+%\|[^|]*\| ([1-9][\d,]*)/41472 \[\d\d:\d\d<\d\d:\d\d, +[\d.]+ ?candidate/s\]"
    command.wait_for_screen(bar)  # past the floors (the bar moves once they are known)
    time.sleep(1.0)  # a few chunks scored
    command.interrupt()
    code, stdout, screen = command.outcome()
    assert (code, stdout, last_line(screen)) == (130, "", INTERRUPTED)
    assert screen.count("pipesim:") == 1 and "Traceback" not in screen
    head, *rows = out.read_text().splitlines()
    assert re.fullmatch(
        r"# partial plan: stopped by SIGINT after [\d,]+ of 41,472 candidates.*", head
    )
    table = list(csv.DictReader(rows))
    assert table and all(float(row["step_time_ms"]) > 0 for row in table)


@linux_only
def test_without_the_flag_a_stopped_plan_leaves_the_old_results(tmp_path, long_plan):
    out = tmp_path / "plan.json"
    out.write_text("the old results\n")
    command = Command(plan_args(long_plan, 2, "--no-progress", "-o", out.name), tmp_path)
    command.wait_for_workers()
    command.interrupt()
    assert command.outcome() == (130, "", INTERRUPTED + "\n")
    assert all_dead(command.workers)
    assert out.read_text() == "the old results\n"


@linux_only
@pytest.mark.parametrize("jobs", [2, 1])
def test_ctrl_c_stops_a_sweep_and_keeps_the_points_that_finished(tmp_path, jobs):
    out = tmp_path / "sweep.csv"
    args = (*SWEEP, "--jobs", str(jobs), "--partial-on-interrupt", "-o", out.name)
    command = Command(args, tmp_path, terminal=True)
    found = command.wait_for_screen(r"sweep: +\d+%\|[^|]*\| ([1-9]\d*)/200 \[.*point/s\]")
    command.interrupt()
    code, stdout, screen = command.outcome()
    assert (code, stdout, last_line(screen)) == (130, "", INTERRUPTED)
    assert screen.count("pipesim:") == 1 and "Traceback" not in screen
    assert all_dead(command.workers)
    head, *rows = out.read_text().splitlines()
    finished = int(
        re.fullmatch(r"# partial sweep: stopped by SIGINT after (\d+) of 200 points", head)[1]
    )
    table = list(csv.DictReader(rows))
    assert finished == len(table) >= int(found[1])  # at least what the bar had shown
    grid = {str(5_000 + n) for n in range(200)}
    assert all(row["pipeline.microbatches"] in grid and row["error"] == "" for row in table)


@linux_only
@pytest.mark.parametrize(
    ("args", "bar"),
    [
        (
            (
                "serve",
                str(SCENARIOS / "llama-70b-serve-8xh100.yaml"),
                "--set",
                "serving.workload.requests=200000",
            ),
            r"serving: +\d+%\|[^|]*\| [1-9]\d*/200000 \[.*request/s\]",
        ),
        (
            ("run", str(SCENARIOS / "stragglers.yaml"), "--runs", "50000"),
            r"Monte Carlo: +\d+%\|[^|]*\| [1-9]\d*/50000 \[\d\d:\d\d<\d\d:\d\d, .*run/s\]",
        ),
    ],
    ids=["serve", "monte-carlo"],
)
def test_ctrl_c_stops_serve_and_a_monte_carlo_run(tmp_path, args, bar):
    command = Command(args, tmp_path, terminal=True)
    command.wait_for_screen(bar)
    command.interrupt()
    code, stdout, screen = command.outcome()
    assert (code, stdout, last_line(screen)) == (130, "", INTERRUPTED)
    assert screen.count("pipesim:") == 1 and "Traceback" not in screen


# ---------------------------------------------------------------------------
# How long the stop takes: within a second (CI's timing step, which tolerates a busy
# machine)


@linux_only
@pytest.mark.timing
@pytest.mark.parametrize("jobs", [2, 1])
@pytest.mark.parametrize("group", [True, False], ids=["group", "main-process"])
def test_a_plan_stops_within_a_second(tmp_path, long_plan, jobs, group):
    out = tmp_path / "plan.json"
    args = plan_args(long_plan, jobs, "--partial-on-interrupt", "-o", out.name)
    command = Command(args, tmp_path, terminal=True)
    command.wait_for_screen(r"plan: +\d+%\|[^|]*\| [1-9][\d,]*/41472")
    time.sleep(0.5)
    took = command.interrupt(group)
    assert command.outcome()[0] == 130
    assert took < STOP_S, f"{took:.2f} s from Ctrl-C to the end"
    plan_json_is_partial(out)


@linux_only
@pytest.mark.timing
@pytest.mark.parametrize("jobs", [2, 1])
def test_a_sweep_stops_within_a_second(tmp_path, jobs):
    args = (*SWEEP, "--jobs", str(jobs), "--partial-on-interrupt", "-o", "sweep.json")
    command = Command(args, tmp_path, terminal=True)
    command.wait_for_screen(r"sweep: +\d+%\|[^|]*\| \d+/200")
    time.sleep(0.5)
    took = command.interrupt()
    assert command.outcome()[0] == 130
    assert took < STOP_S, f"{took:.2f} s from Ctrl-C to the end"
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert (data["complete"], data["points_total"]) == (False, 200)
    assert data["points_finished"] == len(data["rows"])
