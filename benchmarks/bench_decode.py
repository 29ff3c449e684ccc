"""Decode pipelines: how long the token steps can be before building or simulating slows.

    python benchmarks/bench_decode.py              # 4 devices, 8 groups, T = 128 .. 16384
    python benchmarks/bench_decode.py --devices 8 --groups 16 --max-tokens 4096

A decode run of p devices, k groups and T tokens is p * k * T actions over p * T virtual
stages. Each size is timed in three parts: building the scenario (schedule, per-step costs
from a model, links), simulating it to a Report with TTFT/TPOT, and the Gantt-trace names
(``t3 g1``) that --gantt and --trace write. Costs come from a model (Llama-2-7B's shape on
A100s), so every step's cost is computed, not copied.
"""

from __future__ import annotations

import argparse
import time


def one_run(devices: int, groups: int, tokens: int) -> dict:
    from pipesim import run_scenario
    from pipesim.scenario.build import build_scenario, parse_spec
    from pipesim.sim.decode import row_names

    spec = {
        "schema_version": 1,
        "name": "bench-decode",
        "pipeline": {
            "mode": "decode",
            "devices": devices,
            "microbatches": groups,
            "microbatch_size": 4,
            "max_actions": 10**9,
        },
        "decode": {"tokens": tokens, "prompt_tokens": 256},
        "model": {
            "layers": 32,
            "hidden": 4096,
            "heads": 32,
            "ffn_hidden": 11008,
            "mlp": "gated",
            "seq_len": 4096,
            "vocab": 32000,
        },
        "hardware": {"gpu": "a100-sxm-80gb", "link": "nvlink3"},
    }
    start = time.perf_counter()
    scenario = build_scenario(parse_spec(spec, "bench"), "bench")
    built = time.perf_counter()
    result = run_scenario(scenario)
    simulated = time.perf_counter()
    row_names(result.trace)
    named = time.perf_counter()
    return {
        "actions": scenario.schedule.num_actions,
        "build_s": built - start,
        "simulate_s": simulated - built,
        "names_s": named - simulated,
        "tpot_ms": result.decode.tpot_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16384)
    args = parser.parse_args()
    print(f"decode: {args.devices} devices, {args.groups} groups")  # noqa: T201
    print(
        f"{'tokens':>8} {'actions':>10} {'build s':>9} {'simulate s':>11} {'names s':>8} "  # noqa: T201
        f"{'actions/s':>10}"
    )
    tokens = 128
    while tokens <= args.max_tokens:
        run = one_run(args.devices, args.groups, tokens)
        rate = run["actions"] / run["simulate_s"]
        print(  # noqa: T201
            f"{tokens:>8} {run['actions']:>10,} {run['build_s']:>9.2f} {run['simulate_s']:>11.2f} "
            f"{run['names_s']:>8.2f} {rate:>10,.0f}"
        )
        tokens *= 4


if __name__ == "__main__":
    main()
