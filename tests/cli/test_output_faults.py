"""Output faults, one test per class of issue 18, for every command: an output that is an
input file (class 2), a full disk half way through a command's outputs (class 3), and the
report format an ``-o`` suffix implies (class 16). Each refusal is exit 2, exactly one
``pipesim: error:`` line naming the path, nothing written and existing files untouched."""

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim.cli import main, output

SCENARIOS = Path(__file__).parents[2] / "scenarios"
GPIPE = SCENARIOS / "gpipe-vs-1f1b.yaml"
PLAN = SCENARIOS / "plan-llama-70b-64xh100.yaml"
PLAN_SPACE = ("--gpus", "64", "--space", "parallel.tensor=8", "--space", "pipeline.schedule=1f1b")
PLAN_SPACE += ("--jobs", "1", "--no-progress", "--confirm", "1", "--top", "3")
BURSTY = SCENARIOS / "serve-bursty-trace.yaml"  # names data/bursty-gamma-cv3.csv


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_error_line(result, *names: str) -> str:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pipesim: error: ")
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def copies(tmp_path):
    """A folder with a training scenario, a serving scenario and the trace it names, and a
    sweep scenario as JSON; the folder's bytes are checked unchanged after each refusal."""
    shutil.copy(GPIPE, tmp_path / "g.yaml")
    shutil.copy(BURSTY, tmp_path / "serve.yaml")
    (tmp_path / "data").mkdir()
    shutil.copy(SCENARIOS / "data" / "bursty-gamma-cv3.csv", tmp_path / "data" / "trace.csv")
    text = (tmp_path / "serve.yaml").read_text().replace("bursty-gamma-cv3.csv", "trace.csv")
    (tmp_path / "serve.yaml").write_text(text)
    (tmp_path / "s.json").write_text(json.dumps({"pipeline": {"stages": 2}}))
    (tmp_path / "r0.json").write_text("{}")
    (tmp_path / "link.yaml").symlink_to(tmp_path / "g.yaml")
    return tmp_path


def test_an_output_that_is_an_input_is_refused_in_every_command(copies):
    g, serve, trace = copies / "g.yaml", copies / "serve.yaml", copies / "data" / "trace.csv"
    cases = [
        (("run", g, "-o", g), "-o"),
        (("run", g, "--trace-csv", copies / "x.csv", "-o", copies / "link.yaml"), "link.yaml"),
        (("serve", serve, "--requests", trace), "--requests"),
        (("plan", g, "--gpus", "4", "--emit", g), "--emit"),
        (
            ("sweep", copies / "s.json", "--grid", "pipeline.stages=2", "-o", copies / "s.json"),
            "-o",
        ),
        (("compare", g, "-o", g), "-o"),
        (("explain", g, "-o", g), "-o"),
        (("import-trace", copies / "r0.json", "-o", copies / "r0.json"), "-o"),
        (("fit", copies / "r0.json", "-o", copies / "r0.json"), "-o"),
    ]
    before = snapshot(copies) | snapshot(copies / "data")
    for args, name in cases:
        line = one_error_line(invoke(*args), name)
        assert "input file" in line, line
    assert snapshot(copies) | snapshot(copies / "data") == before


def test_a_full_disk_half_way_writes_nothing_and_keeps_the_old_files(copies, monkeypatch):
    old = {"a.json": b"old a", "b.csv": b"old b"}
    for name, data in old.items():
        (copies / name).write_bytes(data)
    real_write = os.write

    def full_on_second_file(handle, data):  # a.json's temporary fits, b.csv's does not
        if ".b.csv." in os.readlink(f"/proc/self/fd/{handle}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(handle, data)

    monkeypatch.setattr(output.os, "write", full_on_second_file)
    args = ("run", copies / "g.yaml", "--trace", copies / "a.json", "--trace-csv", copies / "b.csv")
    one_error_line(invoke(*args, "--format", "json", "-o", "-"), "No space left on device")
    monkeypatch.undo()
    assert {n: (copies / n).read_bytes() for n in old} == old
    assert not [p for p in copies.iterdir() if p.name.endswith(".tmp")]
    if Path("/dev/full").exists():  # a device is written in place: the same one line
        for command in ("run", "compare", "explain"):
            extra = ("--schedules", "gpipe,1f1b") if command == "compare" else ()
            result = invoke(command, copies / "g.yaml", *extra, "-o", "/dev/full")
            one_error_line(result, "/dev/full", "No space left on device")
        result = invoke("serve", copies / "serve.yaml", "-o", "/dev/full")
        one_error_line(result, "/dev/full", "No space left on device")


def test_the_output_suffix_picks_the_format_unless_format_says_otherwise(copies):
    g, serve = copies / "g.yaml", copies / "serve.yaml"
    for command, path, extra in [
        ("run", g, ()),
        ("compare", g, ("--schedules", "gpipe,1f1b")),
        ("explain", g, ()),
        ("plan", PLAN, PLAN_SPACE),
        ("serve", serve, ()),
    ]:
        out = copies / f"{command}.json"
        result = invoke(command, path, *extra, "-o", out)
        assert result.exit_code == 0, result.output
        json.loads(out.read_text())
        if command != "explain":
            csv = copies / f"{command}.csv"
            assert invoke(command, path, *extra, "-o", csv).exit_code == 0
            assert "," in csv.read_text().splitlines()[0]
            assert not csv.read_text().lstrip().startswith("{")
    table = invoke("run", g)
    assert table.exit_code == 0 and not table.stdout.lstrip().startswith("{")
    before = snapshot(copies)
    line = one_error_line(invoke("run", g, "--format", "table", "-o", copies / "x.json"))
    assert "x.json" in line and "--format table" in line
    assert snapshot(copies) == before
