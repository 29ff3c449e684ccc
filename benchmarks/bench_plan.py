"""Plan Llama-2-70B on 64 H100s end to end and say how many candidates were scored, how fast.

    python benchmarks/bench_plan.py [--jobs 2] [--space KEY=V1,V2 ...]

Plans ``scenarios/plan-llama-70b-64xh100.yaml`` on 64 GPUs over the default space (or the
one --space narrows or widens), exactly as ``pipesim plan`` does, confirmation on the SimPy
engine included, and prints: the space size, the candidates pruned (per reason) and scored
(each with an exact timeline from the fast evaluator; candidates whose timeline inputs
are equal share one, and the number of distinct timelines is printed beside them), the
wall time, and the rate. The default space tries every policy, ZeRO stages 0 to 3 and
both values of ``parallel.dp_overlap`` and ``parallel.tp_overlap``; the issue's target is
at least 10,000 candidates scored in under 60 s on 2 cores.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pipesim import plan, read_mapping
from pipesim.cli.gc_pause import no_cyclic_gc

SCENARIO = str(Path(__file__).parent.parent / "scenarios" / "plan-llama-70b-64xh100.yaml")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--space", action="append", default=[])
    parser.add_argument("--confirm", type=int, default=10)
    args = parser.parse_args()
    space = list(args.space)
    base = read_mapping(SCENARIO)
    start = time.perf_counter()
    with no_cyclic_gc():  # as ``pipesim plan`` runs it
        result = plan(base, SCENARIO, 64, space, jobs=args.jobs, confirm=args.confirm, top=5)
    wall = time.perf_counter() - start
    print(f"space {result.space_size:,} candidates, jobs={args.jobs}, space={space or 'default'}")
    for reason, count in result.pruned.items():
        print(f"  pruned {count:,}: {reason}")
    print(
        f"scored {result.scored:,} candidates ({result.timelines:,} distinct timelines), "
        f"confirmed {result.confirmed} on the SimPy engine, in {wall:.1f} s "
        f"({result.scored / wall:,.0f} scored/s, {result.space_size / wall:,.0f} candidates/s)"
    )
    best = result.results[0]
    keys = best.candidate.keys()
    print(f"winner: {best.step_time_ms:.1f} ms, MFU {best.mfu:.3f}, {keys}")


if __name__ == "__main__":
    main()
