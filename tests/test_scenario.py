"""Scenario files: formats, overrides and one-line errors."""

import json
from pathlib import Path

import pytest

from pipesim.scenario.build import ScenarioError, load_scenario

SCENARIOS = Path(__file__).parent.parent / "scenarios"
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
        ("pipeline.mode=serve", "pipeline.mode: Input should be 'train' or 'forward'"),
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
