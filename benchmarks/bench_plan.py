"""Plan two jobs bounded and exhaustively and say how many candidates each step handled.

    python benchmarks/bench_plan.py [--jobs 2] [--only 70b|405b] [--no-exhaustive]

Plans, exactly as ``pipesim plan`` does (confirmation on the SimPy engine included):

* ``scenarios/plan-llama-70b-64xh100.yaml`` on 64 GPUs (the issue's target: under 15 s on
  2 cores);
* ``scenarios/plan-llama-405b-8192xh100.yaml`` on 8,192 GPUs (target: under 60 s);

each over the default space, once with lower bounds (the default) and once with
``exhaustive=True``, and prints one row per run: the candidates in the space, folded
(the same step as an earlier candidate under another name), pruned (cannot run or cannot
fit), bounded out, simulated (with the distinct timelines among them), the wall time,
and whether the winner, the top k and the Pareto front equal the exhaustive run's.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pipesim import plan, read_mapping
from pipesim.analysis.plan.fold import FOLDED
from pipesim.cli.gc_pause import no_cyclic_gc

SCENARIOS = Path(__file__).parent.parent / "scenarios"
JOBS = {
    "70b": (str(SCENARIOS / "plan-llama-70b-64xh100.yaml"), 64),
    "405b": (str(SCENARIOS / "plan-llama-405b-8192xh100.yaml"), 8192),
}
HEADER = (
    f"{'job':<6} {'mode':<10} {'space':>8} {'folded':>7} {'pruned':>7} {'bounded':>8} "
    f"{'simulated':>9} {'timelines':>9} {'wall s':>7}  same as exhaustive"
)


def run(path: str, gpus: int, jobs: int, exhaustive: bool):
    base = read_mapping(path)
    start = time.perf_counter()
    with no_cyclic_gc():  # as ``pipesim plan`` runs it
        result = plan(base, path, gpus, (), jobs=jobs, exhaustive=exhaustive)
    return result, time.perf_counter() - start


def row(name: str, mode: str, result, wall: float, same: str) -> str:
    folded = sum(n for reason, n in result.pruned.items() if reason.endswith(FOLDED))
    pruned = sum(result.pruned.values()) - folded
    return (
        f"{name:<6} {mode:<10} {result.space_size:>8,} {folded:>7,} {pruned:>7,} "
        f"{result.bounded:>8,} {result.scored:>9,} {result.timelines:>9,} {wall:>7.1f}  {same}"
    )


def outputs(result) -> tuple:
    return (
        [r.to_dict() for r in result.results],
        [r.to_dict() for r in result.pareto],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", choices=sorted(JOBS), action="append")
    parser.add_argument("--no-exhaustive", action="store_true")
    args = parser.parse_args()
    print(f"jobs={args.jobs}, default space, top 20, confirm 10")
    print(HEADER)
    for name in args.only or JOBS:
        path, gpus = JOBS[name]
        bounded, wall = run(path, gpus, args.jobs, exhaustive=False)
        if args.no_exhaustive:
            print(row(name, "bounded", bounded, wall, "-"), flush=True)
            continue
        every, every_wall = run(path, gpus, args.jobs, exhaustive=True)
        same = "yes" if outputs(bounded) == outputs(every) else "NO"
        print(row(name, "bounded", bounded, wall, same), flush=True)
        print(row(name, "exhaustive", every, every_wall, ""), flush=True)
        best = bounded.results[0]
        print(f"  winner: {best.step_time_ms:.1f} ms, MFU {best.mfu:.3f}, {best.candidate.keys()}")


if __name__ == "__main__":
    main()
