"""``vary``: a scenario with some keys set, by the key paths ``--set`` takes, refusing what
``--set`` refuses in the same words."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from pipesim.scenario.build import apply_overrides, parse_spec, read_mapping
from pipesim.scenario.schema import ScenarioError
from pipesim.scenario.vary import KEY_PATHS, vary

GPIPE = str(Path(__file__).parents[2] / "scenarios" / "gpipe-vs-1f1b.yaml")


def set_error(base: dict, item: str) -> str:
    """The one line ``pipesim run --set ITEM`` gives for ``base``."""
    with pytest.raises(ScenarioError) as raised:
        parse_spec(apply_overrides(base, [item]), GPIPE)
    return str(raised.value)


def test_nested_keys_are_set_sections_made_and_the_input_left_alone():
    base = read_mapping(GPIPE)
    before = copy.deepcopy(base)
    varied = vary(
        base,
        {
            "pipeline.microbatches": 16,
            "pipeline.schedule": "zbv",
            "hardware.link": {"latency_us": 5.0, "bandwidth_gbps": 100.0},
            "parallel.zero_stage": 0,  # a section the file does not have
            "description": "varied",
        },
        source=GPIPE,
    )
    assert base == before
    assert varied["pipeline"]["microbatches"] == 16 and varied["pipeline"]["schedule"] == "zbv"
    assert varied["hardware"]["link"] == {"latency_us": 5.0, "bandwidth_gbps": 100.0}
    assert varied["parallel"] == {"zero_stage": 0} and varied["description"] == "varied"
    assert list(varied) == [*base, "parallel"]  # keys keep their places, new ones last
    assert list(varied["pipeline"])[: len(base["pipeline"])] == list(base["pipeline"])


def test_the_same_mapping_as_set_gives():
    base = read_mapping(GPIPE)
    items = {"pipeline.microbatches": 16, "costs.forward_ms": [1.0, 2.0, 1.0, 2.0]}
    by_set = apply_overrides(base, [f"{key}={value}" for key, value in items.items()])
    assert vary(base, items) == by_set
    assert parse_spec(vary(base, items), GPIPE) == parse_spec(by_set, GPIPE)


def test_drop_removes_a_key_where_present():
    base = read_mapping(GPIPE)
    base["pipeline"]["memory_limit_bytes"] = 1e9
    varied = vary(base, {}, drop=("pipeline.memory_limit_bytes", "model.microbatch_size"))
    assert "memory_limit_bytes" not in varied["pipeline"] and "model" not in varied
    assert base["pipeline"]["memory_limit_bytes"] == 1e9


@pytest.mark.parametrize(
    "key", ["pipeline.bogus", "bogus", "hardware.speed", "parallel.tensor_size"]
)
def test_an_unknown_key_is_the_one_line_set_gives(key):
    base = read_mapping(GPIPE)
    with pytest.raises(ScenarioError) as raised:
        vary(base, {key: 3}, source=GPIPE)
    message = str(raised.value)
    assert message == set_error(base, f"{key}=3")
    assert "\n" not in message and "unknown key; allowed keys here: " in message


def test_a_key_through_a_value_is_refused_in_one_line():
    base = read_mapping(GPIPE)
    with pytest.raises(ScenarioError, match=r"^x\.yaml: pipeline\.devices\.x: devices is not"):
        vary(base, {"pipeline.devices.x": 3}, source="x.yaml")
    assert set_error(base, "hardware.link.speed=3").endswith(": link is not a section")
    with pytest.raises(ScenarioError, match=r"^x\.yaml: hardware\.link\.speed: link is not a"):
        vary(base, {"hardware.link.speed": 3}, source="x.yaml")  # the file's link is a name
    with pytest.raises(ScenarioError, match=r"hardware\.intra_node_link\.speed: unknown key"):
        vary(base, {"hardware.intra_node_link.speed": 3}, source="x.yaml")
    with pytest.raises(ScenarioError, match="unknown key"):
        vary(base, {}, drop=("pipeline.nope",))


def test_every_key_path_of_the_schema_is_known():
    assert ("pipeline", "microbatches") in KEY_PATHS
    assert ("hardware", "intra_node_link", "bandwidth_gbps") in KEY_PATHS
    assert ("model", "efficiency", "max_fraction") in KEY_PATHS
    assert ("pipeline", "microbatches", "x") not in KEY_PATHS


def test_a_whole_section_too_deep_is_refused():
    deep: object = 1
    for _ in range(80):
        deep = [deep]
    with pytest.raises(ScenarioError, match="nested deeper than"):
        vary(read_mapping(GPIPE), {"costs.forward_ms": deep}, source=GPIPE)
