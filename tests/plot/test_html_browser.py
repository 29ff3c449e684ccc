"""The interactive report in a real browser: headless Chromium (Debian's package) driven by
selenium, WebGL in software (``tests/plot/browser.py``).

One page per view, each loaded once: it draws without a console error and without asking
the network for anything, WebGL really drew its boxes (their colour is on the screen), the
page's charts hold one box per trace row, hovering over a known box or request shows what
it is and its times, the critical-path button hides and shows the path, and a click on a
table's header sorts it. Skipped where no browser is installed.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from pipesim.analysis.compare import compare_schedules
from pipesim.analysis.plan import plan, run_emitted
from pipesim.analysis.run import run_scenario
from pipesim.plot import compare_report, plan_report, serving_report, training_report
from pipesim.plot.html.gantt import LANES
from pipesim.plot.style import COLOURS, CRITICAL
from pipesim.scenario.build import load_scenario, read_mapping
from pipesim.scenario.serving import load_serving, run_serving
from pipesim.sim.trace import Lane
from tests.analysis.test_plan import small_base
from tests.cli.test_serve_cli import write_scenario
from tests.plot import browser

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(browser.missing() is not None, reason=f"no browser: {browser.missing()}"),
]
pytest.importorskip("plotly", reason="the HTML report needs plotly (pip install -e '.[test]')")

SCENARIO = "scenarios/gpipe-vs-1f1b.yaml"
TRAINING = ["pipeline.schedule=1f1b", "hardware.link=nvlink4"]  # transfers on their lane
PLAN_SPACE = (
    "pipeline.schedule=1f1b,zbv",
    "model.recompute=false",
    "parallel.dp_overlap=false",
    "parallel.zero_stage=1",
)
BOXES = """
const gd = document.getElementById(arguments[0]);
return gd.data.filter(t => t.meta && t.meta.pipesim && t.meta.pipesim.shape === "box")
  .reduce((n, t) => n + t.x.length / 4, 0);
"""


@pytest.fixture(scope="module")
def driver():
    with browser.chromium() as chromium:
        yield chromium


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    result = run_scenario(load_scenario(SCENARIO, TRAINING))
    path = tmp_path_factory.mktemp("html") / "training.html"
    path.write_text(training_report(result), encoding="utf-8")
    return path, result


def loaded(driver, path) -> None:
    """Open the page: drawn, no console error, nothing asked of the network."""
    log = browser.open_report(driver, path)
    assert [entry for entry in log if entry["level"] == "SEVERE"] == []
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0


def colour_pixels(png: bytes, colour: str, tolerance: int = 12) -> int:
    """Pixels of ``png`` within ``tolerance`` of ``colour`` (``#RRGGBB``) on every channel."""
    rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(browser.pixels(png).astype(int) - rgb) <= tolerance).all(axis=2).sum())


def test_the_training_view(driver, training):
    path, result = training
    trace = result.trace
    loaded(driver, path)
    assert driver.execute_script(BOXES, "pipesim-gantt") == len(trace.start)
    shot = browser.screenshot(driver, "pipesim-gantt")
    assert browser.pixels(shot).std() > 20  # not blank
    assert colour_pixels(shot, COLOURS["F"]) > 2000  # WebGL drew the forward boxes
    # the box of 1F0: device 1's first forward, released by 0F0's activation arriving
    row = trace.names().index("1F0")
    start, end = trace.start[row], trace.end[row]
    text = browser.hover(driver, "pipesim-gantt", (start + end) / 2, 1 + LANES[Lane.COMPUTE][0])
    assert "1F0" in text and "forward, device 1" in text
    assert f"start {start:.3f} ms · end {end:.3f} ms · duration {end - start:.3f} ms" in text
    assert "released by its input arriving: 0F0->1" in text
    # the button hides the critical path, and shows it again
    critical = driver.execute_script(
        "return document.getElementById('pipesim-gantt').data"
        ".findIndex(t => t.name === 'critical path')"
    )
    button = driver.find_element("css selector", "#pipesim-gantt .updatemenu-button")
    red = colour_pixels(shot, CRITICAL)
    shown = "return document.getElementById('pipesim-gantt').data[arguments[0]].visible"
    for visible in (False, True):
        browser.click(driver, button)
        browser.wait(driver, lambda d, v=visible: d.execute_script(shown, critical) is v)
        seen = colour_pixels(browser.screenshot(driver, "pipesim-gantt"), CRITICAL)
        assert (seen < red / 4) if not visible else (seen > red / 2)


def test_the_compare_view(driver, tmp_path):
    data = read_mapping(SCENARIO)
    comparison = compare_schedules(data, SCENARIO, ["gpipe", "1f1b"])
    path = tmp_path / "compare.html"
    path.write_text(compare_report(comparison), encoding="utf-8")
    loaded(driver, path)
    rows = sum(len(result.trace.start) for result in comparison.results)
    assert driver.execute_script(BOXES, "compare-gantt") == rows
    # zooming one chart zooms both: one time axis
    ranges = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const gd = document.getElementById('compare-gantt');"
        "Plotly.relayout(gd, {'xaxis2.range': [5, 9]}).then("
        "() => done([gd._fullLayout.xaxis.range, gd._fullLayout.xaxis2.range]));"
    )
    assert ranges == [[5, 9], [5, 9]]
    # a click on "peak activations" sorts by it: 1F1B holds half of GPipe's
    first = "return document.querySelector('#compare-table tbody tr td').textContent"
    assert driver.execute_script(first) == "gpipe"
    header = driver.find_element("xpath", "//table[@id='compare-table']//th[.='peak activations']")
    browser.click(driver, header)
    assert driver.execute_script(first) == "1f1b"
    browser.click(driver, header)
    assert driver.execute_script(first) == "gpipe"


def test_the_serving_view(driver, tmp_path):
    run = run_serving(load_serving(write_scenario(tmp_path)))
    path = tmp_path / "serve.html"
    path.write_text(serving_report(run), encoding="utf-8")
    loaded(driver, path)
    assert driver.execute_script(BOXES, "serve-gantt") == 4 * 3  # 4 iterations on 3 stages
    # the one request (tests/cli/test_serve_cli.py derives its times): arrival at 1 s,
    # TTFT 60 ms of prefill and two 0.5 ms hops, then a token every 7.5 ms
    text = browser.hover(driver, "serve-requests-chart", 1.0, 61.0)
    assert "request 0" in text and "arrival 1.000 s" in text
    assert "TTFT 61.000 ms · TPOT 7.500 ms" in text and "preemptions 0" in text


def test_the_plan_view(driver, tmp_path):
    source = tmp_path / "small.yaml"
    source.write_text(yaml.safe_dump(small_base()))
    found = plan(small_base(), str(source), 8, PLAN_SPACE, top=3, confirm=1)
    path = tmp_path / "plan.html"
    path.write_text(plan_report(found), encoding="utf-8")
    loaded(driver, path)
    winner = found.results[0]
    text = browser.hover(
        driver, "plan-pareto", winner.peak_memory_bytes / 2**30, winner.step_time_ms
    )
    assert f"step {winner.step_time_ms:.3f} ms" in text
    assert f"{winner.candidate.schedule}, {winner.candidate.virtual_stages} virtual stages" in text
    step = run_emitted(found.winner_mapping(0), str(source))
    assert driver.execute_script(BOXES, "winner-gantt") == len(step.trace.start)
