"""A lone hand-typed backward_ms split in half for I and W is said, on stderr and in JSON."""

import json

import yaml
from click.testing import CliRunner

from pipesim.cli import main

NOTE = (
    "pipesim: note: costs.backward_ms split as backward_input_ms = backward_weight_ms = "
    "B/2 for zb-h1's I and W; give both to set the split"
)


def _scenario(tmp_path, schedule: str, chunks: int = 1, **costs) -> str:
    pipeline = {"schedule": schedule, "devices": 4, "microbatches": 8, "mode": "train"}
    data = {
        "schema_version": 1,
        "name": "split",
        "pipeline": {**pipeline, "virtual_stages": chunks},
        "costs": {"forward_ms": 1, **costs},
    }
    path = tmp_path / "split.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _run(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_zb_h1_with_backward_ms_alone_says_so_on_stderr_and_in_json(tmp_path):
    result = _run("run", _scenario(tmp_path, "zb-h1", backward_ms=2), "--format", "json")
    assert NOTE in result.stderr.splitlines()
    assert json.loads(result.stdout)["notes"] == [NOTE.removeprefix("pipesim: note: ")]


def test_both_halves_given_say_nothing(tmp_path):
    path = _scenario(
        tmp_path, "zb-h1", backward_ms=2, backward_input_ms=1.2, backward_weight_ms=0.8
    )
    result = _run("run", path, "--format", "json")
    assert "split" not in result.stderr
    assert "notes" not in json.loads(result.stdout)


def test_1f1b_runs_no_i_or_w_and_says_nothing(tmp_path):
    result = _run("run", _scenario(tmp_path, "1f1b", backward_ms=2), "--format", "json")
    assert result.stderr == ""
    assert "notes" not in json.loads(result.stdout)


def test_compare_says_it_once_for_the_schedules_it_applies_to(tmp_path):
    path = _scenario(tmp_path, "1f1b", backward_ms=2)
    result = _run("compare", path, "--schedules", "gpipe,1f1b,zb-h1,zb-h2")
    lines = [line for line in result.stderr.splitlines() if "backward_ms split" in line]
    assert lines == [NOTE.replace("for zb-h1's", "for zb-h1, zb-h2's")]


def test_json_notes_hold_the_split_note_only(tmp_path):
    path = _scenario(tmp_path, "zbv", chunks=2, backward_ms=2)
    result = _run("run", path, "--format", "json")
    assert "costs are per chunk" in result.stderr
    [text] = json.loads(result.stdout)["notes"]
    assert text.startswith("costs.backward_ms split as") and "zbv's I and W" in text
