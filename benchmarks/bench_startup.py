"""How long a command takes from the shell prompt back to it: process start, imports, work.

    python benchmarks/bench_startup.py            # median of 9 runs of each command
    python benchmarks/bench_startup.py --runs 21

Each command runs as its own process (``python -m pipesim ...``, as the ``pipesim``
script starts it), its output thrown away; the columns are the median, fastest and
slowest wall time of the runs, and, from one more run with ``-X importtime``, the
time spent importing and how many modules were loaded. ``python -c pass`` is the floor:
what any Python process costs here. Two commands: a table-only ``pipesim run`` on the
smallest bundled scenario (8 actions) and ``pipesim --help``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "pipesim --help": ["-m", "pipesim", "--help"],
    "pipesim run seed-pipelined": ["-m", "pipesim", "run", "scenarios/seed-pipelined.yaml"],
}


def environment() -> dict[str, str]:
    """This checkout's pipesim first on the path, whatever is installed."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def wall_seconds(args: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        begin = time.perf_counter()
        subprocess.run(
            [sys.executable, *args],
            cwd=ROOT,
            env=environment(),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        times.append(time.perf_counter() - begin)
    return times


def import_profile(args: list[str]) -> tuple[float, int]:
    """Seconds spent importing (the top-level imports' cumulative times) and modules loaded."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        cwd=ROOT,
        env=environment(),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    rows = [line.split("|") for line in done.stderr.splitlines() if line.startswith("import time:")]
    rows = [r for r in rows if r[1].strip().isdigit()]
    top = [int(r[1]) for r in rows if not r[2].startswith("  ")]
    return sum(top) / 1e6, len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    print(f"{'command':<30}{'median s':>10}{'min s':>8}{'max s':>8}{'imports s':>11}{'modules':>9}")
    for label, command in COMMANDS.items():
        wall_seconds(command, 1)  # warm the file cache and the bytecode
        times = wall_seconds(command, args.runs)
        imports_s, modules = import_profile(command)
        print(
            f"{label:<30}{statistics.median(times):>10.3f}{min(times):>8.3f}{max(times):>8.3f}"
            f"{imports_s:>11.3f}{modules:>9}"
        )


if __name__ == "__main__":
    main()
