"""The command line: outputs, formats and the bad-input contract (one line, exit 2)."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim.cli import main

SCENARIOS = Path(__file__).parents[2] / "scenarios"
SEED = str(SCENARIOS / "seed-pipelined.yaml")
GPIPE = str(SCENARIOS / "gpipe-vs-1f1b.yaml")
INTERLEAVED = str(SCENARIOS / "interleaved.yaml")


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def test_run_prints_the_table():
    result = invoke("run", SEED)
    assert result.exit_code == 0, result.output
    device = (
        "{}      4.000      3.000      4.000   0.4286               1                0 B     0.000"
    )
    assert result.stdout.splitlines() == [
        "pipesim - seed-pipelined",
        "",
        "  schedule          gpipe",
        "  evaluator         fast",
        "  devices           4   stages 4",
        "  microbatches      4 x 1 samples",
        "  makespan          7.000 ms   (analytic 7.000 ms)",
        "  expected error    costs given by hand: exact for the costs given (nothing modelled); "
        "the error is theirs",
        "  bubble fraction   0.4286   (analytic 0.4286)",
        "  bubble overhead   0.7500   (analytic 0.7500)",
        "  span bubble rate  0.0000",
        "  throughput        571.4 samples/s",
        "",
        "  device    busy ms    idle ms    span ms   bubble  peak in-flight   peak activations     at ms",
        *(f"       {device.format(d)}" for d in range(4)),
    ]
    assert result.stderr == ""


def test_run_critical_path_in_the_table():
    # GPipe 4 x 2, F 1 ms, B 2 ms: 15 ms along F of microbatch 0 down, F1 and the
    # backwards of microbatch 1 up, then 0B0.
    result = invoke("run", GPIPE, "--set", "pipeline.microbatches=2", "--critical-path")
    assert result.exit_code == 0 and result.stderr == ""
    tail = result.stdout.split("\n\n")[-2:]
    assert tail == [
        "  critical path (10 steps, 0 to 15.0 ms):\n"
        "      start ms     end ms  device  action\n"
        "           0.0        1.0       0  0F0\n"
        "           1.0        2.0       1  1F0\n"
        "           2.0        3.0       2  2F0\n"
        "           3.0        4.0       3  3F0\n"
        "           4.0        5.0       3  3F1\n"
        "           5.0        7.0       3  3B1\n"
        "           7.0        9.0       2  2B1\n"
        "           9.0       11.0       1  1B1\n"
        "          11.0       13.0       0  0B1\n"
        "          13.0       15.0       0  0B0",
        "  idle time per device and cause (ms):\n"
        "    device 0: downstream gradient 9.0\n"
        "    device 1: upstream activation 1.0, downstream gradient 6.0, done 2.0\n"
        "    device 2: upstream activation 2.0, downstream gradient 3.0, done 4.0\n"
        "    device 3: upstream activation 3.0, done 6.0\n",
    ]
    data = json.loads(
        invoke(
            "run", GPIPE, "--set", "pipeline.microbatches=2", "--critical-path", "--format", "json"
        ).stdout
    )
    assert [e["name"] for e in data["critical_path"]][-2:] == ["0B1", "0B0"]
    assert data["idle_by_cause"]["0"] == {"downstream gradient": 9.0}


def test_run_says_hand_typed_costs_are_per_chunk():
    result = invoke("run", INTERLEAVED, "--format", "json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["makespan_ms"] == 57
    assert result.stderr == (
        "pipesim: note: costs are per chunk: 4 devices x 2 chunks = 8 stages, each costing the "
        "forward_ms/backward_ms given; more chunks cut the same model finer only if the "
        "per-chunk costs shrink in proportion (pipesim compare scales them)\n"
    )
    assert invoke("run", GPIPE).stderr == ""  # one chunk per device: nothing to say


def test_json_report_has_the_documented_keys():
    result = invoke("run", GPIPE, "--format", "json", "--set", "pipeline.schedule=1f1b")
    data = json.loads(result.stdout)
    for key in (
        "scenario",
        "schedule",
        "devices",
        "stages",
        "microbatches",
        "makespan_ms",
        "bubble_fraction",
        "bubble_overhead",
        "span_bubble_rate",
        "samples_per_second",
        "per_device",
        "analytic",
    ):
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
        "run",
        GPIPE,
        "--format",
        "json",
        "-o",
        str(report),
        "--gantt",
        str(gantt),
        "--trace",
        str(trace),
        "--trace-csv",
        str(rows),
        "--schedule-csv",
        str(sched),
    )
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
        == "device,lane,stage,chunk,microbatch,kind,start,end,peer,name,cause,cause_row"
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
            "pipeline.microbatches=9",
        ],
        "pipeline: interleaved-1f1b runs microbatches in rounds",
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
        "pipeline.microbatches=9",
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1].split()[1] == "36.000"  # (m + p - 1)(F + B) for GPipe and 1F1B
    assert (
        "interleaved-1f1b  not run: pipeline: interleaved-1f1b runs microbatches in rounds"
        in result.stdout
    )
    assert gantt.exists()
    rows = json.loads(
        invoke(
            "compare", GPIPE, "--schedules", "gpipe,1f1b,interleaved-1f1b", "--format", "json"
        ).stdout
    )
    assert [r["makespan_ms"] for r in rows] == [33, 33, 28.5]
    assert [r["note"] for r in rows] == [
        "",
        "",
        "virtual_stages=2, hand-typed per-chunk costs x1/2",
    ]


def test_compare_says_when_it_rescales_hand_typed_costs():
    result = invoke("compare", INTERLEAVED, "--schedules", "gpipe,1f1b,interleaved-1f1b,zbv")
    assert result.exit_code == 0
    assert result.stderr == (
        "pipesim: note: gpipe, 1f1b: virtual_stages=1, hand-typed per-chunk costs x2/1: "
        "hand-typed costs are per chunk, so they were scaled to keep the work the same\n"
        "pipesim: note: costs.backward_ms split as backward_input_ms = backward_weight_ms = "
        "B/2 for zbv's I and W; give both to set the split\n"
    )
    names_and_makespans = [line.split()[:2] for line in result.stdout.splitlines()[1:]]
    assert names_and_makespans == [
        ["gpipe", "66.000"],
        ["1f1b", "66.000"],
        ["interleaved-1f1b", "57.000"],
        ["zbv", "51.000"],
    ]


@pytest.mark.parametrize(
    "names, message",
    [
        (",", "--schedules ',': names no schedule; e.g. --schedules gpipe,1f1b"),
        (" , ,", "--schedules ' , ,': names no schedule; e.g. --schedules gpipe,1f1b"),
        ("gpipe,nope", "--schedules: unknown schedule 'nope'; allowed: gpipe, 1f1b,"),
    ],
)
def test_compare_bad_schedule_list_is_one_line(names, message):
    result = invoke("compare", GPIPE, "--schedules", names)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"pipesim: error: {message}")


def test_a_long_error_is_capped_at_one_readable_line():
    name = "x" * 5000
    result = invoke("run", GPIPE, "--set", f"pipeline.schedule={name}")
    assert result.exit_code == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("pipesim: error: ") and "xxx" in line
    assert len(line) <= 300 and "characters left out" in line


def test_a_long_schedule_grid_keeps_the_marked_row(tmp_path):
    steps = [f"0F{i}" for i in range(200)] + ["0F0"] + [f"0B{i}" for i in range(200)]
    (tmp_path / "s.csv").write_text(",".join(steps) + "\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "schema_version: 1\nname: x\n"
        "pipeline: {schedule: csv, schedule_file: s.csv, devices: 1, microbatches: 200}\n"
    )
    result = invoke("run", str(scenario))
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0].startswith("pipesim: error: ") and "0F0 appears twice" in lines[0]
    picture = lines[1:]
    assert len(picture) <= 45
    assert picture[0].strip() == "Rank 0"
    marked = [line for line in picture if "<-- ERROR HERE" in line]
    assert len(marked) == 1 and marked[0].startswith("Step 200 >>0F0<<")
    assert picture[-1] == "... (198 more lines)"
