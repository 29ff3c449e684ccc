"""A command stopped by a signal (issue 18, class 14): its worker processes die with it,
no temporary is left beside its outputs, the old files stay as they were, and it says so
in one line with exit code 128 + the signal's number (130 for Ctrl-C).

The process tests run ``pipesim`` as a user does, in a process of its own, wait until its
workers exist, send the signal, then wait (generously) for the outcome; none judges time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import pipesim
from pipesim.cli import main, output
from tests.analysis.test_plan import small_base

SCENARIOS = Path(__file__).parents[2] / "scenarios"
GPIPE = SCENARIOS / "gpipe-vs-1f1b.yaml"
PLAN = SCENARIOS / "plan-llama-70b-64xh100.yaml"
# a grid of long points (20,000 microbatches on 8 devices each): minutes of work on 2 CPUs
SWEEP = (
    "sweep",
    str(GPIPE),
    "--set",
    "pipeline.devices=8",
    "--grid",
    "pipeline.microbatches=" + ",".join(str(20_000 + n) for n in range(200)),
    "--jobs",
    "2",
    "--no-progress",
)
# the whole 64-GPU space: minutes of work on 2 CPUs
PLAN_ALL = ("plan", str(PLAN), "--gpus", "64", "--jobs", "2", "--no-progress")
PATIENCE_S = 120  # how long a busy machine may take to start the workers or to stop

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2,
    reason="reads /proc, and needs two CPUs for two worker processes",
)


def start(args: tuple[str, ...], folder: Path, **popen) -> subprocess.Popen:
    """``pipesim ARGS`` in ``folder``, its output and errors piped back."""
    env = dict(os.environ, PYTHONPATH=str(Path(pipesim.__file__).parents[1]))
    command = [sys.executable, "-c", "from pipesim.cli import main; main()", *args]
    return subprocess.Popen(
        command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen
    )


def children(pid: int) -> set[int]:
    """The live processes whose parent is ``pid``, from /proc/*/stat."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # gone meanwhile
        if fields[1] == str(pid) and fields[0] != "Z":
            found.add(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    """Running still (a zombie waiting to be reaped is dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def workers_of(process: subprocess.Popen, count: int = 2) -> set[int]:
    """The worker processes of ``process``, once ``count`` of them are running."""
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        found = children(process.pid)
        if len(found) >= count:
            return found
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    process.kill()
    raise AssertionError(f"no {count} workers: {process.communicate()}")


def finish(process: subprocess.Popen, workers: set[int]) -> tuple[int, str, str]:
    """The exit code, output and errors once the process and every holder of its pipes
    are gone (a worker left running would keep the pipes open, and this would time out,
    killing the workers so that a failed test leaves none behind)."""
    try:
        stdout, stderr = process.communicate(timeout=PATIENCE_S)
    except subprocess.TimeoutExpired:
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        process.kill()
        raise
    return process.returncode, stdout.decode(), stderr.decode()


def all_dead(pids: set[int]) -> bool:
    deadline = time.monotonic() + PATIENCE_S
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(pid) for pid in pids)


@linux_only
@pytest.mark.parametrize(
    ("args", "signum", "line"),
    [
        (PLAN_ALL, signal.SIGTERM, "pipesim: terminated by SIGTERM"),
        (SWEEP, signal.SIGTERM, "pipesim: terminated by SIGTERM"),
        (SWEEP, signal.SIGHUP, "pipesim: terminated by SIGHUP"),
    ],
    ids=["plan-term", "sweep-term", "sweep-hup"],
)
def test_a_signal_stops_the_command_and_its_workers(tmp_path, args, signum, line):
    if signal.getsignal(signum) is signal.SIG_IGN:  # e.g. under nohup: pipesim keeps it so
        pytest.skip(f"{signal.Signals(signum).name} is ignored by this process and its children")
    suffix = ".json" if args[0] == "plan" else ".csv"
    old = tmp_path / f"out{suffix}"
    old.write_text("the old results\n")
    process = start((*args, "-o", old.name), tmp_path)
    workers = workers_of(process)
    process.send_signal(signum)
    code, stdout, stderr = finish(process, workers)
    assert (code, stdout, stderr) == (128 + signum, "", line + "\n")
    assert all_dead(workers)
    assert sorted(p.name for p in tmp_path.iterdir()) == [old.name]  # no temporary
    assert old.read_text() == "the old results\n"


@linux_only
def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    # the terminal sends Ctrl-C to the whole foreground group, workers included; they
    # ignore it (no traceback of theirs), the command reports it once and stops them
    process = start(SWEEP, tmp_path, start_new_session=True)
    workers = workers_of(process)
    os.killpg(process.pid, signal.SIGINT)
    code, stdout, stderr = finish(process, workers)
    assert (code, stdout, stderr) == (130, "", "pipesim: interrupted\n")
    assert all_dead(workers)


@linux_only
def test_workers_die_with_a_killed_parent(tmp_path):
    process = start(PLAN_ALL, tmp_path)
    workers = workers_of(process)
    process.kill()  # SIGKILL: nothing runs in the parent, the kernel ends its workers
    code, _, stderr = finish(process, workers)
    assert (code, stderr) == (-signal.SIGKILL, "")
    assert all_dead(workers)


# ---------------------------------------------------------------------------
# A signal while the outputs are written, in this process


@pytest.fixture
def outputs(tmp_path):
    """Old results in the two files ``pipesim run`` is about to replace."""
    report, trace = tmp_path / "report.json", tmp_path / "trace.json"
    report.write_text("old report\n")
    trace.write_text("old trace\n")
    return report, trace


def run_with(args, monkeypatch, owner, name: str):
    """``pipesim ARGS`` with ``owner.NAME`` sending this process SIGTERM on its first call
    (the signal's handler runs before the call itself)."""
    real = getattr(owner, name)

    def signalling(*a, **k):
        monkeypatch.setattr(owner, name, real)
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*a, **k)

    monkeypatch.setattr(owner, name, signalling)
    return CliRunner().invoke(main, [str(a) for a in args])


def test_sigterm_while_writing_leaves_the_old_files(outputs, monkeypatch):
    report, trace = outputs
    args = ("run", GPIPE, "-o", report, "--trace", trace)
    result = run_with(args, monkeypatch, output, "_write_all")  # the first temporary
    assert (result.exit_code, result.stdout) == (128 + signal.SIGTERM, "")
    assert result.stderr == "pipesim: terminated by SIGTERM\n"
    assert report.read_text() == "old report\n" and trace.read_text() == "old trace\n"
    assert sorted(p.name for p in report.parent.iterdir()) == ["report.json", "trace.json"]


def test_sigterm_between_renames_waits_until_all_are_in_place(outputs, monkeypatch):
    report, trace = outputs
    args = ("run", GPIPE, "-o", report, "--trace", trace)
    result = run_with(args, monkeypatch, os, "replace")  # the first rename
    assert (result.exit_code, result.stdout) == (128 + signal.SIGTERM, "")
    assert result.stderr == "pipesim: terminated by SIGTERM\n"
    assert report.read_text().startswith("{") and trace.read_text().startswith("{")
    assert sorted(p.name for p in report.parent.iterdir()) == ["report.json", "trace.json"]


def test_the_handlers_come_back_after_a_command(tmp_path):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    result = CliRunner().invoke(main, ["run", str(GPIPE), "-o", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_killed_writers_temporary_goes_at_the_next_write(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(dead.stdout)
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as living:
        stale = tmp_path / f".out.csv.{dead_pid}.abc_0123.tmp"
        busy = tmp_path / f".out.csv.{living.pid}.abc_0123.tmp"  # still being written
        other = tmp_path / f".other.csv.{dead_pid}.abc_0123.tmp"  # another file's
        mine = tmp_path / ".out.csv.notapid.tmp"  # not a temporary of this form
        for path in (stale, busy, other, mine):
            path.write_text("partial")
        output.write_file(str(tmp_path / "out.csv"), "a,b\n")
        living.kill()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([busy.name, other.name, mine.name, "out.csv"])
    assert (tmp_path / "out.csv").read_text() == "a,b\n"


# ---------------------------------------------------------------------------
# plan: no note before an error line (class 13), and identical bytes (class 15)

SMALL_SPACE = (
    "--space",
    "pipeline.schedule=1f1b,zbv",
    "--space",
    "model.recompute=false",
    "--space",
    "parallel.dp_overlap=false",
    "--space",
    "parallel.zero_stage=0",
    "--confirm",
    "1",
    "--top",
    "3",
    "--no-progress",
)


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(small_base()))
    return path


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_plan_to_a_full_disk_is_one_error_line_and_no_note(small):
    args = ["plan", str(small), "--gpus", "8", *SMALL_SPACE, "--jobs", "99", "-o", "/dev/full"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert result.stderr == "pipesim: error: /dev/full: No space left on device\n"


def test_plan_notes_come_after_the_written_results(small):
    result = CliRunner().invoke(main, ["plan", str(small), "--gpus", "8", *SMALL_SPACE])
    assert result.exit_code == 0, result.output
    both = result.output.splitlines()  # stdout and stderr as they came
    assert both[0].startswith("space: ") and both[-1].startswith("pipesim: note: planning over")


@pytest.mark.parametrize("fmt", ["json", "table", "csv"])
def test_plan_no_timing_gives_the_same_bytes_twice(small, fmt):
    args = ["plan", str(small), "--gpus", "8", *SMALL_SPACE, "--format", fmt, "--no-timing"]
    first, second = (CliRunner().invoke(main, args) for _ in range(2))
    assert first.exit_code == 0, first.output
    assert first.stdout == second.stdout
    assert "wall_s" not in first.stdout
    if fmt == "table":
        assert first.stdout.splitlines()[0].endswith("confirmed 1 on the SimPy engine")


def test_plan_json_says_how_long_it_took_without_no_timing(small):
    args = ["plan", str(small), "--gpus", "8", *SMALL_SPACE, "--format", "json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert '"wall_s": ' in result.stdout
