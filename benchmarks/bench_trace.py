"""Chrome trace export of a large run: bytes written and seconds taken, plain and gzipped.

    python benchmarks/bench_trace.py                  # 400 devices, 400 microbatches, 1F1B
    python benchmarks/bench_trace.py --devices 64 --microbatches 128

One 1F1B step on a link with latency and bandwidth, so every hop is a transfer row: about
``4 * devices * microbatches`` events (a forward, a backward and one transfer each), plus
the activation-memory counters. The step is simulated once; then the trace is written as
``pipesim run --trace`` writes it (``chrome_trace_json``, gzip for a ``.gz`` path), and,
for comparison, as a dict of events dumped by ``json`` with its default separators (what
``to_chrome_trace`` gives a caller that merges traces). The times are one run each.
"""

from __future__ import annotations

import argparse
import json
import time

from bench_engine import uniform_scenario  # the same equal-stage scenario


def timed(label: str, make) -> dict:
    start = time.perf_counter()
    size = len(make())
    return {"writer": label, "seconds": round(time.perf_counter() - start, 2), "bytes": size}


def main() -> None:
    from pipesim import run_scenario
    from pipesim.cli.gc_pause import no_cyclic_gc
    from pipesim.scenario.build import build_scenario, parse_spec
    from pipesim.sim.export import chrome_trace_json, gzipped, to_chrome_trace

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=400)
    parser.add_argument("--microbatches", type=int, default=400)
    args = parser.parse_args()
    spec = parse_spec(uniform_scenario("1f1b", args.devices, args.microbatches), "bench")
    with no_cyclic_gc():  # as ``pipesim run`` runs it
        result = run_scenario(build_scenario(spec, "bench"))
        trace, memory = result.trace, result.memory
        rows = {"devices": args.devices, "microbatches": args.microbatches, "rows": len(trace.end)}
        print(json.dumps(rows))
        text = chrome_trace_json(trace, label="bench", memory=memory)
        for line in (
            timed("chrome_trace_json", lambda: chrome_trace_json(trace, "bench", memory=memory)),
            timed("gzip of that text", lambda: gzipped(text)),
            timed(
                "json.dumps(to_chrome_trace)",
                lambda: json.dumps(to_chrome_trace(trace, "bench", memory=memory)),
            ),
        ):
            print(json.dumps(line))


if __name__ == "__main__":
    main()
