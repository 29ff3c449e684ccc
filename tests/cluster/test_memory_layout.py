"""Stages that hold no transformer layer, written as Megatron-LM's layout strings.

``"E|t*3|t*3|L"`` is a four-stage pipeline whose first stage holds the embedding alone and
whose last holds the LM head and loss alone; the two middle stages hold three layers each.
"""

import json
import re

import pytest
from click.testing import CliRunner

from pipesim.cli import main
from pipesim.cluster.layout import layout_partition, parse_layout
from pipesim.cluster.model import TransformerModel, partition_layers, stage_parameters

MODEL = TransformerModel(layers=6, hidden=1024, heads=8, seq_len=512, vocab=32000)


def test_parse_expands_repetitions_and_groups():
    assert parse_layout("E|t*3|t*3|L") == ("E", "ttt", "ttt", "L")
    assert parse_layout("Et*2|(tt|)*2,tL") == ("Ett", "tt", "tt", "tL")
    assert parse_layout("EtL") == ("EtL",)
    assert parse_layout("E(t(t)*2|)*2L") == ("Ettt", "ttt", "L")


def test_megatrons_deepseek_example_without_its_mtp_layer():
    # "Et*3|(tt|)*29,m|L" with the MTP layer written as a decoder layer instead
    counts = layout_partition("Et*3|(tt|)*29,t|L", layers=62, stages=32)
    assert counts == (3,) + (2,) * 29 + (1, 0)


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("Et*3|(tt|)*29,m|L", "multi-token prediction layers (m) are not placed by a layout"),
        ("t|E|L", "the embedding (E) must appear once, first in the first stage"),
        ("Et|tL|t", "the loss and LM head (L) must appear once, last in the last stage"),
        ("Et||tL", "stage 1 holds no layer; only the first (embedding) and the last stage"),
        ("Et|x|tL", "unknown letter 'x' at position 3; allowed: E (embedding)"),
        ("E(t|tL", "a '(' is never closed"),
        ("Et)|tL", "')' at position 2 closes no '('"),
        ("Et*|tL", "'*' at position 2 needs a count"),
        ("", "an empty layout"),
    ],
)
def test_bad_layouts_are_refused(layout, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        parse_layout(layout)


def test_the_layout_must_cover_the_layers_and_the_stages():
    with pytest.raises(ValueError, match=r"^'E\|t\|L' holds 1 transformer layers \(t\); "):
        layout_partition("E|t|L", layers=2)
    with pytest.raises(ValueError, match=r"^'Et\|tL' has 2 stages; the schedule runs 3$"):
        layout_partition("Et|tL", layers=2, stages=3)


def test_partition_layers_takes_a_layout_or_a_list_with_empty_ends():
    assert partition_layers(MODEL, 4, "E|t*3|t*3|L") == (0, 3, 3, 0)
    assert partition_layers(MODEL, 4, [0, 3, 3, 0]) == (0, 3, 3, 0)
    assert partition_layers(MODEL, 1, [6]) == (6,)
    for bad in ([3, 0, 3, 0], [0, 6, 0, 0]):
        with pytest.raises(ValueError, match="the first and the last may hold 0"):
            partition_layers(MODEL, 4, bad)
    with pytest.raises(ValueError, match="^unknown partition mode 'thirds'"):
        partition_layers(MODEL, 4, "thirds")


def test_an_embedding_only_stage_holds_the_embedding_alone():
    embedding = MODEL.vocab * MODEL.hidden
    params = stage_parameters(MODEL, (0, 3, 3, 0))
    assert params[0] == params[3] == embedding
    assert params[1] == params[2] > embedding


SCENARIO = """\
schema_version: 1
name: layout
pipeline: {schedule: 1f1b, devices: 4, microbatches: 8}
model: {layers: 6, hidden: 1024, heads: 8, seq_len: 512, vocab: 32000,
        pipeline_layout: "E|t*3|t*3|L"}
hardware: {gpu: h100-sxm}
"""


def run(tmp_path, *args, text=SCENARIO):
    path = tmp_path / "layout.yaml"
    path.write_text(text)
    return path, CliRunner().invoke(main, ["run", str(path), *args])


def test_run_end_to_end_with_empty_first_and_last_stages(tmp_path):
    _, result = run(tmp_path, "--format", "json", "--gantt", str(tmp_path / "g.png"))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    devices = report["per_device"]
    embedding = MODEL.vocab * MODEL.hidden
    # adam, one replica: 16 bytes per parameter, the embedding alone on the first stage
    assert devices[0]["static_memory_bytes"] == 16 * embedding
    assert devices[3]["static_memory_bytes"] == 16 * embedding
    # the embedding stage's forward is a gather, far lighter than three layers
    assert 0 < devices[0]["busy_ms"] < devices[1]["busy_ms"] / 10
    assert (tmp_path / "g.png").stat().st_size > 0


def test_interleaved_stages_count_devices_times_virtual_stages(tmp_path):
    _, result = run(
        tmp_path,
        "--set",
        "pipeline.schedule=interleaved-1f1b",
        "--set",
        "pipeline.virtual_stages=2",
        "--set",
        "model.pipeline_layout=E|t|t|t|t|t|t|L",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["stages"] == 8


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "model.pipeline_layout=E|t*3|t*2|L",
            "model.pipeline_layout: 'E|t*3|t*2|L' holds 5 transformer layers (t); "
            "model.layers is 6",
        ),
        (
            "model.pipeline_layout=Et*3|t*3L",
            "model.pipeline_layout: 'Et*3|t*3L' has 2 stages; the schedule runs 4",
        ),
        ("model.partition=even", "model: give model.partition or model.pipeline_layout, not both"),
        (
            "model.pipeline_layout=Et|m|tL",
            "model.pipeline_layout: multi-token prediction layers (m) are not placed by a "
            "layout: model.mtp_layers puts them on the last stage; leave m out (got 'Et|m|tL')",
        ),
    ],
)
def test_a_layout_that_does_not_fit_is_one_error_line(tmp_path, override, message):
    path, result = run(tmp_path, "--set", override)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == f"pipesim: error: {path}: {message}\n"
