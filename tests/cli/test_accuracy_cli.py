"""``pipesim run``, ``serve`` and ``plan`` say what error to expect, in the table and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from pipesim.analysis.accuracy import band, given_band
from pipesim.analysis.plan import PlanRow, distinct
from pipesim.cli import main
from tests.analysis.test_plan import small_base
from tests.cli.test_plan_cli import SPACE
from tests.cli.test_serve_cli import write_scenario

SCENARIOS = Path(__file__).parents[2] / "scenarios"
LLAMA = SCENARIOS / "llama-70b-4x8-h100.yaml"  # Llama-2-70B on 32 H100s
LLAMA_PARAMETERS = 68_984_668_160  # tests/analysis/test_accuracy.py
BAND_KEYS = {
    "regime",
    "quantity",
    "costs",
    "rows",
    "held_out",
    "median_pct",
    "max_pct",
    "text",
    "basis",
    "nearest",
}


def invoke(*args) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.stdout


def label(text: str, width: int) -> str:
    return f"  {'expected error':<{width}}{text}"


def test_run_prints_the_band_after_the_step_time_and_the_peak_memory():
    lines = invoke("run", LLAMA).splitlines()
    makespan = next(n for n, line in enumerate(lines) if line.lstrip().startswith("makespan"))
    step = band("step_time", "h100-sxm", 32, LLAMA_PARAMETERS)
    assert step.regime == "step_time/H100/9-1024"
    assert lines[makespan + 1] == label(step.text, 18)
    peak = next(n for n, line in enumerate(lines) if line.lstrip().startswith("peak memory"))
    assert lines[peak + 1] == label(band("peak_memory", "h100-sxm", 32).text, 18)


def test_run_json_carries_the_bands():
    data = json.loads(invoke("run", LLAMA, "--format", "json"))
    accuracy = data["accuracy"]
    assert set(accuracy) == {"step_time", "peak_memory"}
    assert all(set(b) == BAND_KEYS for b in accuracy.values())
    assert accuracy["step_time"] == band("step_time", "h100-sxm", 32, LLAMA_PARAMETERS).to_dict()


def test_run_with_costs_given_says_the_timeline_is_exact_for_them():
    stdout = invoke("run", SCENARIOS / "gpipe-vs-1f1b.yaml")
    given = given_band("given_costs")
    assert label(given.text, 18) in stdout.splitlines()
    data = json.loads(invoke("run", SCENARIOS / "gpipe-vs-1f1b.yaml", "--format", "json"))
    assert data["accuracy"] == {"step_time": given.to_dict()}
    assert data["accuracy"]["step_time"]["costs"] == "given"


def test_serve_with_costs_given(tmp_path):
    lines = invoke("serve", write_scenario(tmp_path)).splitlines()
    queueing = next(n for n, line in enumerate(lines) if line.lstrip().startswith("queueing"))
    assert lines[queueing + 1 : queueing + 4] == [
        "",
        label(given_band("given_costs").text, 20),
        "",
    ]


def test_serve_prints_and_carries_ttft_and_tpot_bands():
    args = ("serve", SCENARIOS / "llama-70b-serve-8xh100.yaml", "--no-progress")
    small = ("--set", "serving.workload.requests=5")
    lines = invoke(*args, *small).splitlines()
    ttft, tpot = band("ttft", "h100-sxm", 8), band("tpot", "h100-sxm", 8)
    start = lines.index(label(ttft.text, 20))
    assert lines[start + 1] == f"  {'':<20}{tpot.text}"
    data = json.loads(invoke(*args, *small, "--format", "json"))
    assert data["accuracy"] == {"ttft": ttft.to_dict(), "tpot": tpot.to_dict()}


def plan_args(tmp_path, fmt: str) -> list:
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(small_base()))  # 4.7B parameters on 8 A100 40GB
    return ["plan", path, "--gpus", 8, *SPACE, "--top", 5, "--confirm", 1, "--no-progress"] + [
        "--no-timing",
        "--format",
        fmt,
    ]


def test_plan_prints_the_winners_band_and_weighs_the_runner_up(tmp_path):
    lines = invoke(*plan_args(tmp_path, "table")).splitlines()
    data = json.loads(invoke(*plan_args(tmp_path, "json")))
    accuracy = data["accuracy"]
    winner = data["results"][0]
    gpus = winner["parallel.tensor"] * winner["pipeline.devices"] * winner["parallel.data"]
    assert gpus == 8
    expected = band("step_time", "a100-sxm-40gb", 8)
    assert {k: accuracy[k] for k in BAND_KEYS} == expected.to_dict()
    assert set(accuracy) == BAND_KEYS | {"typical_pct", "runner_up_slower_pct", "ranking"}
    # the runner-up is the second distinct outcome, as the table shows it
    first, second = distinct([PlanRow.from_dict(r) for r in data["results"]])[:2]
    assert accuracy["runner_up_slower_pct"] == (second.step_time_ms / first.step_time_ms - 1) * 100
    assert lines[-2:] == [f"expected error: {expected.text}", f"  {accuracy['ranking']}"]
    if accuracy["typical_pct"] is not None:
        inside = accuracy["runner_up_slower_pct"] < accuracy["typical_pct"]
        assert ("not told apart" in accuracy["ranking"]) == inside
