"""Every refusal names where the problem is: the file, and the field, row or stage in it.

Three errors used to name neither (issue 18, class 15): an action the schedule CSV reader
cannot parse, profiler traces without a stage's forward, and an empty serving trace path
(which was looked up as the scenario's folder: ``.: not a regular file``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim.cli import main
from pipesim.schedules.ir import ScheduleError, from_csv

SCENARIOS = Path(__file__).parents[2] / "scenarios"
SERVE = SCENARIOS / "serve-bursty-trace.yaml"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_an_action_that_cannot_be_parsed_names_its_row_and_column():
    with pytest.raises(ScheduleError, match=r"^row 2, column 3: cannot parse action 'xx'"):
        from_csv("0F0,0B0\n1F0,1B0,xx\n")


def test_a_run_file_names_itself_the_key_and_the_cell(tmp_path):
    run = tmp_path / "run.json"
    meta = {"csv": "0F0,xx\n"}
    run.write_text(json.dumps({"format": "pipesim-run", "schedule": "x", "meta": meta}))
    out = tmp_path / "fitted.json"
    result = invoke("fit", run, "-o", out)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(
        f"pipesim: error: {run}: meta.csv: row 1, column 2: cannot parse action 'xx': "
    )
    assert len(result.stderr.splitlines()) == 1 and not out.exists()


def trace(folder: Path, name: str, rank: int, *actions: str) -> Path:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": f"PP:{a}", "ts": 100 * n, "dur": 50}
        for n, a in enumerate(actions)
    ]
    path = folder / name
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": rank}}))
    return path


@pytest.mark.parametrize(
    ("ranks", "expected"),
    [
        (
            [("r0.json", 0, "0B0", "0SEND_B0"), ("r1.json", 1, "1F0", "1B0")],
            "r0.json: stage 0 has no forward (no PP:0F<microbatch> span); "
            "a profile needs every stage's forward",
        ),
        (
            [("r1.json", 1, "1F0", "1B0")],
            "r1.json: no action of stage 0, though stages up to 1 ran; "
            "give the trace of every rank",
        ),
        (
            [("r0.json", 0, "0SEND_F0"), ("r1.json", 1, "1RECV_F0")],
            "r0.json, r1.json: no compute actions (PP:<stage><F|B|I|W><microbatch> spans), "
            "only 0SEND_F0, 1RECV_F0",
        ),
    ],
    ids=["no-forward", "a-rank-missing", "no-compute"],
)
def test_traces_without_a_stage_forward_name_the_files(tmp_path, monkeypatch, ranks, expected):
    monkeypatch.chdir(tmp_path)
    paths = [trace(Path(), name, rank, *actions) for name, rank, *actions in ranks]
    result = invoke("import-trace", *paths, "-o", "profile.json")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"pipesim: error: {expected}\n"
    assert not Path("profile.json").exists()


@pytest.mark.parametrize(("empty", "shown"), [('""', "''"), ("'  '", "'  '")])
@pytest.mark.parametrize("command", ["serve", "validate", "run"])
def test_an_empty_trace_file_is_refused_naming_the_scenario_and_the_field(command, empty, shown):
    result = invoke(command, SERVE, "--set", f"serving.workload.trace_file={empty}")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        f"pipesim: error: {SERVE}: serving.workload.trace_file: an empty path; give the "
        "trace CSV's path (arrival_s, prompt_tokens, output_tokens), relative to the "
        f"scenario's folder (got {shown})\n"
    )


@pytest.mark.parametrize(
    ("key", "value"), [("costs.profile", "''"), ("pipeline.schedule_file", "' '")]
)
def test_an_empty_file_path_is_refused_naming_the_field(key, value):
    result = invoke("run", "scenarios/seed-pipelined.yaml", "--set", f"{key}={value}")
    assert result.exit_code == 2
    assert result.stderr == (
        f"pipesim: error: scenarios/seed-pipelined.yaml: {key}: an empty path; name a file, "
        f"relative to the scenario's folder (got {value})\n"
    )


def test_a_bad_argument_keeps_the_case_of_its_name(tmp_path):
    result = invoke("import-trace", str(tmp_path), "-o", str(tmp_path / "p.json"))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"pipesim: error: TRACES: File '{tmp_path}' is a directory")
