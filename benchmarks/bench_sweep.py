"""Time a sweep of at least 100 points with one local process and with two.

    python benchmarks/bench_sweep.py [--jobs 1 2] [--repeat 1]

The grid: 5 schedules x 6 microbatch counts x 4 device counts = 120 points of the
gpipe-vs-1f1b scenario over a 50 GB/s link with 20 us latency (up to 16 x 512 x 2
actions per point). Prints the best time of ``--repeat`` runs per job count.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pipesim import parse_grid, read_mapping, run_sweep

SCENARIO = str(Path(__file__).parent.parent / "scenarios" / "gpipe-vs-1f1b.yaml")
GRID = [
    "pipeline.schedule=gpipe,1f1b,zb-h1,zb-h2,eager-1f1b",
    "pipeline.microbatches=64,128,192,256,384,512",
    "pipeline.devices=4,8,12,16",
    "hardware.link={latency_us: 20, bandwidth_gbps: 50}",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    base = read_mapping(SCENARIO)
    axes = parse_grid(GRID)
    for jobs in args.jobs:
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            frame = run_sweep(base, SCENARIO, axes, jobs=jobs)
            best = min(best, time.perf_counter() - start)
        errors = int((frame["error"] != "").sum())
        print(f"jobs={jobs}: {len(frame)} points ({errors} error rows) in {best:.2f} s")


if __name__ == "__main__":
    main()
