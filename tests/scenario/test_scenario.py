"""Scenario files: formats, overrides and one-line errors."""

import json
import math
import os
import pickle
import time
from pathlib import Path

import pytest

from pipesim.scenario.build import ScenarioError, load_scenario, with_schedule
from pipesim.scenario.schema import Mode
from pipesim.scenario.serving import load_serving

SCENARIOS = Path(__file__).parents[2] / "scenarios"
BASE = {
    "schema_version": 1,
    "name": "t",
    "pipeline": {"schedule": "1f1b", "devices": 4, "microbatches": 8},
    "costs": {"forward_ms": 1, "backward_ms": 2},
}


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_yaml_toml_and_json_give_the_same_scenario(tmp_path):
    yaml_path = write(tmp_path, json.dumps(BASE), "s.json")
    toml = """schema_version = 1
name = "t"
[pipeline]
schedule = "1f1b"
devices = 4
microbatches = 8
[costs]
forward_ms = 1
backward_ms = 2
"""
    toml_path = write(tmp_path, toml, "s.toml")
    yml = write(
        tmp_path,
        "schema_version: 1\nname: t\npipeline: {schedule: 1f1b, devices: 4, microbatches: 8}\ncosts: {forward_ms: 1, backward_ms: 2}\n",
    )
    scenarios = [load_scenario(p) for p in (yaml_path, toml_path, yml)]
    assert scenarios[0].schedule == scenarios[1].schedule == scenarios[2].schedule
    assert scenarios[0].costs == scenarios[1].costs == scenarios[2].costs


def test_overrides_are_parsed_as_yaml_and_validated(tmp_path):
    path = write(tmp_path, json.dumps(BASE), "s.json")
    scenario = load_scenario(
        path, ["pipeline.microbatches=16", "pipeline.schedule=gpipe", "costs.forward_ms=[1,1,3,1]"]
    )
    assert scenario.schedule.microbatches == 16 and scenario.schedule.name == "gpipe"
    assert scenario.costs.forward_ms == (1, 1, 3, 1)
    with pytest.raises(
        ScenarioError, match="pipeline.devices: Input should be greater than or equal to 1"
    ):
        load_scenario(path, ["pipeline.devices=0"])


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "pipeline.stages=4",
            "pipeline.stages: unknown key; allowed keys here: schedule, schedule_file, devices",
        ),
        ("pipeline.devices=four", "pipeline.devices: Input should be a valid integer"),
        ("pipeline.schedule=pipedream", "unknown schedule 'pipedream'; allowed: gpipe, 1f1b"),
        ("pipeline.mode=serve", "pipeline.mode: Input should be 'train', 'forward' or 'decode'"),
        ("costs.forward_ms=[1,2]", "costs.forward_ms: has 2 entries, expected a number or 4"),
        ("costs.forward_ms=-1", "costs.forward_ms: Input should be greater than or equal to 0"),
        ("schema_version=2", "schema_version: Input should be 1"),
        ("hardware.link=fast", "hardware.link"),
        (
            "pipeline.schedule=interleaved-1f1b",
            "pipeline: interleaved-1f1b needs virtual_stages >= 2",
        ),
        ("name=", "name: Input should be a valid string"),
    ],
)
def test_bad_values_give_one_line_naming_file_and_field(tmp_path, override, message):
    path = write(tmp_path, json.dumps(BASE), "s.json")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, [override])
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"{path}: ")
    assert message in text


def test_missing_file_and_bad_syntax(tmp_path):
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario(tmp_path / "nope.yaml")
    with pytest.raises(ScenarioError, match=r"s.yaml: not valid YAML"):
        load_scenario(write(tmp_path, "pipeline: [1, 2\n"))
    with pytest.raises(ScenarioError, match="unknown file type '.txt'"):
        load_scenario(write(tmp_path, "x", "s.txt"))


def test_csv_schedule_file(tmp_path):
    (tmp_path / "mine.csv").write_text("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n")
    data = {
        **BASE,
        "pipeline": {
            "schedule": "csv",
            "schedule_file": "mine.csv",
            "devices": 2,
            "microbatches": 2,
        },
    }
    scenario = load_scenario(write(tmp_path, json.dumps(data), "s.json"))
    assert scenario.schedule.placement == (0, 1)
    data["pipeline"]["devices"] = 3
    with pytest.raises(ScenarioError, match="pipeline.devices: 3 given but mine.csv has 2"):
        load_scenario(write(tmp_path, json.dumps(data), "s.json"))


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_bundled_scenario_loads(path):
    assert load_scenario(path).schedule.num_actions > 0


# ---------------------------------------------------------------------------
# YAML as YAML 1.2 reads it, and keys given once

PIPE = "pipeline: {schedule: 1f1b, devices: 2, microbatches: 2}\n"


def one_error(path, overrides=()):
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, list(overrides))
    text = str(info.value)
    assert "\n" not in text and len(text) <= 300
    return text


def test_yaml_1_1_base_60_and_yes_no_are_text(tmp_path):
    path = write(
        tmp_path, "schema_version: 1\nname: t\npipeline: {schedule: 1f1b, devices: 1:30}\n"
    )
    assert one_error(path) == (
        f"{path}: pipeline.devices: Input should be a valid integer (got '1:30')"
    )
    assert load_scenario(write(tmp_path, f"schema_version: 1\nname: no\n{PIPE}")).name == "no"
    path = write(tmp_path, f"schema_version: 1\nname: t\n{PIPE}hardware: {{comm_overlap: off}}\n")
    assert one_error(path) == (
        f"{path}: hardware.comm_overlap: Input should be a valid boolean (got 'off')"
    )
    numbers = "costs: {forward_ms: 1e3, backward_ms: 0x10, overhead_ms: 012}\n"
    costs = load_scenario(write(tmp_path, f"schema_version: 1\nname: t\n{PIPE}{numbers}")).costs
    assert (costs.forward_ms[0], costs.backward_ms[0], costs.overhead_ms) == (1000, 16, 12)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("name: !!set {a, b}", "line 1: the tag !!set is not allowed; YAML 1.2 core only"),
        ("? !!set {a, b}\n: 1", "line 1: the tag !!set is not allowed; YAML 1.2 core only"),
        ("name: !!python/object:os.system {}", "line 1: the tag !!python/object:os.system"),
        ("? [a, b]\n: 1", "line 1: a key must be a plain value"),
        ("a: &a [1, *a]", "line 1: a YAML alias refers to its own anchor"),
    ],
)
def test_yaml_tags_outside_the_core_schema_are_refused(tmp_path, text, problem):
    path = write(tmp_path, text + "\n")
    message = one_error(path)
    assert message.startswith(f"{path}: ") and problem in message


def test_a_key_given_twice_is_an_error(tmp_path):
    path = write(tmp_path, "schema_version: 1\nname: t\npipeline:\n  devices: 4\n  devices: 2\n")
    assert one_error(path) == f"{path}: not valid YAML: line 5: duplicate key 'devices'"
    path = write(tmp_path, '{"schema_version": 1, "name": "t", "name": "u"}', "s.json")
    assert one_error(path) == f"{path}: not valid JSON: duplicate key 'name'"
    path = write(tmp_path, "schema_version = 1\nschema_version = 1\n", "s.toml")
    assert one_error(path).startswith(f"{path}: not valid TOML: Cannot overwrite a value")


def test_schema_version_true_is_not_1(tmp_path):
    path = write(tmp_path, f"schema_version: true\nname: t\n{PIPE}")
    assert one_error(path) == f"{path}: schema_version: Input should be 1 (got True)"


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    lines = ["a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]"]
    for level in "bcdefghi":
        previous = chr(ord(level) - 1)
        lines.append(f"{level}: &{level} [{', '.join([f'*{previous}'] * 9)}]")
    path = write(tmp_path, "\n".join(lines) + "\n")  # 9^9 = 387 million leaves
    start = time.perf_counter()
    assert one_error(path) == (
        f"{path}: YAML aliases expand to more than 100,000 extra nodes; refusing to expand them"
    )
    assert time.perf_counter() - start < 1
    path = write(tmp_path, "a: &a [1, *a]\n")
    assert one_error(path) == f"{path}: line 1: a YAML alias refers to its own anchor"


@pytest.mark.parametrize(
    "name, text",
    [
        ("s.yaml", "[" * 5000 + "]" * 5000),
        ("s.yaml", "a:\n" + "".join(" " * k + "- \n" for k in range(1, 200))),
        ("s.json", "[" * 100000 + "]" * 100000),
        ("s.toml", "a = " + "[" * 5000 + "]" * 5000),
    ],
)
def test_deep_nesting_is_one_line(tmp_path, name, text):
    assert one_error(write(tmp_path, text, name)).endswith("nested deeper than 64 levels")


def test_files_that_are_not_utf8_text(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes("name: caf\u00e9\n".encode("latin-1"))
    assert one_error(path) == (
        f"{path}: not UTF-8 text (byte 0xe9 at offset 9); save the file as UTF-8"
    )


def test_only_regular_files_of_bounded_size_are_read(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    for path in (fifo, zero, folder):
        assert one_error(path) == f"{path}: not a regular file"
    big = write(tmp_path, "# " + "x" * (1 << 20) + "\n")
    assert one_error(big) == f"{big}: 1,048,579 bytes; at most 1,048,576 bytes are read"
    profile = write(tmp_path, f"schema_version: 1\nname: t\n{PIPE}costs: {{profile: /dev/zero}}\n")
    assert one_error(profile) == f"{profile}: costs.profile: /dev/zero: not a regular file"
    csv = write(
        tmp_path,
        "schema_version: 1\nname: t\npipeline: {schedule: csv, schedule_file: /dev/zero, "
        "devices: 2, microbatches: 1}\n",
    )
    assert one_error(csv) == f"{csv}: pipeline.schedule_file: /dev/zero: not a regular file"


# ---------------------------------------------------------------------------
# Numbers: finite, in range, and a size guard


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "costs: {forward_ms: .inf}",
            "costs.forward_ms: Input should be a finite number (got inf)",
        ),
        (
            "costs: {backward_ms: .nan}",
            "costs.backward_ms: Input should be a finite number (got nan)",
        ),
        ("costs: {forward_ms: [1, -.inf]}", "costs.forward_ms[1]: Input should be a finite number"),
        (
            "hardware: {link: {bandwidth_gbps: .inf}}",
            "hardware.link.bandwidth_gbps: Input should be a finite number (got inf)",
        ),
        (
            "costs: {forward_ms: 1e-300}",
            "costs.forward_ms: must be 0 or at least 1e-09 (got 1e-300)",
        ),
        (
            "costs: {activation_bytes: 1e300}",
            "costs.activation_bytes: Input should be less than or equal to 1000000000000000000",
        ),
    ],
)
def test_non_finite_and_out_of_range_numbers_name_the_field(tmp_path, text, message):
    path = write(tmp_path, f"schema_version: 1\nname: t\n{PIPE}{text}\n")
    assert one_error(path).startswith(f"{path}: {message}")


def test_non_finite_numbers_in_json_and_toml(tmp_path):
    path = write(tmp_path, json.dumps({**BASE, "costs": {"forward_ms": math.nan}}), "s.json")
    assert one_error(path) == f"{path}: costs.forward_ms: Input should be a finite number (got nan)"
    toml = "schema_version = 1\nname = 't'\n[pipeline]\nschedule = '1f1b'\ndevices = 2\n"
    path = write(tmp_path, toml + "microbatches = 2\n[costs]\nforward_ms = inf\n", "s.toml")
    assert one_error(path) == f"{path}: costs.forward_ms: Input should be a finite number (got inf)"


def test_astronomical_integers_are_refused(tmp_path):
    path = SCENARIOS / "llama-70b-4x8-h100.yaml"
    text = one_error(path, ["model.seq_len=1" + "0" * 400])
    assert text.startswith(f"{path}: model.seq_len: Input should be less than or equal to 9007")
    assert one_error(path, ["model.seq_len=10**400"]) == (
        f"{path}: model.seq_len: Input should be a valid integer (got '10**400')"
    )


def test_the_size_guard_answers_at_once_and_says_how_to_override(tmp_path):
    path = write(tmp_path, json.dumps(BASE), "s.json")
    start = time.perf_counter()
    assert one_error(path, ["pipeline.microbatches=1000000000000"]) == (
        f"{path}: pipeline: up to 1.20e+13 actions (4 devices x 1000000000000 microbatches x "
        "1 virtual stages x 3 kinds), over the limit of 10,000,000; raise pipeline.max_actions "
        "to run it anyway"
    )
    assert time.perf_counter() - start < 1
    assert one_error(path, ["pipeline.max_actions=95"]).startswith(
        f"{path}: pipeline: up to 96 actions (4 devices x 8 microbatches x 1 virtual stages x "
    )
    assert load_scenario(path, ["pipeline.max_actions=96"]).schedule.num_actions == 64
    forward = load_scenario(path, ["pipeline.max_actions=32", "pipeline.mode=forward"])
    assert forward.schedule.num_actions == 32


def test_a_schedule_file_with_absurd_indices_is_refused(tmp_path):
    csv = tmp_path / "mine.csv"
    pipeline = {"schedule": "csv", "schedule_file": "mine.csv", "devices": 2, "microbatches": 1}
    path = write(tmp_path, json.dumps({**BASE, "pipeline": pipeline}), "s.json")
    csv.write_text("0F0,0B0\n1F5,1B0\n")  # five cells at most (commas, newlines, one more)
    assert one_error(path) == (
        f"{csv}: index 5 is too large: a file of at most 5 actions has no stage or microbatch "
        "that large"
    )
    csv.write_text("0F0,0B0\n99999999999F0\n")  # built, it would hang on 10^11 stages
    assert one_error(path).startswith(f"{csv}: index 99999999999 is too large")


# ---------------------------------------------------------------------------
# Error text stays one readable line


def test_errors_are_one_printable_line_of_at_most_300_characters(tmp_path):
    path = write(tmp_path, json.dumps({**BASE, "name": "x" * 20000}), "s.json")
    text = one_error(path)
    assert text.startswith(f"{path}: name: String should have at most 200 characters (got 'xxx")
    path = write(tmp_path, json.dumps({**BASE, "bad\nkey\x1b[31m": 1}), "s.json")
    assert one_error(path).startswith(f"{path}: 'bad\\nkey\\x1b[31m': unknown key; allowed keys")
    error = ScenarioError("a" * 1000, picture="grid\nrows")
    assert str(error) == "a" * 297 + "...\ngrid\nrows"
    assert pickle.loads(pickle.dumps(error)).picture == "grid\nrows"


def test_with_schedule_leaves_wrong_types_to_validation():
    data, note = with_schedule({**BASE, "pipeline": {"virtual_stages": "two"}}, "zbv")
    assert data["pipeline"] == {"virtual_stages": "two", "schedule": "zbv"} and note == ""
    with pytest.raises(ScenarioError, match="pipeline: required section is missing"):
        with_schedule({"schema_version": 1}, "zbv")
    data, note = with_schedule({**BASE, "costs": {"forward_ms": "x"}}, "zbv")
    assert data["costs"]["forward_ms"] == "x" and data["pipeline"]["virtual_stages"] == 2
    data, _ = with_schedule({**BASE, "costs": {"forward_ms": 10**400}}, "zbv")  # no float
    assert data["costs"]["forward_ms"] == 10**400


DECODE = {
    "schema_version": 1,
    "name": "t",
    "pipeline": {"mode": "decode", "devices": 2, "microbatches": 2},
    "decode": {"tokens": 3, "prompt_tokens": 4},
    "costs": {"prefill_ms": 1.0, "decode_ms": 1.0},
}
SERVE = {
    "schema_version": 1,
    "name": "t",
    "pipeline": {"devices": 2},
    "costs": {"prefill_ms": 1, "decode_ms": 1},
    "serving": {"workload": {"rate": 1.0, "requests": 5, "prompt_tokens": 8}},
}


@pytest.mark.parametrize(
    "base, section, load, message",
    [
        (
            BASE,
            {"forward_ms": [1, 2]},
            load_scenario,
            "costs.forward_ms: has 2 entries, expected a number or 4 (devices * "
            "virtual_stages = 4 * 1)",
        ),
        (
            DECODE,
            {"decode_ms": [1, 2, 3]},
            load_scenario,
            "costs.decode_ms: has 3 entries, expected a number or 2 (one per device)",
        ),
        (
            SERVE,
            {"prefill_ms": [1, 2, 3]},
            load_serving,
            "costs.prefill_ms: has 3 entries, expected a number or 2 (one per stage of "
            "pipeline.devices)",
        ),
    ],
    ids=["train", "decode", "serve"],
)
def test_a_number_or_one_per_stage_says_how_many_it_expected(
    tmp_path, base, section, load, message
):
    data = {**base, "costs": {**base["costs"], **section}}
    path = write(tmp_path, json.dumps(data), "s.json")
    with pytest.raises(ScenarioError) as info:
        load(path)
    assert str(info.value) == f"{path}: {message}"


def test_a_number_stands_for_every_stage_and_a_list_is_taken_as_given(tmp_path):
    path = write(tmp_path, json.dumps({**DECODE, "costs": {"prefill_ms": [1, 2], "decode_ms": 3}}))
    built = load_scenario(path)
    assert built.costs.forward_ms == (1.0, 2.0, 3.0, 3.0, 3.0, 3.0)


@pytest.mark.parametrize(
    ("name", "mode"),
    [
        ("seed-pipelined.yaml", Mode.FORWARD),
        ("gpipe-vs-1f1b.yaml", Mode.TRAIN),
        ("decode-pipeline-fill.yaml", Mode.DECODE),
    ],
)
def test_a_scenario_says_its_mode_as_an_enum_that_reads_as_its_file_value(name, mode):
    scenario = load_scenario(Path(__file__).parents[2] / "scenarios" / name)
    assert scenario.mode is mode
    assert json.dumps(scenario.mode) == json.dumps(scenario.spec.pipeline.mode)
