"""``pipesim run`` of a bulk policy to a table or JSON makes no Action: the schedule's lists
and the Trace's actions stay columns from the scenario file to the report. Outputs that
show actions (the schedule CSV, the trace CSV) make them, and say the same as before."""

from __future__ import annotations

import gc
import json

import pytest
from click.testing import CliRunner

import pipesim.cli.run
from pipesim.cli import main
from pipesim.schedules.ir import Action

SCENARIO = """\
schema_version: 1
name: lazy-{name}
pipeline:
  schedule: {name}
  devices: 4
  microbatches: 16
  virtual_stages: {chunks}
  microbatch_size: 1
costs:
  forward_ms: 1.0
  backward_ms: 2.0
  activation_bytes: 1000000
hardware:
  link: {{latency_us: 5, bandwidth_gbps: 100}}
"""
BULK = {"1f1b": 1, "gpipe": 1, "eager-1f1b": 1, "interleaved-1f1b": 2, "zbv": 2}


def actions_alive() -> int:
    return sum(type(o) is Action for o in gc.get_objects())


def run(monkeypatch, tmp_path, name: str, *args: str):
    """Run the scenario of ``name``; the Result that ``run_scenario`` gave the command."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(SCENARIO.format(name=name, chunks=BULK[name]))
    results, real = [], pipesim.cli.run.run_scenario

    def kept(*given, **options):
        results.append(real(*given, **options))
        return results[-1]

    monkeypatch.setattr(pipesim.cli.run, "run_scenario", kept)
    result = CliRunner().invoke(main, ["run", str(path), *args])
    assert result.exit_code == 0, result.output
    return results[0], result.stdout


@pytest.mark.parametrize("fmt", ["json", "table"])
@pytest.mark.parametrize("name", list(BULK))
def test_a_table_or_json_run_makes_no_action(monkeypatch, tmp_path, name, fmt):
    before = actions_alive()
    found, out = run(monkeypatch, tmp_path, name, "--format", fmt, "--evaluator", "fast")
    assert out.strip()
    assert found.report.evaluator == "fast"
    assert not found.scenario.schedule.device_actions.made
    assert not found.trace.actions.made
    assert actions_alive() - before < 16  # the schedule has 128 to 192 actions


def test_outputs_that_show_actions_make_them(monkeypatch, tmp_path):
    schedule_csv, trace_csv = tmp_path / "schedule.csv", tmp_path / "trace.csv"
    args = ("--format", "json", "--schedule-csv", schedule_csv, "--trace-csv", trace_csv)
    found, out = run(monkeypatch, tmp_path, "zbv", *map(str, args))
    assert json.loads(out)["makespan_ms"] > 0
    assert found.scenario.schedule.device_actions.made and found.trace.actions.made
    assert schedule_csv.read_text().splitlines()[0].startswith("0F0,0F1,0F2,0F3,0F4,0F5,0F6,7F0")
    rows = trace_csv.read_text().splitlines()
    assert len(rows) == len(found.trace.end) + 1 and any(",0F0->1," in row for row in rows)
