"""pipesim's engine against torch.distributed.pipelining's own dry-run simulator.

    python benchmarks/bench_torch_simulator.py [--max 1e5]

Both get the same compute-only schedule (pipesim's 1F1B or interleaved 1F1B, exported to
torch's action type). torch's simulator needs its communication pass first
(``_add_send_recv``) and counts only steps, no time; pipesim runs the scenario to a full
Report with a latency/bandwidth link. Actions per second count compute actions in both.
torch is needed (``pip install torch==2.13.0``); its helpers are private and may change.
"""

from __future__ import annotations

import argparse
import time


def torch_rate(schedule) -> float:
    from torch.distributed.pipelining.schedules import (
        _Action,
        _add_send_recv,
        _ComputationType,
        _simulate_comms_compute,
    )

    kinds = {"F": _ComputationType.FORWARD, "B": _ComputationType.FULL_BACKWARD}
    order = {
        rank: [_Action(a.stage, kinds[str(a.kind)], a.microbatch) for a in actions]
        for rank, actions in enumerate(schedule.device_actions)
    }
    placement = schedule.placement
    start = time.perf_counter()
    with_comms = _add_send_recv(order, lambda s: placement[s], schedule.stages)
    _simulate_comms_compute(with_comms, lambda s: placement[s], schedule.stages)
    return schedule.num_actions / (time.perf_counter() - start)


def pipesim_rate(name: str, devices: int, microbatches: int, chunks: int) -> tuple[float, object]:
    from pipesim import run_scenario
    from pipesim.scenario.build import build_scenario, parse_spec

    spec = {
        "schema_version": 1,
        "name": "bench",
        "pipeline": {
            "schedule": name,
            "devices": devices,
            "microbatches": microbatches,
            "virtual_stages": chunks,
        },
        "costs": {"forward_ms": 1.0, "backward_ms": 2.0, "activation_bytes": 1e6},
        "hardware": {"link": {"latency_us": 5, "bandwidth_gbps": 100}},
    }
    start = time.perf_counter()
    result = run_scenario(build_scenario(parse_spec(spec, "bench"), "bench"))
    return result.scenario.schedule.num_actions / (
        time.perf_counter() - start
    ), result.scenario.schedule


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max", type=float, default=1e5)
    args = parser.parse_args()
    print(f"{'schedule':<18}{'actions':>10}{'pipesim act/s':>16}{'torch act/s':>14}")
    for name, chunks in (("1f1b", 1), ("interleaved-1f1b", 4)):
        for size in (10**3, 10**4, 10**5):
            if size > args.max:
                continue
            devices = 8
            microbatches = max(devices, size // (2 * devices * chunks) // devices * devices)
            ours, schedule = pipesim_rate(name, devices, microbatches, chunks)
            theirs = torch_rate(schedule)
            print(f"{name:<18}{schedule.num_actions:>10}{ours:>16,.0f}{theirs:>14,.0f}")


if __name__ == "__main__":
    main()
