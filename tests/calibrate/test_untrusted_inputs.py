"""``import-trace`` and ``fit`` read files a user hands over, and trust none of them.

Each fault is met as a user meets it, through the CLI: exit 2, exactly one stderr line
``pipesim: error: FILE: ...`` naming the file and the event or key, nothing on stdout and
nothing written. Three classes (issue 18):

* a Kineto trace of any shape (events that are not objects, a string ``distributedInfo``,
  a list rank, a missing ``ts``, a text ``dur``, deep JSON, a device, a FIFO, a gzip bomb,
  a cut gzip);
* a run file of any shape (missing keys, wrong types, deep JSON, a device, a FIFO);
* numbers that would make a profile pipesim's own loader refuses (NaN, negative times, a
  compute factor of 0): refused at the source, naming the event or the run.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim.calibrate import trace_import
from pipesim.cli import main
from pipesim.scenario.profile import Profile, Spread, StageTiming, load_profile, save_profile
from pipesim.schedules import get_schedule
from pipesim.schedules.ir import to_csv


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_refused(result, out: Path, file: Path | str, *expected: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"pipesim: error: {file}: "), lines[0]
    for text in expected:
        assert text in lines[0], lines[0]
    assert not out.exists()


def fifo(folder: Path) -> Path:
    path = folder / "pipe.json"
    os.mkfifo(path)
    return path


DEEP = "[" * 100_000 + "]" * 100_000

# ---------------------------------------------------------------------------
# import-trace


def event(name="PP:0F0", ts=0, dur=1000, **more) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur, **more}


GOOD_EVENTS = [event(), event("PP:0B0", 1000, 2000)]


def import_trace(folder: Path, content: str | bytes | dict | list | Path):
    if isinstance(content, Path):
        path = content
    else:
        path = folder / ("r0.json.gz" if isinstance(content, bytes) else "r0.json")
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content if isinstance(content, str) else json.dumps(content))
    out = folder / "profile.json"
    return invoke("import-trace", path, "-o", out), out, path


def test_a_well_formed_trace_imports_into_a_profile_that_loads(tmp_path):
    result, out, _ = import_trace(tmp_path, {"traceEvents": GOOD_EVENTS})
    assert result.exit_code == 0, result.output
    assert load_profile(out).stages[0].median_ms("B") == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("trace", "expected"),
    [
        ({"traceEvents": [*GOOD_EVENTS, 7]}, ["traceEvents[2]: expected an object, got int"]),
        ({"traceEvents": GOOD_EVENTS, "distributedInfo": "rank 0"}, ["distributedInfo: expected"]),
        ({"traceEvents": GOOD_EVENTS, "distributedInfo": {"rank": [0]}}, ["distributedInfo.rank"]),
        ({"traceEvents": GOOD_EVENTS, "distributedInfo": {"rank": -1}}, ["distributedInfo.rank"]),
        (
            {"traceEvents": [GOOD_EVENTS[0], {"ph": "X", "name": "PP:0B0", "dur": 5}]},
            ["traceEvents[1] ('PP:0B0'): ts: expected a number of µs, got nothing"],
        ),
        (
            {"traceEvents": [GOOD_EVENTS[0], event("PP:0B0", dur="2000")]},
            ["traceEvents[1] ('PP:0B0'): dur: expected a number of µs, got str"],
        ),
        ({"traceEvents": [event(dur=True)]}, ["traceEvents[0]", "dur: expected a number"]),
        (DEEP, ["nested deeper than"]),
        ('{"traceEvents": [' + "1" * 5000 + "]}", ["not a readable profiler trace"]),
        (b"\x1f\x8b" + gzip.compress(b'{"traceEvents": []}')[2:-6], ["not a readable gzip"]),
        (b"\xff\xfe{}", ["not UTF-8 text"]),
    ],
    ids=[
        "event-not-object",
        "string-distributedInfo",
        "list-rank",
        "negative-rank",
        "missing-ts",
        "text-dur",
        "bool-dur",
        "deep-json",
        "huge-integer",
        "truncated-gzip",
        "not-utf8",
    ],
)
def test_a_malformed_trace_is_one_line_naming_the_event_or_field(tmp_path, trace, expected):
    result, out, path = import_trace(tmp_path, trace)
    assert_refused(result, out, path, *expected)


def test_a_device_or_a_fifo_is_refused_before_a_byte_is_read(tmp_path):
    for path in (Path("/dev/zero"), fifo(tmp_path)):
        result, out, _ = import_trace(tmp_path, path)
        assert_refused(result, out, path, "not a regular file")


def test_a_gzip_that_expands_past_the_cap_is_refused_after_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_import, "MAX_TRACE_BYTES", 1 << 20)
    bomb = gzip.compress(b" " * (8 << 20))  # 8 MiB of spaces in about 8 KiB
    assert len(bomb) < 64 << 10
    result, out, path = import_trace(tmp_path, bomb)
    assert_refused(result, out, path, "expands to more than 1,048,576 bytes")


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        (
            [GOOD_EVENTS[0], event("PP:0B0", dur=float("nan"))],
            "traceEvents[1] ('PP:0B0'): dur: nan",
        ),
        ([GOOD_EVENTS[0], event("PP:0B0", dur=-5)], "traceEvents[1] ('PP:0B0'): dur: -5"),
        ([GOOD_EVENTS[0], event("PP:0B0", ts=float("inf"))], "traceEvents[1] ('PP:0B0'): ts: inf"),
        ([event(dur=1e300), GOOD_EVENTS[1]], "traceEvents[0] ('PP:0F0'): dur: 1e+300"),
    ],
    ids=["nan-dur", "negative-dur", "infinite-ts", "huge-dur"],
)
def test_a_time_no_profile_can_hold_is_refused_naming_the_event(tmp_path, events, expected):
    result, out, path = import_trace(tmp_path, {"traceEvents": events})  # json writes NaN
    assert_refused(result, out, path, expected, "is not a finite number of µs")


# ---------------------------------------------------------------------------
# fit

SCHEDULE = get_schedule("1f1b", 2, 1)


def span(category, name, start, end) -> dict:
    return {"category": category, "name": name, "start_ms": start, "end_ms": end}


def run_file(**changes) -> dict:
    data = {
        "format": "pipesim-run",
        "version": 1,
        "schedule": "1f1b",
        "devices": 2,
        "meta": {"csv": to_csv(SCHEDULE)},
        "ranks": [
            [span("compute", "0F0", 0.0, 1.0), span("compute", "0B0", 5.0, 7.0)],
            [
                span("wait", "", 1.0, 1.5),
                span("compute", "1F0", 1.5, 2.5),
                span("compute", "1B0", 2.75, 4.75),
            ],
        ],
    }
    data.update(changes)
    return data


def fit(folder: Path, content: str | dict | Path, *more):
    if isinstance(content, Path):
        path = content
    else:
        path = folder / "run.json"
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    out = folder / "fitted.json"
    return invoke("fit", path, "-o", out, *more), out, path


def test_a_well_formed_run_fits_into_a_profile_that_loads(tmp_path):
    result, out, _ = fit(tmp_path, run_file())
    assert result.exit_code == 0, result.output
    assert load_profile(out).host is not None


def with_span(rank: int, index: int, **fields) -> list:
    ranks = run_file()["ranks"]
    ranks[rank][index] = {**ranks[rank][index], **fields}
    return ranks


def without(key: str) -> dict:
    data = run_file()
    del data[key]
    return data


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (without("ranks"), "ranks: expected a list of 2 lists of spans, got nothing"),
        (without("schedule"), "schedule: expected a schedule name, got nothing"),
        (without("meta"), "meta.csv: expected the schedule as CSV text, got nothing"),
        (run_file(meta={"csv": "0F0,??"}), "meta.csv: "),
        (run_file(devices="2"), "devices: expected 2, the schedule's, got str"),
        (run_file(devices=3), "devices: expected 2, the schedule's, got int 3"),
        (run_file(format="other"), "format: expected pipesim-run, got str"),
        ([run_file()], "top level: expected an object, got list"),
        (run_file(ranks=[[], {}]), "ranks[1]: spans: expected a list of spans"),
        (run_file(ranks=with_span(0, 0, start_ms="0")), "ranks[0][0]: start_ms: expected"),
        (run_file(ranks=with_span(0, 1, name=3)), "ranks[0][1]: name: expected"),
        (run_file(ranks=with_span(0, 1, name="5B9")), "ranks[0][1]: name: expected a compute"),
        (run_file(ranks=with_span(1, 0, category="idle")), "ranks[1][0]: category: expected"),
        (run_file(ranks=[["0F0"], []]), "ranks[0][0]: span: expected an object, got str"),
        (run_file(ranks=[[span("wait", "", 0, 1)], []]), "ranks: no compute spans"),
        (DEEP, "nested deeper than"),
        ("{", "not valid JSON"),
    ],
)
def test_a_malformed_run_file_is_one_line_naming_the_key(tmp_path, data, expected):
    result, out, path = fit(tmp_path, data)
    assert_refused(result, out, path, expected)


def test_a_device_or_a_fifo_run_file_is_refused_before_a_byte_is_read(tmp_path):
    for path in (Path("/dev/zero"), fifo(tmp_path)):
        result, out, _ = fit(tmp_path, path)
        assert_refused(result, out, path, "not a regular file")


@pytest.mark.parametrize(
    ("ranks", "expected"),
    [
        (with_span(1, 1, end_ms=1.0), "ranks[1][1]: end_ms: expected start_ms (1.5) or at"),
        (with_span(0, 0, start_ms=float("nan")), "ranks[0][0]: start_ms: expected a finite"),
        (with_span(0, 0, end_ms=float("inf")), "ranks[0][0]: end_ms: expected a finite"),
    ],
    ids=["end-before-start", "nan-start", "infinite-end"],
)
def test_a_time_that_would_give_a_negative_or_nan_median_is_refused(tmp_path, ranks, expected):
    result, out, path = fit(tmp_path, run_file(ranks=ranks))
    assert_refused(result, out, path, expected)


def test_a_compute_factor_no_profile_can_hold_is_refused_naming_the_run(tmp_path):
    base = tmp_path / "base.json"
    spread = Spread(1.0, 1.0, 1.0, 1)
    save_profile(Profile(tuple(StageTiming(s, {"F": spread, "B": spread}) for s in (0, 1))), base)
    ranks = [[{**s, "end_ms": s["start_ms"]} for s in rank] for rank in run_file()["ranks"]]
    result, out, path = fit(tmp_path, run_file(ranks=ranks), "--profile", base)
    assert_refused(result, out, path, "the measured compute takes 0 times the profile's")
