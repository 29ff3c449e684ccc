"""Engine throughput: scenario to Report, 10^3 to 10^6 actions.

    python benchmarks/bench_engine.py            # all sizes, both schedules
    python benchmarks/bench_engine.py --max 1e5  # stop earlier

Each size runs in a fresh process so its peak memory (max RSS above the process's
baseline after imports) belongs to that run alone. Links carry a latency and a size
cost, so every cross-device hop is a real transfer (LogGP: channel time, then latency).
The engine always records what released each row (the causes the critical path walks)
and enforces same-device order as it runs; both are in the measured time. The cyclic
garbage collector is paused around the run, as the command line does for every command
(``pipesim.cli.gc_pause``): its full passes over millions of live rows would otherwise
take about a third of the time at 10^6 actions.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

SIZES = [10**3, 10**4, 10**5, 10**6]


def uniform_scenario(schedule: str, devices: int, microbatches: int, chunks: int = 1) -> dict:
    """A scenario of equal stages (F 1 ms, B 2 ms, 1 MB activations) on a 100 GB/s link."""
    return {
        "schema_version": 1,
        "name": f"bench-{schedule}",
        "pipeline": {
            "schedule": schedule,
            "devices": devices,
            "microbatches": microbatches,
            "virtual_stages": chunks,
        },
        "costs": {
            "forward_ms": 1.0,
            "backward_ms": 2.0,
            "activation_bytes": 1e6,
            "activation_memory_bytes": 1e6,
        },
        "hardware": {"link": {"latency_us": 5, "bandwidth_gbps": 100}},
    }


def one_run(schedule: str, actions: int) -> dict:
    from pipesim import run_scenario
    from pipesim.cli.gc_pause import no_cyclic_gc
    from pipesim.scenario.build import build_scenario, parse_spec

    devices, chunks = 8, (1 if schedule == "1f1b" else 4)
    per_microbatch = 2 * devices * chunks  # one F and one B per stage
    microbatches = max(devices, actions // per_microbatch // devices * devices)
    spec = uniform_scenario(schedule, devices, microbatches, chunks)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with no_cyclic_gc():  # as ``pipesim run`` runs it
        result = run_scenario(build_scenario(parse_spec(spec, "bench"), "bench"))
    seconds = time.perf_counter() - start
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    n = result.scenario.schedule.num_actions
    return {
        "schedule": schedule,
        "actions": n,
        "seconds": seconds,
        "actions_per_s": n / seconds,
        "bytes_per_action": (peak_rss - base_rss) * 1024 / n,
        "makespan_ms": result.report.makespan_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max", type=float, default=1e6)
    parser.add_argument("--one", nargs=2, metavar=("SCHEDULE", "ACTIONS"))
    args = parser.parse_args()
    if args.one:
        import pipesim.analysis.run  # noqa: F401  (imports before the baseline RSS)

        print(json.dumps(one_run(args.one[0], int(args.one[1]))))
        return
    print(f"{'schedule':<18}{'actions':>10}{'seconds':>10}{'actions/s':>12}{'bytes/action':>14}")
    for schedule in ("1f1b", "interleaved-1f1b"):
        for size in [s for s in SIZES if s <= args.max]:
            out = subprocess.run(
                [sys.executable, __file__, "--one", schedule, str(size)],
                capture_output=True,
                text=True,
                check=True,
            )
            row = json.loads(out.stdout)
            print(
                f"{row['schedule']:<18}{row['actions']:>10}{row['seconds']:>10.2f}"
                f"{row['actions_per_s']:>12,.0f}{row['bytes_per_action']:>14,.0f}"
            )


if __name__ == "__main__":
    main()
