"""Cross-check pipesim against real torch.distributed.pipelining runs, schedule by schedule.

Runs GPipe, 1F1B, interleaved 1F1B (2 chunks per device) and ZB-H1 on p = 2 and 4
processes (gloo on CPU) with synthetic stage ops of known duration, and prints every error
figure in one table. ``--noise N`` first measures the run-to-run noise: N timed steps of
1F1B on 2 processes, reporting (max - min) / median and the coefficient of variation.

The ranks' threads need the cores to themselves: on a 2-core machine one other busy
process makes the post that completes a send/receive pair block for a scheduler tick
(several ms), on random actions. The load average is printed before and after, and the
``stall ms`` column gives the time per step the ranks sat blocked posting sends and
receives; figures from a run with stalls measure the machine's load, not the schedule.

    python benchmarks/crosscheck_suite.py --runs 5 --noise 20
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from pipesim import get_schedule
from pipesim.calibrate.fit import post_stalls_ms, timeline
from pipesim.calibrate.ops import StageSpec
from pipesim.calibrate.realrun import Job, run_jobs
from pipesim.calibrate.suite import check_schedules, render_table

SCHEDULES = (("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2), ("zb-h1", 1))


def measure_noise(spec: StageSpec, runs: int) -> dict:
    calibration, timed = run_jobs([Job(get_schedule("1f1b", 2, 8), (spec,), runs=runs)])[0]
    spans = np.array([timeline(run).makespan_ms for run in timed])
    median = float(np.median(spans))
    return {
        "runs": runs,
        "median_ms": median,
        "spread": float((spans.max() - spans.min()) / median),
        "cv": float(spans.std(ddof=1) / spans.mean()),
        "p10_p90": float((np.percentile(spans, 90) - np.percentile(spans, 10)) / median),
        "stall_ms": float(np.median([post_stalls_ms(run) for run in timed])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--op-ms", type=float, default=1.0, help="F, I and W sleep per stage (ms)")
    parser.add_argument("--devices", default="2,4")
    parser.add_argument("--noise", type=int, default=0, help="also measure noise over N runs")
    args = parser.parse_args()
    spec = StageSpec(
        "synthetic",
        forward_ms=args.op_ms,
        backward_input_ms=args.op_ms,
        backward_weight_ms=args.op_ms,
    )
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(
        f"machine: {platform.node()} {platform.machine()}, {platform.processor() or '?'}; python {platform.python_version()}"
    )
    if args.noise:
        noise = measure_noise(spec, args.noise)
        print(
            f"noise (1f1b, p=2, m={8}, {noise['runs']} runs): median {noise['median_ms']:.2f} ms, "
            f"(max-min)/median {noise['spread']:.1%}, (p90-p10)/median {noise['p10_p90']:.1%}, CV {noise['cv']:.1%}, "
            f"stall {noise['stall_ms']:.1f} ms"
        )
    results = []
    started = time.perf_counter()
    for devices in (int(d) for d in args.devices.split(",")):
        schedules = [get_schedule(name, devices, args.microbatches, v) for name, v in SCHEDULES]
        for schedule in schedules:
            outcome = check_schedules([schedule], [spec], runs=args.runs)
            results += outcome.results
    print(render_table(results), end="")
    for devices in sorted({r.devices for r in results}):
        group = [r for r in results if r.devices == devices]
        measured = [r.schedule for r in sorted(group, key=lambda r: r.measured_makespan_ms)]
        simulated = [r.schedule for r in sorted(group, key=lambda r: r.simulated_makespan_ms)]
        print(f"p={devices}: measured order {measured}, simulated order {simulated}")
    print(
        f"wall time {time.perf_counter() - started:.0f} s, load average after: {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
