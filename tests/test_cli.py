"""The command line: outputs, formats and the bad-input contract (one line, exit 2)."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim.cli.commands import main

SCENARIOS = Path(__file__).parent.parent / "scenarios"
SEED = str(SCENARIOS / "seed-pipelined.yaml")
GPIPE = str(SCENARIOS / "gpipe-vs-1f1b.yaml")


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def test_run_prints_the_table():
    result = invoke("run", SEED)
    assert result.exit_code == 0, result.output
    assert "makespan          7.000 ms   (analytic 7.000 ms)" in result.stdout
    assert "bubble fraction   0.4286" in result.stdout
    assert result.stderr == ""


def test_json_report_has_the_documented_keys():
    result = invoke("run", GPIPE, "--format", "json", "--set", "pipeline.schedule=1f1b")
    data = json.loads(result.stdout)
    for key in (
        "scenario", "schedule", "devices", "stages", "microbatches", "makespan_ms", "bubble_fraction",
        "bubble_overhead", "span_bubble_rate", "samples_per_second", "per_device", "analytic",
    ):  # fmt: skip
        assert key in data
    assert data["makespan_ms"] == 33
    assert [d["peak_inflight"] for d in data["per_device"]] == [4, 3, 2, 1]
    assert set(data["per_device"][0]) >= {
        "busy_ms",
        "idle_ms",
        "span_ms",
        "bubble_fraction",
        "peak_inflight",
        "peak_activation_bytes",
    }


def test_csv_report_has_one_row_per_device():
    lines = invoke("run", GPIPE, "--format", "csv").stdout.strip().splitlines()
    assert len(lines) == 5 and "makespan_ms" in lines[0] and "busy_ms" in lines[0]


def test_output_files(tmp_path):
    report, gantt, trace, rows, sched = (
        tmp_path / n for n in ("r.json", "g.png", "t.json", "t.csv", "s.csv")
    )
    result = invoke(
        "run", GPIPE, "--format", "json", "-o", str(report), "--gantt", str(gantt), "--trace", str(trace),
        "--trace-csv", str(rows), "--schedule-csv", str(sched),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(report.read_text())["makespan_ms"] == 33
    assert gantt.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {f"gpipe-vs-1f1b: device {d}" for d in range(4)}
    complete = [e for e in events if e["ph"] == "X"]
    assert (
        len(complete) == 64
    )  # 64 actions; transfers over ideal links take no time and are not drawn
    assert {e["tid"] for e in complete} == {0}
    assert any(e["ph"] == "C" and e["name"] == "activation memory" for e in events)
    assert (
        rows.read_text().splitlines()[0]
        == "device,lane,stage,chunk,microbatch,kind,start,end,peer,name"
    )
    assert sched.read_text().splitlines()[0].startswith("0F0,0F1,0F2")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "g.png",
        "r.json",
        "s.csv",
        "t.csv",
        "t.json",
    ]


def test_trace_has_a_comm_lane_with_latency(tmp_path):
    trace = tmp_path / "t.json"
    result = invoke("run", GPIPE, "--set", "hardware.link={latency_us: 10}", "--trace", str(trace))
    assert result.exit_code == 0
    complete = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    comm = [e for e in complete if e["tid"] == 1]
    assert len(comm) == 2 * 8 * 3 and all(e["dur"] == pytest.approx(10.0) for e in comm)


BAD_INPUTS = {
    "missing file": (["run", "nope.yaml"], "nope.yaml: no such file"),
    "bad yaml": (["run", "{bad}"], "not valid YAML"),
    "unknown key": (["run", GPIPE, "--set", "pipeline.stages=4"], "pipeline.stages: unknown key"),
    "wrong type": (
        ["run", GPIPE, "--set", "pipeline.microbatches=lots"],
        "pipeline.microbatches: Input should be a valid integer",
    ),
    "impossible combination": (
        [
            "run",
            GPIPE,
            "--set",
            "pipeline.schedule=interleaved-1f1b",
            "--set",
            "pipeline.virtual_stages=2",
            "--set",
            "pipeline.microbatches=6",
        ],
        "pipeline: interleaved-1f1b runs microbatches in groups of devices=4",
    ),
    "bad override syntax": (
        ["run", GPIPE, "--set", "pipeline.microbatches"],
        "expected key.path=value",
    ),
    "bad gantt suffix": (
        ["run", GPIPE, "--gantt", "OUT.gif"],
        "--gantt OUT.gif: unsupported file type",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_one_line_exit_2_no_output(tmp_path, case, monkeypatch):
    args, message = BAD_INPUTS[case]
    if case == "bad yaml":
        bad = tmp_path / "bad.yaml"
        bad.write_text("pipeline: [1, 2\n")
        args = ["run", str(bad)]
    monkeypatch.chdir(tmp_path)
    before = set(tmp_path.iterdir())
    result = invoke(*args, "-o", "OUT.json", "--trace", "OUT.trace.json")
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pipesim: error: ") and message in lines[0]
    assert set(tmp_path.iterdir()) == before
    assert "Traceback" not in result.output


def test_validate_and_schedules():
    result = invoke("validate", GPIPE)
    assert result.exit_code == 0
    assert result.stdout.strip().endswith("gpipe, 4 devices, 4 stages, 8 microbatches, 64 actions")
    listing = invoke("schedules").stdout
    assert "interleaved-1f1b" in listing and "constraints: virtual_stages >= 2" in listing


def test_bad_csv_schedule_prints_the_grid(tmp_path):
    (tmp_path / "s.csv").write_text("0F0,0F0,0B0\n1F0,1B0\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "schema_version: 1\nname: x\npipeline: {schedule: csv, schedule_file: s.csv, devices: 2, microbatches: 1}\n"
    )
    result = invoke("run", str(scenario))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0].endswith("0F0 appears twice (also rank 0 step 0)")
    assert ">>0F0<<" in result.stderr


def test_compare_lists_every_schedule_and_reasons(tmp_path):
    gantt = tmp_path / "all.png"
    result = invoke(
        "compare",
        GPIPE,
        "--schedules",
        "gpipe,1f1b,interleaved-1f1b",
        "--gantt",
        str(gantt),
        "--set",
        "pipeline.microbatches=6",
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1].split()[:2] == ["gpipe", "33.000"] or lines[1].split()[1] == "27.000"
    assert (
        "interleaved-1f1b  not run: pipeline: interleaved-1f1b runs microbatches in groups"
        in result.stdout
    )
    assert gantt.exists()
    rows = json.loads(
        invoke(
            "compare", GPIPE, "--schedules", "gpipe,1f1b,interleaved-1f1b", "--format", "json"
        ).stdout
    )
    assert [r["makespan_ms"] for r in rows] == [33, 33, 28.5]
    assert rows[2]["note"] == "virtual_stages=2, per-chunk costs x1/2"
