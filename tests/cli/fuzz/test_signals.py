"""A signal in the middle of a command: SIGTERM or SIGINT while ``sweep`` or ``plan`` runs
its worker processes, or while ``run`` is writing its outputs (one staged in a temporary,
the next a FIFO nobody reads yet, so the signal lands between the two).

The contract (issue 18): the command exits with 128 + the signal's number (130 for SIGINT,
143 for SIGTERM) and one ``pipesim:`` line saying so, leaves no process behind (every process
it started is gone, checked against the process table taken before the signal) and no
``.*.tmp`` temporary, and writes none of its outputs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
SCENARIOS = ROOT / "scenarios"
PIPESIM = [sys.executable, "-c", "from pipesim.cli import main; main()"]
END_WITHIN_S = 30
GRID = ",".join(map(str, range(1, 200)))
COMMANDS = {
    "sweep": [
        "sweep",
        str(SCENARIOS / "llama-70b-4x8-h100.yaml"),
        "--grid",
        f"pipeline.microbatches={GRID}",
        "--grid",
        "pipeline.schedule=1f1b,gpipe,zb-h1",
        "--jobs",
        "2",
        "--no-progress",
    ],
    "plan": [
        "plan",
        str(SCENARIOS / "plan-llama-70b-64xh100.yaml"),
        "--gpus",
        "64",
        "--jobs",
        "2",
        "--no-progress",
    ],
}


def children(pid: int) -> dict[int, str]:
    """Every descendant of ``pid``: its id and its start time (so that a reused id is not
    taken for the same process)."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(stat.parent.name)] = (int(fields[1]), fields[19])  # ppid, start time
    found, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, start) in table.items():
            if ppid == parent and child not in found:
                found[child] = start
                frontier.append(child)
    return found


def in_session(session: int) -> list[int]:
    """The live processes of ``session``: the command runs in a session of its own, so
    this finds a worker it started after the process table was taken, too."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def alive(pid: int, start: str) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == start and fields[0] != "Z"


def wait_for(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def start(args: list[str], folder: Path) -> subprocess.Popen:
    """The command in a session of its own, its output in files beside ``folder`` (a pipe
    would stay open as long as any orphan holds it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    streams = [open(folder.parent / f"{folder.name}.{n}", "wb") for n in ("out", "err")]
    with streams[0], streams[1]:
        return subprocess.Popen(
            [*PIPESIM, *args],
            cwd=folder,
            env=env,
            stdout=streams[0],
            stderr=streams[1],
            start_new_session=True,
        )


def end(process: subprocess.Popen, started: dict[int, str]) -> None:
    """Make sure the command and every process it started are gone after the test."""
    if process.poll() is None:
        process.kill()
        process.wait()
    for pid, start_time in started.items():
        if alive(pid, start_time):
            os.kill(pid, signal.SIGKILL)
    for pid in in_session(process.pid):
        os.kill(pid, signal.SIGKILL)


def assert_ended_cleanly(process, signum: int, started: dict[int, str], folder: Path) -> None:
    try:
        process.wait(timeout=END_WITHIN_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the command did not end within {END_WITHIN_S} s of the signal")
    stderr = (folder.parent / f"{folder.name}.err").read_text()
    assert process.returncode == 128 + signum, (process.returncode, stderr[-500:])
    lines = [line for line in stderr.splitlines() if not line.startswith("pipesim: note: ")]
    assert len(lines) == 1 and lines[0].startswith("pipesim: "), stderr[-500:]
    left = lambda: [p for p, s in started.items() if alive(p, s)] + in_session(process.pid)  # noqa: E731
    assert wait_for(lambda: not left(), 5), f"processes left behind: {sorted(set(left()))}"
    assert not list(folder.glob("**/.*.tmp")), list(folder.glob("**/.*.tmp"))
    assert not (folder / "out.json").exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["term", "int"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_signal_mid_run_ends_the_workers_and_writes_nothing(tmp_path, command, signum):
    process = start([*COMMANDS[command], "-o", str(tmp_path / "out.json")], tmp_path)
    has_workers = wait_for(lambda: len(children(process.pid)) >= 2, 30)
    started = children(process.pid)
    try:
        process.send_signal(signum)
        assert has_workers, "the command started no workers"
        assert_ended_cleanly(process, signum, started, tmp_path)
    finally:
        end(process, started)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["term", "int"])
def test_a_signal_mid_write_removes_the_temporaries(tmp_path, signum):
    """``run -o out.json --trace fifo.json``: out.json is staged in a temporary, then the
    trace blocks on the FIFO until someone reads it; the signal comes in between."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    args = ["run", str(SCENARIOS / "gpipe-vs-1f1b.yaml"), "-o", str(tmp_path / "out.json")]
    process = start([*args, "--trace", str(fifo)], tmp_path)
    staged = wait_for(lambda: bool(list(tmp_path.glob(".out.json.*.tmp"))), 30)
    started = children(process.pid)
    try:
        process.send_signal(signum)
        assert staged, "the report was never staged"
        assert_ended_cleanly(process, signum, started, tmp_path)
    finally:
        end(process, started)
