"""The fast evaluator against the SimPy engine: actions per second, side by side.

    python benchmarks/bench_evaluator.py            # 10^4, 10^5, 10^6 actions
    python benchmarks/bench_evaluator.py --max 1e5  # stop earlier

For 1F1B, interleaved 1F1B (4 chunks per device) and ZB-V on 8 devices, one run of each
evaluator per size, each size in a fresh process. Links carry a latency and a size cost
(5 us, 100 GB/s), so every cross-device hop is a real transfer. Both columns time the
same call, schedule, costs and topology in, Trace out (rows, times, causes); the schedule
is built before the clock starts.

``fast`` is a first call on a new schedule (its dependency graph is laid out, then
swept); ``again`` is a second call on the same schedule with other costs, which reuses the
graph, as a planner scoring one schedule under many costs does. ``x`` is the engine's
time over the fast evaluator's first call. Every fast trace is checked against the
engine's (same makespan to 1e-9) before a number is printed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

SIZES = [10**4, 10**5, 10**6]
SCHEDULES = {"1f1b": 1, "interleaved-1f1b": 4, "zbv": 2}  # name -> virtual stages
DEVICES = 8


def one_run(name: str, actions: int) -> dict:
    from pipesim.schedules import get_schedule
    from pipesim.sim.costs import uniform_costs
    from pipesim.sim.engine import simulate
    from pipesim.sim.evaluate import evaluate
    from pipesim.sim.links import Link, Topology

    chunks = SCHEDULES[name]
    per_microbatch = (3 if name == "zbv" else 2) * DEVICES * chunks  # F, B (or I, W) per stage
    microbatches = max(2 * DEVICES, actions // per_microbatch // DEVICES * DEVICES)
    schedule = get_schedule(name, DEVICES, microbatches, chunks)
    stages = schedule.model_stages

    def costs(scale: float):
        return uniform_costs(
            stages,
            [scale * (1.0 + s / 16) for s in range(stages)],
            backward_input_ms=1.0 * scale,
            backward_weight_ms=1.0,
            activation_bytes=1e6,
        )

    topology = Topology(DEVICES, default=Link(latency_us=5, bandwidth_gbps=100))
    clock = time.perf_counter
    begin = clock()
    engine = simulate(schedule, costs(1.0), topology)
    engine_s = clock() - begin
    begin = clock()
    fast, which = evaluate(schedule, costs(1.0), topology, evaluator="fast")
    fast_s = clock() - begin
    begin = clock()
    evaluate(schedule, costs(1.25), topology, evaluator="fast")
    again_s = clock() - begin
    assert which == "fast" and len(fast.end) == len(engine.end)
    assert abs(fast.makespan_ms - engine.makespan_ms) <= 1e-9 * engine.makespan_ms
    n = schedule.num_actions
    return {
        "schedule": name,
        "actions": n,
        "engine_per_s": n / engine_s,
        "fast_per_s": n / fast_s,
        "again_per_s": n / again_s,
        "speedup": engine_s / fast_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max", type=float, default=1e6)
    parser.add_argument("--one", nargs=2, metavar=("SCHEDULE", "ACTIONS"))
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one[0], int(args.one[1]))))
        return
    print(f"{'schedule':<18}{'actions':>10}{'engine/s':>12}{'fast/s':>12}{'again/s':>12}{'x':>7}")
    for name in SCHEDULES:
        for size in [s for s in SIZES if s <= args.max]:
            out = subprocess.run(
                [sys.executable, __file__, "--one", name, str(size)],
                capture_output=True,
                text=True,
                check=True,
            )
            row = json.loads(out.stdout)
            print(
                f"{row['schedule']:<18}{row['actions']:>10}{row['engine_per_s']:>12,.0f}"
                f"{row['fast_per_s']:>12,.0f}{row['again_per_s']:>12,.0f}{row['speedup']:>7.1f}"
            )


if __name__ == "__main__":
    main()
