"""``pipesim run`` with a searched schedule: the table and JSON say how the search went,
a limit below the minimum is one line and exit 2, --schedule-csv writes the order found."""

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim.cli import main
from pipesim.scenario.build import load_scenario
from pipesim.scenario.schema import ScenarioError
from pipesim.schedules.torch_csv import read_torch_csv

SCENARIO = """\
schema_version: 1
name: searched
pipeline: {schedule: zb-auto, devices: 4, microbatches: 8}
costs:
  forward_ms: 2.0
  backward_input_ms: 2.0
  backward_weight_ms: 1.0
  activation_memory_bytes: 1024
  weight_grad_memory_bytes: 256
"""


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "searched.yaml"
    path.write_text(SCENARIO)
    return path


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_run_prints_limit_peak_candidates_and_seconds(scenario):
    result = invoke("run", scenario, "--set", "pipeline.memory_limit_bytes=8192")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "  schedule          zb-auto" in lines
    assert "  makespan          46.000 ms" in lines  # m (F+I+W) + (p-1) F: zero bubble
    assert "  memory limit      8.00 KiB per device (searched)" in lines
    assert any(line.startswith("  peak reached      ") for line in lines)
    search = next(line for line in lines if line.startswith("  search  "))
    assert " candidates in " in search and search.endswith(" s")
    # the last device starts after 3 forwards, then works 8 x 5 ms: the order is optimal
    assert "  lower bound       46.000 ms (the order found is within 0.0% of it)" in lines


def test_run_json_has_a_search_key(scenario):
    result = invoke("run", scenario, "--format", "json")
    assert result.exit_code == 0, result.output
    search = json.loads(result.stdout)["search"]
    assert search["memory_limit_bytes"] == 4096  # 1F1B: 4 microbatches on device 0
    assert search["peak_activation_bytes"] <= 4096
    assert search["candidates"] > 0 and search["seconds"] > 0
    assert set(search) >= {"makespan_ms", "source"}
    assert 0 < search["lower_bound_ms"] <= search["makespan_ms"]
    assert search["gap"] == pytest.approx(search["makespan_ms"] / search["lower_bound_ms"] - 1)


def test_the_bundled_scenario_reports_its_lower_bound():
    """zb-auto-under-memory: the order found (ZB-H1's) and how far it can be from the best.
    The closed-form parts stop at 42.107 ms (device 0's last forward: with 3 in flight,
    I(8) ended before it, no earlier than F(8) plus a round trip); device 0 alone, its
    orders searched with the rest of the pipeline as time lags, cannot end before ZB-H1's
    42.453 ms, which the exact mode also proves optimal: the order is the best one."""
    path = Path(__file__).resolve().parents[2] / "scenarios" / "zb-auto-under-memory.yaml"
    table = invoke("run", path)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    at = lines.index("  lower bound       42.453 ms (the order found is within 0.0% of it)")
    assert lines[at - 1].startswith("  search            ")
    result = invoke("run", path, "--format", "json")
    assert result.exit_code == 0, result.output
    search = json.loads(result.stdout)["search"]
    assert search["makespan_ms"] == pytest.approx(42.45326592)
    assert search["lower_bound_ms"] == pytest.approx(42.45326592)
    assert search["gap"] == pytest.approx(0.0, abs=1e-8)
    assert search["lower_bound_part"] == "device 0 alone, in its best order"


def test_a_limit_below_the_minimum_is_one_line_exit_2(scenario):
    result = invoke("run", scenario, "--set", "pipeline.memory_limit_bytes=1000")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"pipesim: error: {scenario}: pipeline.memory_limit_bytes: memory limit 1000 bytes is "
        "below the minimum 1024 bytes any zb-auto order can reach (4 devices)\n"
    )


def test_schedule_csv_exports_the_order_found(scenario, tmp_path):
    out = tmp_path / "order.csv"
    result = invoke("run", scenario, "--schedule-csv", out)
    assert result.exit_code == 0, result.output
    found = load_scenario(scenario).search.schedule
    assert read_torch_csv(out.read_text()).device_actions == found.device_actions


@pytest.mark.parametrize(
    "override, message",
    [
        ("pipeline.virtual_stages=2", "pipeline.virtual_stages: zb-auto takes virtual_stages = 1"),
        ("pipeline.mode=forward", "pipeline.mode: zb-auto searches training schedules only"),
    ],
)
def test_searched_policies_refuse_what_they_cannot_search(scenario, override, message):
    with pytest.raises(ScenarioError, match=message):
        load_scenario(scenario, [override])


def test_a_memory_limit_needs_a_searched_policy(scenario):
    with pytest.raises(ScenarioError, match="memory_limit_bytes: only used with schedule zb-auto"):
        load_scenario(scenario, ["pipeline.schedule=1f1b", "pipeline.memory_limit_bytes=9"])


def test_v_auto_runs_from_a_scenario(scenario):
    loaded = load_scenario(scenario, ["pipeline.schedule=v-auto", "pipeline.virtual_stages=2"])
    assert loaded.schedule.name == "v-auto" and loaded.schedule.stages == 8
    assert loaded.search.peak_activation_bytes <= loaded.search.limit_bytes


def test_schedules_lists_the_searched_policies():
    result = invoke("schedules")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    for name, chunks in (("zb-auto", 1), ("v-auto", 2)):
        at = next(k for k, line in enumerate(lines) if line.startswith(f"{name} "))
        assert "searched" in lines[at] and "memory limit" in lines[at]
        assert (
            f"constraints: virtual_stages = {chunks}; pipeline.memory_limit_bytes" in lines[at + 1]
        )


def test_a_search_too_large_to_finish_soon_is_refused_unless_max_actions_is_set(scenario):
    with pytest.raises(ScenarioError, match="zb-auto would search a schedule of 786,432 actions"):
        load_scenario(scenario, ["pipeline.devices=64", "pipeline.microbatches=4096"])
    with pytest.raises(ScenarioError, match="over the limit of 700,000"):  # the general guard
        load_scenario(
            scenario,
            ["pipeline.devices=64", "pipeline.microbatches=4096", "pipeline.max_actions=700000"],
        )


EXACT = [
    "--set",
    "pipeline.search=exact",
    "--set",
    "pipeline.schedule=v-auto",
    "--set",
    "pipeline.virtual_stages=2",
    "--set",
    "pipeline.microbatches=4",
    "--set",
    "costs.backward_input_ms=3.0",
    "--set",
    "hardware.link={latency_us: 300}",
]


def test_the_exact_search_reports_its_optimum_and_the_heuristics_gap(scenario):
    """v-auto with 0.3 ms links: the heuristic's order takes 63.2 ms, the solver finds and
    proves 62.6 ms."""
    table = invoke("run", scenario, *EXACT)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert "  makespan          62.600 ms" in lines
    assert "  lower bound       62.600 ms (the order found is within 0.0% of it)" in lines
    assert (
        "  exact search      proven optimal; the heuristic found 63.200 ms "
        "(1.0% above the bound)" in lines
    )
    result = invoke("run", scenario, *EXACT, "--format", "json")
    search = json.loads(result.stdout)["search"]
    assert search["mode"] == "exact" and search["optimal"] is True
    assert search["source"] == "exact (CP-SAT)"
    assert search["makespan_ms"] == pytest.approx(62.6)
    assert search["heuristic_makespan_ms"] == pytest.approx(63.2)
    assert search["heuristic_gap"] == pytest.approx(63.2 / search["lower_bound_ms"] - 1)
    assert search["lower_bound_part"] == "exact model (CP-SAT, optimal)"
    heuristic = json.loads(invoke("run", scenario, "--format", "json").stdout)["search"]
    assert heuristic["mode"] == "heuristic" and heuristic["optimal"] is None


def test_the_exact_search_without_or_tools_is_one_line_saying_how_to_install(scenario, monkeypatch):
    monkeypatch.setitem(sys.modules, "ortools.sat.python", None)  # import fails
    result = invoke("run", scenario, "--set", "pipeline.search=exact")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"pipesim: error: {scenario}: pipeline.search: the exact search needs OR-Tools "
        "(ortools>=9.10), which is not installed; install it with: "
        "pip install 'pipesim[exact]'\n"
    )


def test_search_keys_need_a_searched_policy(scenario):
    for key in ("search=exact", "search_time_limit_s=5"):
        with pytest.raises(ScenarioError, match=f"pipeline.{key.split('=')[0]}: only used with"):
            load_scenario(scenario, ["pipeline.schedule=1f1b", f"pipeline.{key}"])
    with pytest.raises(ScenarioError, match="pipeline.search: Input should be 'heuristic' or"):
        load_scenario(scenario, ["pipeline.search=fast"])


def test_an_exact_search_past_its_size_is_refused_unless_max_actions_is_set(scenario):
    with pytest.raises(ScenarioError, match="over the limit of 20,000 for an exact search's"):
        load_scenario(scenario, ["pipeline.search=exact", "pipeline.microbatches=2000"])
