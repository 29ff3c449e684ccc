"""How long Ctrl-C takes to stop each long-running command, as a user at a terminal sees it.

    python benchmarks/bench_interrupt.py              # every command, 3 stops each
    python benchmarks/bench_interrupt.py --repeat 5 --only plan

Each command runs as ``python -m pipesim`` on a pseudo-terminal of its own (so its progress
bar is drawn, as on a user's screen) in its own process group. Once the bar has counted
for ``--after`` seconds, SIGINT goes to the whole group (as a terminal sends it) or to the
main process alone; the time is from the signal until the process has ended, its exit code
and its worker processes checked. Printed: min, median and max seconds per case.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import signal
import statistics
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]
SCENARIOS = ROOT / "scenarios"
SWEEP_GRID = "pipeline.microbatches=" + ",".join(str(5_000 + n) for n in range(200))
CASES = {
    "plan": (
        "plan",
        str(SCENARIOS / "plan-llama-70b-64xh100.yaml"),
        "--gpus",
        "64",
        "--partial-on-interrupt",
        "-o",
        os.devnull,
    ),
    "sweep": (
        "sweep",
        str(SCENARIOS / "gpipe-vs-1f1b.yaml"),
        "--set",
        "pipeline.devices=8",
        "--grid",
        SWEEP_GRID,
        "--partial-on-interrupt",
        "-o",
        "/tmp/pipesim-bench-interrupt.csv",
    ),
    "serve": (
        "serve",
        str(SCENARIOS / "llama-70b-serve-8xh100.yaml"),
        "--set",
        "serving.workload.requests=200000",
    ),
    "monte-carlo": ("run", str(SCENARIOS / "stragglers.yaml"), "--runs", "50000"),
}
POOLED = ("plan", "sweep")  # the commands with --jobs


def children(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[1] == str(pid) and fields[0] not in ("Z", "X"):
            found.add(int(stat.parent.name))
    return found


def stop_once(args: tuple[str, ...], after_s: float, group: bool) -> tuple[float, int, int]:
    """(seconds from SIGINT to the end, exit code, workers still alive after it)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen(
        [sys.executable, "-m", "pipesim", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    screen = b""
    while not re.search(rb"\| [1-9][\d,]*/\d+ \[", screen):
        if process.poll() is not None:
            raise SystemExit(f"{' '.join(args)}: ended before its bar counted")
        if select.select([master], [], [], 0.1)[0]:
            screen += os.read(master, 65536)
    deadline = time.monotonic() + after_s
    while time.monotonic() < deadline:
        if select.select([master], [], [], 0.05)[0]:
            os.read(master, 65536)
    workers = children(process.pid)
    sent = time.monotonic()
    if group:
        os.killpg(process.pid, signal.SIGINT)
    else:
        process.send_signal(signal.SIGINT)
    while process.poll() is None:  # read the terminal meanwhile: a full one blocks writers
        if select.select([master], [], [], 0.01)[0]:
            try:
                os.read(master, 65536)
            except OSError:
                break
    code = process.wait()
    took = time.monotonic() - sent
    os.close(master)
    time.sleep(0.1)
    return took, code, sum(_alive(pid) for pid in workers)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--after", type=float, default=2.0, help="seconds of counting first")
    parser.add_argument("--only", choices=sorted(CASES), action="append")
    options = parser.parse_args()
    print(f"{'case':<28} {'min s':>6} {'median':>6} {'max s':>6}  exit codes, workers left")
    for name in options.only or CASES:
        for jobs in (2, 1) if name in POOLED else (None,):
            args = CASES[name] + (() if jobs is None else ("--jobs", str(jobs)))
            for group in (True, False):
                runs = [stop_once(args, options.after, group) for _ in range(options.repeat)]
                took = [t for t, _, _ in runs]
                label = f"{name}{'' if jobs is None else f' --jobs {jobs}'}, "
                label += "group" if group else "main"
                codes = sorted({c for _, c, _ in runs})
                left = sum(n for _, _, n in runs)
                print(
                    f"{label:<28} {min(took):6.2f} {statistics.median(took):6.2f} "
                    f"{max(took):6.2f}  {codes}, {left}"
                )


if __name__ == "__main__":
    main()
