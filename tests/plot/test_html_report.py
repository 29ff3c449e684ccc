"""The interactive HTML report, read back without a browser: its numbers are the JSON
report's, the same inputs give the same bytes, every trace row becomes one box, hovers
name what released each row, the file needs nothing from the network, and the command
line's rules for output files hold (``tests/plot/test_html_browser.py`` opens the pages).
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from pipesim.analysis.run import run_scenario
from pipesim.cli import main
from pipesim.plot.html.gantt import BOXES_PER_TRACE, box_traces, gantt_table
from pipesim.plot.html.headline import training_lines
from pipesim.plot.html.training import bubble_figure, explanation_of
from pipesim.scenario.build import load_scenario
from tests.analysis.test_plan import small_base
from tests.cli.test_serve_cli import write_scenario

pytest.importorskip("plotly", reason="the HTML report needs plotly (pip install -e '.[test]')")

ROOT = Path(__file__).resolve().parents[2]
GPIPE_VS_1F1B = str(ROOT / "scenarios" / "gpipe-vs-1f1b.yaml")
LLAMA = str(ROOT / "scenarios" / "llama-70b-4x8-h100.yaml")
PLAN_SPACE = (
    "--space",
    "pipeline.schedule=1f1b,zbv",
    "--space",
    "model.recompute=false",
    "--space",
    "parallel.dp_overlap=false",
    "--space",
    "parallel.zero_stage=1",
)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def embedded(path: Path, block: str = "pipesim-data") -> dict:
    """A JSON block of the page, as the page's script reads it."""
    text = path.read_text(encoding="utf-8")
    found = re.search(rf'<script type="application/json" id="{block}"[^>]*>(.*?)</script>', text)
    assert found, f"no {block} block"
    return json.loads(found.group(1))


def decoded(spec: dict) -> np.ndarray:
    return np.frombuffer(base64.b64decode(spec["bdata"]), dtype=np.dtype(spec["dtype"]))


def test_a_training_report_holds_the_json_reports_numbers(tmp_path):
    page = tmp_path / "report.html"
    made = invoke("run", LLAMA, "--format", "json", "--html", page)
    assert made.exit_code == 0, made.stderr
    printed = json.loads(made.stdout)
    data = embedded(page)
    assert data["view"] == "training"
    del printed["accuracy"]  # the error bands are the table's and the JSON's, not the page's
    assert data["report"] == printed
    headline = data["headline"]
    for key in ("makespan_ms", "bubble_fraction", "bubble_overhead", "mfu", "oom", "analytic"):
        assert headline[key] == printed[key]
    worst = max(printed["per_device"], key=lambda d: d["peak_memory_bytes"])
    assert headline["peak_memory_bytes"] == worst["peak_memory_bytes"]
    assert headline["peak_memory_device"] == worst["device"]
    assert f"{printed['makespan_ms']:.3f} ms" in page.read_text()


def test_the_analytic_values_are_the_closed_forms():
    # GPipe, 4 devices, 8 microbatches, F 1 ms and B 2 ms: (m + p - 1)(F + B) = 33 ms,
    # bubble fraction (p - 1) / (m + p - 1) = 3/11, overhead (p - 1) / m = 3/8
    result = run_scenario(load_scenario(GPIPE_VS_1F1B))
    lines = {label: (value, analytic) for label, value, analytic in training_lines(result)}
    assert lines["makespan"] == ("33.000 ms", "33.000 ms")
    assert lines["bubble fraction"] == ("0.2727", "0.2727")
    assert lines["bubble overhead"] == ("0.3750", "0.3750")


def test_the_same_inputs_give_the_same_bytes(tmp_path):
    first, second = tmp_path / "a.html", tmp_path / "b.html"
    for page in (first, second):
        made = invoke("report", GPIPE_VS_1F1B, "-o", page, "--set", "pipeline.schedule=zb-auto")
        assert made.exit_code == 0, made.stderr
    assert first.read_bytes() == second.read_bytes()
    assert "seconds" not in json.dumps(embedded(first))  # the search's wall time is left out


def test_every_row_is_one_box_and_its_hover_says_what_released_it():
    result = run_scenario(
        load_scenario(GPIPE_VS_1F1B, ["pipeline.schedule=1f1b", "hardware.link=nvlink4"])
    )
    trace = result.trace
    table = gantt_table(trace, "rows").payload()
    rows = np.concatenate([decoded(t.meta["pipesim"]["rows"]) for t in box_traces(trace, "rows")])
    assert sorted(rows.tolist()) == list(range(len(trace.start)))  # each row exactly once
    names = table["columns"]["name"]
    cause, cause_row = decoded(table["columns"]["cause"]), decoded(table["columns"]["cause_row"])
    second = names.index("1F0")  # released by the transfer that carried 0F0's activation
    assert table["lookups"]["causes"][cause[second]] == "its input arriving:"
    assert names[cause_row[second]] == "0F0->1"
    first = names.index("0F0")
    assert table["lookups"]["causes"][cause[first]] == "the start of the step"
    assert np.array_equal(decoded(table["columns"]["start"]), trace.start)


def test_a_large_group_of_boxes_is_cut_into_several_traces():
    result = run_scenario(load_scenario(GPIPE_VS_1F1B, ["pipeline.microbatches=7000"]))
    forwards = [t for t in box_traces(result.trace, "rows") if t.name == "F"]
    sizes = [len(decoded(t.meta["pipesim"]["rows"])) for t in forwards]
    assert sum(sizes) == 4 * 7000 and max(sizes) == BOXES_PER_TRACE
    assert [t.showlegend for t in forwards] == [True, False]  # one legend entry per kind


def test_the_page_loads_nothing_from_anywhere(tmp_path):
    page = tmp_path / "report.html"
    assert invoke("report", GPIPE_VS_1F1B, "-o", page).exit_code == 0
    text = page.read_text(encoding="utf-8")
    markup = re.sub(r"<script[^>]*>.*?</script>", "", text, flags=re.S)
    assert not re.search(r"\b(src|href)\s*=", markup)
    assert text.count("<script>") == 2  # plotly.js and the page's own script, inline


def test_a_compare_report_holds_the_json_rows(tmp_path):
    page = tmp_path / "compare.html"
    made = invoke(
        "compare", GPIPE_VS_1F1B, "--schedules", "gpipe,1f1b", "--format", "json", "--html", page
    )
    assert made.exit_code == 0, made.stderr
    assert embedded(page) == {"view": "compare", "rows": json.loads(made.stdout)}
    figure = embedded(page, "compare-gantt-spec")
    assert {t["yaxis"] for t in figure["data"]} == {"y", "y2"}  # one chart per schedule
    assert figure["layout"]["xaxis"]["matches"] == "x2"  # on one time axis


def test_a_serving_report_holds_the_json_report(tmp_path):
    scenario = write_scenario(tmp_path)
    page = tmp_path / "serve.html"
    made = invoke("serve", scenario, "--format", "json", "--html", page)
    assert made.exit_code == 0, made.stderr
    printed = json.loads(made.stdout)
    del printed["accuracy"]
    assert embedded(page) == {"view": "serving", "report": printed}
    # the one request: arrival 1 s, TTFT 60 ms of prefill + two 0.5 ms hops
    requests = embedded(page, "serve-requests")["columns"]
    assert decoded(requests["arrival_s"]).tolist() == [1.0]
    assert decoded(requests["ttft_s"])[0] == pytest.approx(0.061)
    iterations = embedded(page, "serve-iterations")
    assert iterations["length"] == 4 * 3  # 4 tokens' iterations on 3 stages


def test_report_reads_a_serving_scenario_as_serve_does(tmp_path):
    scenario = write_scenario(tmp_path)
    page = tmp_path / "serve.html"
    assert invoke("report", scenario, "-o", page).exit_code == 0
    printed = json.loads(invoke("serve", scenario, "--format", "json").stdout)
    assert embedded(page)["report"]["ttft_ms"] == printed["ttft_ms"]


def test_a_plan_report_holds_the_plan_and_the_winners_step(tmp_path):
    scenario, page = tmp_path / "small.yaml", tmp_path / "plan.html"
    scenario.write_text(yaml.safe_dump(small_base()))
    options = ("--format", "json", "--top", 3, "--confirm", 1, "--no-progress", "--html", page)
    made = invoke("plan", scenario, "--gpus", 8, *PLAN_SPACE, *options)
    assert made.exit_code == 0, made.stderr
    printed = json.loads(made.stdout)
    data = embedded(page)
    assert data["plan"]["results"] == printed["results"]
    assert data["plan"]["pareto"] == printed["pareto"]
    assert "wall_s" not in data["plan"]
    winner = printed["results"][0]
    assert data["winner"]["headline"]["makespan_ms"] == winner["step_time_ms"]


@pytest.mark.parametrize("command", ["run", "report"])
def test_without_plotly_one_line_and_exit_2(tmp_path, monkeypatch, command):
    import pipesim.cli.html

    monkeypatch.setattr(pipesim.cli.html, "plotly_missing", lambda: True)
    page = tmp_path / "report.html"
    option = "--html" if command == "run" else "-o"
    made = invoke(command, GPIPE_VS_1F1B, option, page)
    assert made.exit_code == 2
    assert made.stderr == (
        f"pipesim: error: {option} {page}: the interactive report needs plotly: "
        "pip install 'pipesim[html]'\n"
    )
    assert not page.exists()


def test_a_wrong_suffix_is_refused_before_anything_runs(tmp_path):
    table = tmp_path / "table.txt"
    made = invoke("run", GPIPE_VS_1F1B, "-o", table, "--html", tmp_path / "report.png")
    assert made.exit_code == 2
    assert made.stderr.startswith("pipesim: error: --html ")
    assert ".html" in made.stderr and not table.exists()


def test_the_report_is_written_whole_or_not_at_all(tmp_path):
    page = tmp_path / "report.html"
    page.write_text("old")
    made = invoke("report", tmp_path / "missing.yaml", "-o", page)
    assert made.exit_code == 2
    assert page.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary left


def test_a_ranked_comparison_puts_each_number_under_its_header(tmp_path):
    page = tmp_path / "compare.html"
    options = ("--schedules", "gpipe,1f1b", "--runs", 3, "--format", "json", "--html", page)
    made = invoke("compare", ROOT / "scenarios" / "stragglers.yaml", *options)
    assert made.exit_code == 0, made.stderr
    text = page.read_text(encoding="utf-8")
    table = re.search(r'<table id="compare-table".*?</table>', text, re.S).group(0)
    header = re.findall(r"<th[^>]*>([^<]*)</th>", table)
    first = json.loads(made.stdout)[0]
    row = re.findall(r"<td([^>]*)>([^<]*)</td>", table)[: len(header)]
    values = [(re.search(r'data-value="([^"]*)"', attrs) or [None, ""])[1] for attrs, _ in row]
    cells = dict(zip(header, zip(values, [text for _, text in row], strict=True), strict=True))
    assert cells["schedule"][1] == first["schedule"]
    assert float(cells["makespan ms"][0]) == first["makespan_ms"]
    assert float(cells["p50 ms"][0]) == first["makespan_ms_p50"]
    assert float(cells["p99 ms"][0]) == first["makespan_ms_p99"]


def test_the_idle_time_by_cause_adds_up_to_each_devices_idle_time():
    result = run_scenario(load_scenario(GPIPE_VS_1F1B, ["hardware.link=nvlink4"]))
    path, idle = explanation_of(result)
    assert path[-1]["end_ms"] == result.report.makespan_ms
    for device in result.report.per_device:
        assert sum(idle[device.device].values()) == pytest.approx(device.idle_ms, rel=1e-12)
    bars = bubble_figure(result, idle).data
    for device in result.report.per_device:
        total = sum(bar.x[list(bar.y).index(device.device)] for bar in bars)
        assert total == pytest.approx(result.report.makespan_ms, rel=1e-12)


def test_a_large_run_leaves_the_idle_causes_out_but_keeps_the_critical_path():
    result = run_scenario(load_scenario(GPIPE_VS_1F1B, ["pipeline.microbatches=1000"]))
    path, idle = explanation_of(result)
    assert idle is None
    assert path[0]["start_ms"] == 0 and path[-1]["end_ms"] == result.report.makespan_ms
