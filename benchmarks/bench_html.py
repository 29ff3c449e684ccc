"""The interactive HTML report of a large run: bytes, seconds to make and write it, and,
with ``--browser``, seconds until headless Chromium has drawn it and milliseconds a pan takes.

    python benchmarks/bench_html.py                    # 400 devices, 125 microbatches, 1F1B
    python benchmarks/bench_html.py --devices 64 --microbatches 256 --browser

One 1F1B step on a link with latency and bandwidth (``bench_engine.uniform_scenario``):
``2 * devices * microbatches`` actions (10^5 by default) and about as many transfers, every
one a box of the Gantt chart. The step is simulated once; the page is made as ``pipesim
report`` makes it (``pipesim.plot.html.training_report``, the critical path included; the
idle causes are left out past ``IDLE_CAUSE_WORK``) and written as every output is
(``pipesim.cli.output.write_outputs``). ``--browser`` opens the file in the tests' headless
Chromium (``tests/plot/browser.py``: Debian's chromium, WebGL in software, SwiftShader):
the seconds until every figure is drawn, then three pans of the Gantt chart, each the
milliseconds from the call to plotly having redrawn. Software WebGL on a CPU is far slower
than a GPU; the first draw there is the number to read with that in mind. One run each.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench_engine import uniform_scenario  # the same equal-stage scenario

ROOT = Path(__file__).resolve().parents[1]
PAN = """
const done = arguments[arguments.length - 1];
const gd = document.getElementById("pipesim-gantt");
const start = performance.now();
Plotly.relayout(gd, {"xaxis.range": arguments[0]}).then(() => done(performance.now() - start));
"""


def seconds_since(start: float) -> float:
    return round(time.perf_counter() - start, 2)


def in_browser(path: Path, makespan_ms: float) -> dict:
    """Seconds until the page says it is drawn, and three pans' milliseconds."""
    sys.path.insert(0, str(ROOT))
    from tests.plot import browser

    if browser.missing() is not None:
        return {"browser": f"skipped: {browser.missing()}"}
    with browser.chromium(page_load="none") as driver:
        seconds = round(browser.drawn(driver, path), 1)
        pans = []
        for low in (0.1, 0.4, 0.7):
            window = [low * makespan_ms, (low + 0.1) * makespan_ms]
            pans.append(round(driver.execute_async_script(PAN, window)))
    return {"drawn_s": seconds, "pan_ms": pans}


def main() -> None:
    from pipesim import run_scenario
    from pipesim.cli.gc_pause import no_cyclic_gc
    from pipesim.cli.output import write_outputs
    from pipesim.plot import training_report
    from pipesim.scenario.build import build_scenario, parse_spec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=400)
    parser.add_argument("--microbatches", type=int, default=125)
    parser.add_argument("--browser", action="store_true", help="Also open it in Chromium.")
    args = parser.parse_args()
    spec = parse_spec(uniform_scenario("1f1b", args.devices, args.microbatches), "bench")
    with no_cyclic_gc(), tempfile.TemporaryDirectory() as folder:  # as pipesim runs it
        start = time.perf_counter()
        result = run_scenario(build_scenario(spec, "bench"))
        simulated = seconds_since(start)
        start = time.perf_counter()
        page = training_report(result)
        made = seconds_since(start)
        path = Path(folder) / "report.html"
        start = time.perf_counter()
        write_outputs([(str(path), page)])
        line = {
            "devices": args.devices,
            "microbatches": args.microbatches,
            "rows": len(result.trace.end),
            "simulate_s": simulated,
            "make_s": made,
            "write_s": seconds_since(start),
            "bytes": path.stat().st_size,
        }
        if args.browser:
            line |= in_browser(path, result.report.makespan_ms)
        print(json.dumps(line))


if __name__ == "__main__":
    main()
