"""An action's text form takes ASCII digits only, at most 1,000 of them (issue 18).

Python's ``\\d`` also matches '٣' and '１', which ``int()`` reads as 3 and 1, so a CSV
schedule or a profiler trace could name a microbatch in digits no other tool reads; and
``int()`` of thousands of digits raises a bare ValueError (a traceback from
``import-trace``) instead of the ScheduleError every caller turns into one line.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pipesim.cli import main
from pipesim.schedules import get_schedule
from pipesim.schedules.ir import Action, Kind, ScheduleError, parse_action
from tests.cli.fuzz.corpus import kineto_trace, run_file


@pytest.mark.parametrize(
    "text",
    ["0F٣", "٠F1", "0F１", "0F²", "0F" + "9" * 1001, "0F" + "9" * 5000, "(0F1;1B٣)OVERLAP_F_B"],
)
def test_an_action_in_other_digits_or_too_many_is_a_schedule_error(text):
    with pytest.raises(ScheduleError, match="cannot parse action"):
        parse_action(text)


def test_a_thousand_ascii_digits_still_parse():
    assert parse_action(" 12F" + "9" * 1000) == Action(12, Kind.F, 10**1000 - 1)


def test_a_trace_naming_a_5000_digit_microbatch_is_no_traceback(tmp_path):
    """The span is no compute action of pipesim's text form, so it is left out; the rest
    of the trace makes the profile."""
    trace = json.loads(kineto_trace(0, get_schedule("1f1b", 2, 2)))
    trace["traceEvents"].append({**trace["traceEvents"][0], "name": "PP:0F" + "9" * 5000})
    path, out = tmp_path / "r0.json", tmp_path / "p.json"
    path.write_text(json.dumps(trace))
    result = CliRunner().invoke(main, ["import-trace", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["stages"][0]["F"]["samples"] == 2


def test_a_run_file_naming_a_5000_digit_action_names_the_span(tmp_path):
    data = json.loads(run_file(get_schedule("1f1b", 2, 2)))
    data["ranks"][0][1]["name"] = "0F" + "9" * 5000
    path, out = tmp_path / "run.json", tmp_path / "fitted.json"
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["fit", str(path), "-o", str(out)])
    assert result.exit_code == 2, result.output
    expected = (
        f"pipesim: error: {path}: ranks[0][1]: name: expected a compute action of the schedule"
    )
    assert result.stderr.startswith(expected), result.stderr
    assert result.stderr.count("\n") == 1
    assert not out.exists()
