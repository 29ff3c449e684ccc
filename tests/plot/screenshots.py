"""The README's pictures of the HTML report, one per view, taken by the tests' browser.

    python -m tests.plot.screenshots [--out docs/images]

Builds each view from a bundled scenario, opens it in headless Chromium
(``tests/plot/browser.py``), hovers over something where the view has a hover worth
showing, and saves the top of the page as a PNG of at most 256 colours (each well under
300 kB). The same pipesim gives the same pictures, up to the browser's font rendering.
"""

from __future__ import annotations

import argparse
import base64
import io
import tempfile
from pathlib import Path

import yaml
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.support.ui import WebDriverWait

from pipesim.analysis.compare import compare_schedules
from pipesim.analysis.plan import plan
from pipesim.analysis.run import run_scenario
from pipesim.plot import compare_report, plan_report, serving_report, training_report
from pipesim.plot.html.gantt import LANES
from pipesim.scenario.build import load_scenario, read_mapping
from pipesim.scenario.serving import load_serving, run_serving
from pipesim.sim.trace import Lane
from tests.analysis.test_plan import small_base
from tests.plot import browser

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
WIDTH = 1280
MAX_BYTES = 300_000
PLAN_SPACE = ("pipeline.schedule=1f1b,zbv,interleaved-1f1b", "model.recompute=false")
POSITION = """
const gd = document.getElementById(arguments[0]);
const layout = gd._fullLayout, xa = layout.xaxis, ya = layout.yaxis;
const box = gd.getBoundingClientRect();
return [xa._offset + xa.d2p(arguments[1]) - box.width / 2,
        ya._offset + ya.d2p(arguments[2]) - box.height / 2];
"""


def training_page() -> tuple[str, tuple | None]:
    result = run_scenario(load_scenario(str(SCENARIOS / "llama-70b-4x8-h100.yaml")))
    trace = result.trace
    row = trace.names().index("1F2")
    point = ((trace.start[row] + trace.end[row]) / 2, 1 + LANES[Lane.COMPUTE][0])
    return training_report(result), ("pipesim-gantt", *point)


def compare_page() -> tuple[str, tuple | None]:
    source = str(SCENARIOS / "gpipe-vs-1f1b.yaml")
    names = ["gpipe", "1f1b", "zb-h1", "interleaved-1f1b"]
    return compare_report(compare_schedules(read_mapping(source), source, names)), None


def serving_page() -> tuple[str, tuple | None]:
    source = str(SCENARIOS / "llama-70b-serve-8xh100.yaml")
    overrides = ["parallel.tensor=4", "pipeline.devices=2", "serving.workload.requests=300"]
    return serving_report(run_serving(load_serving(source, overrides))), None


def plan_page() -> tuple[str, tuple | None]:
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "small.yaml"
        source.write_text(yaml.safe_dump(small_base()))
        found = plan(small_base(), str(source), 8, PLAN_SPACE, top=8)
        page = plan_report(found)
    winner = found.results[0]
    return page, ("plan-pareto", winner.peak_memory_bytes / 2**30, winner.step_time_ms)


VIEWS = {
    "training": (training_page, "pipesim-gantt", 1150),
    "compare": (compare_page, "compare-gantt", 1150),
    "serving": (serving_page, "serve-cdf", 1250),
    "plan": (plan_page, "plan-table", 1000),
}


def capture(driver, height: int) -> bytes:
    """The top ``height`` pixels of the page at ``WIDTH``, as a PNG (the window is taller,
    so the hover label stays as it is)."""
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {"format": "png", "clip": {"x": 0, "y": 0, "width": WIDTH, "height": height, "scale": 1}},
    )
    return base64.b64decode(shot["data"])


def small_png(png: bytes) -> bytes:
    """``png`` in at most 256 colours."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=256, dither=Image.NONE)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def take(driver, name: str, folder: Path, out: Path) -> Path:
    build, _, height = VIEWS[name]
    page, point = build()
    path = folder / f"{name}.html"
    path.write_text(page, encoding="utf-8")
    driver.set_window_size(WIDTH, height + 200)  # the picture inside the window
    browser.open_report(driver, path)
    if point is not None:
        figure, x, y = point
        dx, dy = driver.execute_script(POSITION, figure, x, y)
        element = driver.find_element("id", figure)
        ActionChains(driver).move_to_element_with_offset(element, round(dx), round(dy)).perform()
        WebDriverWait(driver, 10).until(
            lambda d: d.execute_script(
                "return document.querySelector('#' + arguments[0] + ' .hovertext')", figure
            )
        )
    data = small_png(capture(driver, height))
    assert len(data) < MAX_BYTES, f"{name}: {len(data):,} bytes"
    target = out / f"report-{name}.png"
    target.write_bytes(data)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("views", nargs="*", help=f"some of {', '.join(VIEWS)} (default: all)")
    args = parser.parse_args()
    unknown = set(args.views) - set(VIEWS)
    if unknown:
        parser.error(f"unknown views: {', '.join(sorted(unknown))}")
    reason = browser.missing()
    if reason is not None:
        raise SystemExit(f"no browser: {reason}")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder, browser.chromium((WIDTH, 1000)) as driver:
        for name in args.views or VIEWS:
            target = take(driver, name, Path(folder), args.out)
            print(f"{target.relative_to(ROOT)}: {target.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
