"""``pipesim run`` on a model: the end of the step named by part, in every output.

With ``data: 1`` nothing is reduced across replicas, so the tail is the optimizer step
alone and no row, event, CSV line or legend entry says all-reduce; with ``data: 2`` the
gradient all-reduce comes first, then the optimizer step.
"""

import csv
import gzip
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim import load_scenario, run_scenario
from pipesim.cli import main
from pipesim.plot.figures import gantt_figure

GPT = str(Path(__file__).parents[2] / "scenarios" / "gpt-nvlink-vs-pcie.yaml")
DATA_2 = ["--set", "parallel.data=2", "--set", "model.global_batch=16"]


def run_with_files(tmp_path, *extra):
    trace, rows = tmp_path / "t.json", tmp_path / "t.csv"
    result = CliRunner().invoke(
        main,
        ["run", GPT, "--format", "json", "--trace", str(trace), "--trace-csv", str(rows), *extra],
    )
    assert result.exit_code == 0, result.output
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    lines = list(csv.DictReader(io.StringIO(rows.read_text())))
    return json.loads(result.stdout), events, lines


def test_without_data_parallelism_the_tail_is_the_optimizer_step_alone(tmp_path):
    report, events, lines = run_with_files(tmp_path)
    assert not [e for e in events if "all-reduce" in e["name"]]
    steps = [e for e in events if e["cat"] == "OPTIMIZER"]
    assert sorted((e["pid"], e["name"]) for e in steps) == [(d, "optimizer step") for d in range(4)]
    assert "ALLREDUCE" not in {line["kind"] for line in lines}
    assert not [line for line in lines if "all-reduce" in line["name"]]
    assert [line["name"] for line in lines if line["kind"] == "OPTIMIZER"] == ["optimizer step"] * 4
    devices = report["per_device"]
    assert [d["allreduce_ms"] for d in devices] == [0.0] * 4
    assert report["tail_ms"] == max(d["optimizer_ms"] for d in devices) > 0
    longest = max(e["dur"] for e in steps) / 1000
    assert report["tail_ms"] == pytest.approx(longest, abs=1e-6)


def test_with_data_parallelism_the_all_reduce_comes_before_the_optimizer_step(tmp_path):
    report, events, lines = run_with_files(tmp_path, *DATA_2)
    reduced = {e["pid"]: e for e in events if e["name"] == "gradient all-reduce"}
    stepped = {e["pid"]: e for e in events if e["name"] == "optimizer step"}
    assert sorted(reduced) == sorted(stepped) == [0, 1, 2, 3]
    for device, event in reduced.items():
        assert event["cat"] == "ALLREDUCE" and event["tid"] == 1
        assert stepped[device]["ts"] == pytest.approx(event["ts"] + event["dur"], abs=1e-3)
    kinds = [(line["kind"], line["name"]) for line in lines if line["microbatch"] == "-1"]
    assert sorted(set(kinds)) == [
        ("ALLREDUCE", "gradient all-reduce"),
        ("OPTIMIZER", "optimizer step"),
    ]
    device = report["per_device"][0]
    assert device["allreduce_ms"] > 0 and device["optimizer_ms"] > 0
    assert report["tail_ms"] == pytest.approx(device["allreduce_ms"] + device["optimizer_ms"])


def test_the_table_says_what_the_tail_is_and_which_bubbles_count_it():
    table = CliRunner().invoke(main, ["run", GPT, *DATA_2]).stdout.splitlines()
    report = json.loads(CliRunner().invoke(main, ["run", GPT, "--format", "json", *DATA_2]).stdout)
    device = max(report["per_device"], key=lambda d: d["allreduce_ms"] + d["optimizer_ms"])
    at = table.index(next(line for line in table if line.startswith("  end of step")))
    assert table[at - 1].startswith("  span bubble rate")
    assert table[at : at + 2] == [
        f"  end of step       {report['tail_ms']:.3f} ms on device {device['device']}: "
        f"gradient all-reduce {device['allreduce_ms']:.3f} ms, "
        f"optimizer step {device['optimizer_ms']:.3f} ms",
        "                    idle time in the bubble fraction and overhead, not in the span "
        "bubble rate",
    ]
    alone = CliRunner().invoke(main, ["run", GPT]).stdout
    assert "optimizer step" in alone and "all-reduce" not in alone


def test_a_gz_trace_is_the_json_trace_gzipped(tmp_path):
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    for path in (plain, packed):
        result = CliRunner().invoke(main, ["run", GPT, "--trace", str(path)])
        assert result.exit_code == 0, result.output
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    assert json.loads(plain.read_text())["displayTimeUnit"] == "ms"


def test_a_trace_of_another_type_is_refused(tmp_path):
    result = CliRunner().invoke(main, ["run", GPT, "--trace", str(tmp_path / "t.txt")])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"pipesim: error: --trace {tmp_path / 't.txt'}: unsupported file type; "
        "allowed: .json, .gz\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_gantt_legend_names_the_tail_by_part():
    def legend(*overrides):
        result = run_scenario(load_scenario(GPT, list(overrides)))
        fig = gantt_figure(result.trace, result.report, result.memory)
        return [t.get_text() for lg in fig.legends for t in lg.get_texts()]

    alone = legend()
    assert "optimizer step" in alone and not [t for t in alone if "ALL" in t or "all-" in t]
    assert {"gradient all-reduce", "optimizer step"} <= set(legend(*DATA_2[1::2]))
