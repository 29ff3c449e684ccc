"""Output files: every path checked before anything is written; regular files written
whole with the user's umask; devices and FIFOs written in place; symlinks followed."""

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim.cli import main, output

SCENARIOS = Path(__file__).parents[2] / "scenarios"
GPIPE = str(SCENARIOS / "gpipe-vs-1f1b.yaml")  # 4 devices, 8 microbatches: makespan 33 ms


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def umask():
    old = os.umask(0o027)
    yield 0o027
    os.umask(old)


def test_dev_null_stays_a_character_device():
    result = invoke("run", GPIPE, "--format", "json", "-o", "/dev/null")
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and result.stderr == ""
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_fifo_is_written_into_not_replaced(tmp_path):
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = invoke("run", GPIPE, "--format", "json", "-o", str(fifo))
    reader.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert json.loads(received[0])["makespan_ms"] == 33
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temp file left


def test_a_symlink_is_followed_and_kept(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "r.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    dangling = tmp_path / "new.csv"
    dangling.symlink_to(tmp_path / "real" / "t.csv")
    result = invoke("run", GPIPE, "--format", "json", "-o", str(link), "--trace-csv", str(dangling))
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["makespan_ms"] == 33
    assert dangling.is_symlink()
    assert (tmp_path / "real" / "t.csv").read_text().startswith("device,lane,stage")
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["r.json", "t.csv"]


def test_new_files_get_the_umask_and_old_files_keep_their_mode(tmp_path, umask):
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    old.write_text("{}")
    old.chmod(0o604)
    for path in (new, old):
        assert invoke("run", GPIPE, "--format", "json", "-o", str(path)).exit_code == 0
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~umask == 0o640
    assert stat.S_IMODE(old.stat().st_mode) == 0o604
    assert json.loads(old.read_text())["makespan_ms"] == 33


def test_a_bad_later_output_writes_nothing_and_keeps_what_was_there(tmp_path):
    gantt, report = tmp_path / "g.png", tmp_path / "r.json"
    gantt.write_bytes(b"old chart")
    result = invoke(
        "run",
        GPIPE,
        "-o",
        str(report),
        "--gantt",
        str(gantt),
        "--trace",
        str(tmp_path / "nodir" / "t.json"),
    )
    missing = tmp_path / "nodir"
    assert one_error_line(result) == (
        f"pipesim: error: --trace {missing}/t.json: directory {missing} does not exist"
    )
    assert gantt.read_bytes() == b"old chart"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.png"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["-o", "{tmp}"], "-o {tmp}: is a directory; name a file in it"),
        (
            ["--gantt", "{tmp}/g.gif"],
            "--gantt {tmp}/g.gif: unsupported file type; allowed: .png, .svg, .pdf",
        ),
        (["--trace", "{tmp}"], "--trace {tmp}: unsupported file type; allowed: .json, .gz"),
        (
            ["--trace", "{tmp}/x.json/"],
            "--trace {tmp}/x.json/: ends with '/', a directory; name a file",
        ),
        (
            ["--trace-csv", "{tmp}/a.csv", "--schedule-csv", "{tmp}/a.csv"],
            "--schedule-csv {tmp}/a.csv: also named by --trace-csv; give each output its own file",
        ),
        (["-o", ""], "-o: an empty path; name a file"),
        (
            ["--schedule-csv", "{tmp}/file.txt/s.csv"],
            "--schedule-csv {tmp}/file.txt/s.csv: directory {tmp}/file.txt does not exist",
        ),
    ],
)
def test_bad_output_paths_are_one_line(tmp_path, args, message):
    (tmp_path / "file.txt").write_text("keep")
    args = [a.format(tmp=tmp_path) for a in args]
    line = one_error_line(invoke("run", GPIPE, *args))
    assert line == f"pipesim: error: {message.format(tmp=tmp_path)}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]
    assert (tmp_path / "file.txt").read_text() == "keep"


def test_every_command_checks_its_outputs_first(tmp_path):
    nodir = tmp_path / "nodir"
    cases = [
        (["compare", GPIPE, "--schedules", "gpipe", "--gantt", f"{nodir}/g.png"], "--gantt"),
        (["compare", GPIPE, "--schedules", "gpipe", "-o", str(tmp_path)], "-o"),
        (
            ["sweep", GPIPE, "--grid", "pipeline.microbatches=4", "--plot", f"{nodir}/p.png"],
            "--plot",
        ),
        (["sweep", GPIPE, "--grid", "pipeline.microbatches=4", "-o", str(tmp_path)], "-o"),
        (["explain", GPIPE, "-o", f"{nodir}/e.txt"], "-o"),
        (["fit", "run.json", "-o", f"{nodir}/p.json"], "-o"),
        (["import-trace", "t.json", "-o", "p.json", "--timeline-csv", "t.txt"], "--timeline-csv"),
        (["profile", GPIPE, "-o", f"{nodir}/p.json"], "-o"),
        (["crosscheck", GPIPE, "--gantt", f"{nodir}/g.png"], "--gantt"),
    ]
    for args, option in cases:
        line = one_error_line(invoke(*args))
        assert line.startswith(f"pipesim: error: {option} "), line
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    target.write_text("old")

    def refuse(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(output.os, "replace", refuse)
    with pytest.raises(output.UserError, match="r.json: disk full"):
        output.write_file(str(target), "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_sweep_and_compare_write_through_the_same_edge(tmp_path, umask):
    table, chart = tmp_path / "s.json", tmp_path / "c.svg"
    result = invoke(
        "sweep", GPIPE, "--grid", "pipeline.microbatches=4,8", "--jobs", "1", "-o", str(table)
    )
    assert result.exit_code == 0 and result.stdout == "" and result.stderr == ""
    assert [r["makespan_ms"] for r in json.loads(table.read_text())] == [21.0, 33.0]
    assert stat.S_IMODE(table.stat().st_mode) == 0o640
    result = invoke(
        "compare", GPIPE, "--schedules", "gpipe,1f1b", "--gantt", str(chart), "-o", "/dev/null"
    )
    assert result.exit_code == 0 and result.stdout == ""
    assert chart.read_text().lstrip().startswith("<?xml")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
