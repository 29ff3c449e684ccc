"""A DeepSeek-V3-sized MoE step at sub-layer grain: how long it takes to build and simulate.

    python benchmarks/bench_moe.py                       # m = 128, 256, 512 per pipeline
    python benchmarks/bench_moe.py --microbatches 256 --evaluator simpy

The bundled ``scenarios/deepseek-v3-2048xh800.yaml`` (PP 16, EP 64, 58 MoE layers, each
stage's passes cut into attention, dispatch, experts and combine parts), with its global
batch set so that each pipeline runs ``m`` microbatches, under DualPipe, 1F1B, combined
1F1B (``1f1b-a2a-overlap``, with and without ``delay_wgrad``) and interleaved combined
1F1B (two chunks a device). Each run is timed in parts: building the scenario (costs and
parts from the model), simulating the step to a Report on the evaluator asked for, and
the sub-layer rows and exposed all-to-all that ``--trace`` and ``explain`` add. The step
time and the share of it the busiest device's compute waits on all-to-alls are printed
beside the times.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

SCENARIO = Path(__file__).parents[1] / "scenarios" / "deepseek-v3-2048xh800.yaml"
REPLICAS = 128  # the scenario's parallel.data: global batch = m x replicas
VARIANTS = (
    ("dualpipe", 1, False),
    ("1f1b", 1, False),
    ("1f1b-a2a-overlap", 1, False),
    ("1f1b-a2a-overlap", 1, True),
    ("interleaved-1f1b-a2a-overlap", 2, False),
)


def one_run(schedule: str, chunks: int, delay: bool, microbatches: int, evaluator: str) -> dict:
    from pipesim import load_scenario, run_scenario
    from pipesim.analysis.exposure import device_exposed_ms
    from pipesim.sim.sublayer_rows import sublayer_rows

    overrides = [
        f"pipeline.schedule={schedule}",
        f"pipeline.virtual_stages={chunks}",
        f"pipeline.delay_wgrad={'true' if delay else 'false'}",
        f"model.global_batch={microbatches * REPLICAS}",
    ]
    start = time.perf_counter()
    scenario = load_scenario(SCENARIO, overrides)
    built = time.perf_counter()
    result = run_scenario(scenario, evaluator=evaluator)
    simulated = time.perf_counter()
    rows = sublayer_rows(result.trace, scenario.schedule, scenario.costs)
    exposed = max(device_exposed_ms(result.trace, scenario.schedule, scenario.costs))
    parted = time.perf_counter()
    step = result.report.step_time_ms
    return {
        "actions": scenario.schedule.num_actions,
        "parts": len(rows) if rows is not None else 0,
        "build_s": built - start,
        "simulate_s": simulated - built,
        "parts_s": parted - simulated,
        "step_ms": step,
        "exposed_share": exposed / step,
        "evaluator": str(result.report.evaluator),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--microbatches", type=int, nargs="*", default=[128, 256, 512])
    parser.add_argument("--evaluator", choices=("fast", "simpy", "auto"), default="fast")
    args = parser.parse_args()
    print(f"DeepSeek-V3, PP 16 x EP 64, evaluator {args.evaluator}")  # noqa: T201
    print(  # noqa: T201
        f"{'schedule':<34} {'m':>4} {'actions':>8} {'parts':>8} {'build s':>8} "
        f"{'simulate s':>10} {'parts s':>8} {'step ms':>10} {'exposed a2a':>11}"
    )
    for microbatches in args.microbatches:
        for schedule, chunks, delay in VARIANTS:
            run = one_run(schedule, chunks, delay, microbatches, args.evaluator)
            name = schedule + (" delay_wgrad" if delay else "")
            print(  # noqa: T201
                f"{name:<34} {microbatches:>4} {run['actions']:>8,} {run['parts']:>8,} "
                f"{run['build_s']:>8.2f} {run['simulate_s']:>10.2f} {run['parts_s']:>8.2f} "
                f"{run['step_ms']:>10.1f} {run['exposed_share'] * 100:>10.1f}%"
            )


if __name__ == "__main__":
    main()
