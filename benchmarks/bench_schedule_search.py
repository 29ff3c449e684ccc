"""Time the schedule search (zb-auto, v-auto) at the sizes issue 12 names.

    python benchmarks/bench_schedule_search.py [--sizes 16x64 64x512] [--no-progress]

For each size ``p x m``, each policy and each cost shape, one ``search_schedule`` run at
the default limit (what 1F1B holds), then the fixed recipes of the family simulated on
the same costs. Printed per case: search seconds, candidates tried, the makespan found
against the best fixed recipe that fits the same limit (and by how much it is faster),
the limit and the peak reached (worst device). The target is at most 10 s for p=16,
m=64 on 2 cores; p=64, m=512 shows a progress bar.

Cost shapes, per model chunk (v-auto cuts the same model into two chunks per device, so
its per-chunk costs are halved):

* ``uniform``: F = I = W = 1 ms, 1 GiB kept per microbatch (0.25 GiB of it until W), no
  communication;
* ``uneven``: F between 0.8 and 1.25 ms, the last stage 1.6x (the LM head), I = 1.1 F,
  W = 0.8 F, activations proportional to F, 16 MiB sent per boundary over a link of
  20 us latency and 100 GB/s.
"""

from __future__ import annotations

import argparse
import math
import time

from tqdm import tqdm

from pipesim import Costs, Link, Topology, build_report, get_schedule, simulate, uniform_costs
from pipesim.search import AUTO_POLICIES, search_schedule
from pipesim.sim.memory import memory_timelines

GiB, MiB = 2**30, 2**20
FAMILIES = {
    "zb-auto": ("1f1b", "zb-h1", "zb-h2", "eager-1f1b"),
    "v-auto": ("zbv", "v-half", "v-min"),
}


def costs_for(shape: str, stages: int, chunks: int) -> tuple[Costs, Topology | None]:
    """The per-chunk costs of ``shape`` for ``stages`` model stages, and its topology."""
    scale = 1.0 / chunks
    if shape == "uniform":
        costs = uniform_costs(
            stages,
            scale,
            backward_input_ms=scale,
            backward_weight_ms=scale,
            activation_memory_bytes=GiB * scale,
            weight_grad_memory_bytes=GiB * scale / 4,
        )
        return costs, None
    forward = [scale * (1.0 + 0.2 * math.sin(1.7 * k + 0.3)) for k in range(stages)]
    forward[-1] *= 1.6
    costs = uniform_costs(
        stages,
        forward,
        backward_input_ms=[1.1 * f for f in forward],
        backward_weight_ms=[0.8 * f for f in forward],
        activation_bytes=16 * MiB,
        activation_memory_bytes=[GiB * f for f in forward],
        weight_grad_memory_bytes=[GiB * f / 4 for f in forward],
    )
    devices = stages // chunks
    return costs, Topology(devices, Link(latency_us=20.0, bandwidth_gbps=100.0, name="bench"))


def measure(name: str, devices: int, microbatches: int, costs: Costs, topology) -> tuple:
    """``(makespan_ms, peak activation bytes on the worst device)`` of a fixed recipe."""
    chunks = costs.stages // devices
    schedule = get_schedule(name, devices, microbatches, chunks)
    trace = simulate(schedule, costs, topology)
    memory = memory_timelines(trace, schedule, costs)
    report = build_report(trace, schedule, costs, 1, memory=memory, topology=topology)
    return report.makespan_ms, max(d.peak_activation_bytes for d in report.per_device)


def best_fixed(policy: str, devices: int, microbatches: int, costs, topology, limit: float):
    """The fastest fixed recipe of the family whose peak fits ``limit``: (name, makespan)."""
    best = ("none fits", math.inf)
    for name in FAMILIES[policy]:
        try:
            makespan, peak = measure(name, devices, microbatches, costs, topology)
        except (ValueError, RuntimeError):  # a recipe whose constraints this size breaks
            continue
        if peak <= limit * (1 + 1e-9) and makespan < best[1]:
            best = (name, makespan)
    return best


def run_case(policy: str, shape: str, devices: int, microbatches: int, bar: bool) -> None:
    chunks = AUTO_POLICIES[policy]
    costs, topology = costs_for(shape, devices * chunks, chunks)
    with tqdm(
        unit="candidate",
        desc=f"{policy} p={devices} m={microbatches}",
        disable=not bar,
        leave=False,
    ) as progress:

        def tried(count: int) -> None:  # the search reports each candidate it tries
            progress.update(count)

        start = time.perf_counter()
        found = search_schedule(policy, devices, microbatches, costs, topology, progress=tried)
        seconds = time.perf_counter() - start
    fixed, fixed_ms = best_fixed(policy, devices, microbatches, costs, topology, found.limit_bytes)
    gain = f"{1 - found.makespan_ms / fixed_ms:+.1%}" if math.isfinite(fixed_ms) else "-"
    print(
        f"{policy:<8} {shape:<8} p={devices:<3} m={microbatches:<4} {seconds:>8.2f} s "
        f"{found.candidates:>7} cand  makespan {found.makespan_ms:>10.3f} ms  "
        f"best fixed {fixed} {fixed_ms:.3f} ms (auto {gain} faster)  "
        f"limit {found.limit_bytes / GiB:.3f} GiB  peak {found.peak_activation_bytes / GiB:.3f} GiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["16x64", "64x512"], metavar="PxM")
    parser.add_argument("--policies", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--shapes", nargs="+", default=["uniform", "uneven"])
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    for size in args.sizes:
        devices, microbatches = (int(part) for part in size.lower().split("x"))
        bar = not args.no_progress and devices * microbatches > 16 * 64
        for policy in args.policies:
            for shape in args.shapes:
                run_case(policy, shape, devices, microbatches, bar)


if __name__ == "__main__":
    main()
