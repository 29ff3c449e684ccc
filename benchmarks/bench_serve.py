"""Time the serving simulator on a chat-like workload of 100,000 requests.

    python benchmarks/bench_serve.py [--requests 100000] [--rate 60] [--chunked]

One replica with a 4-stage pipeline (four virtual engines), continuous batching with vLLM's
default limits (256 sequences, 8192 tokens an iteration), 16-token KV blocks. Prompts and
outputs are lognormal (mean 256 and 128 tokens, cv 1), Poisson arrivals. Costs are
hand-typed, in the range of a 7B model's quarter on one GPU: a 256-token prompt 4 ms per
stage, a decode step 2.5 ms per stage. Prints requests simulated per second of wall time
and iterations per second, and the run's own throughput and latencies as a sanity check.

How this compares with the naive design (one SimPy event per token per request): the
engine raises one event per iteration, whatever the batch holds, and the scheduler touches
a decoding sequence only when it crosses into a new KV block or finishes. Here a decode
iteration carries about ``mean batch size`` tokens, so the naive design would process that
many times more events, and per stage rather than per iteration another factor 4. The
benchmark measures what one bare SimPy timeout costs on this machine (a process yielding
200,000 of them) and prints the naive design's time as that cost times its event count: a
lower bound, since it leaves out the naive design's per-token bookkeeping.
"""

from __future__ import annotations

import argparse
import time

import simpy

from pipesim.scenario.arrivals import generate_requests
from pipesim.scenario.serving_schema import LengthSpec, WorkloadSpec
from pipesim.serving.deployment import ServeConfig
from pipesim.serving.engine import simulate_serving
from pipesim.serving.metrics import summarize
from pipesim.serving.replica import HandTypedCosts, ReplicaConfig

STAGES = 4


def simpy_event_cost_s(events: int = 200_000) -> float:
    """Seconds one SimPy timeout costs: a process yielding ``events`` of them."""
    env = simpy.Environment()

    def ticker():
        for _ in range(events):
            yield env.timeout(1.0)

    env.process(ticker())
    start = time.perf_counter()
    env.run()
    return (time.perf_counter() - start) / events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=60.0, help="arrivals per second")
    parser.add_argument("--chunked", action="store_true", help="chunked prefill")
    args = parser.parse_args()
    spec = WorkloadSpec(
        arrival="poisson",
        rate=args.rate,
        requests=args.requests,
        prompt_tokens=LengthSpec(distribution="lognormal", mean=256, cv=1.0, max=4096),
        output_tokens=LengthSpec(distribution="lognormal", mean=128, cv=1.0, max=2048),
        seed=1,
    )
    requests = generate_requests(spec)
    costs = HandTypedCosts((4.0,) * STAGES, (2.5,) * STAGES, 256, (0.05,) * (STAGES - 1))
    replica = ReplicaConfig(
        costs,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        chunked_prefill=args.chunked,
        block_size=16,
        kv_blocks=STAGES * 4096,
    )
    start = time.perf_counter()
    result = simulate_serving(ServeConfig(replica), requests)
    wall_s = time.perf_counter() - start
    report = summarize(result)
    iterations = len(result.iterations)
    tokens = int(result.requests.output_tokens.sum())
    print(f"requests: {len(requests):,} in {wall_s:.1f} s wall")
    print(f"requests simulated per second of wall time: {len(requests) / wall_s:,.0f}")
    print(f"iterations: {iterations:,}, per second of wall time: {iterations / wall_s:,.0f}")
    print(f"events raised (arrivals + iterations): {len(requests) + iterations:,}")
    naive = tokens * STAGES
    per_event_s = simpy_event_cost_s()
    print(f"naive events (one per token per request per stage): {naive:,}")
    print(
        f"naive design, at least: {naive * per_event_s:,.0f} s "
        f"({per_event_s * 1e6:.2f} us per bare SimPy event), {naive * per_event_s / wall_s:,.0f}x"
    )
    print(
        f"simulated {report.duration_s:.0f} s: {report.throughput_rps:.1f} req/s, "
        f"{report.output_tokens_per_second:,.0f} tok/s, mean batch {report.batch_size.mean:.1f}, "
        f"preemptions {report.preemptions}, rejected {report.rejected}"
    )
    print(
        f"TTFT p50/p99 {report.ttft_ms.p50:.0f}/{report.ttft_ms.p99:.0f} ms, "
        f"TPOT p50/p99 {report.tpot_ms.p50:.1f}/{report.tpot_ms.p99:.1f} ms, "
        f"KV use mean/peak {report.kv_utilization.mean:.2f}/{report.kv_utilization.peak:.2f}"
    )


if __name__ == "__main__":
    main()
