"""Profile files: round trip, checks, and the Costs and Topology they give."""

import json

import pytest

from pipesim.scenario.profile import (
    HostOverhead,
    LinkFit,
    Profile,
    ProfileError,
    Spread,
    StageTiming,
    costs_from_profile,
    load_profile,
    profile_to_dict,
    save_profile,
    summarize,
    topology_from_profile,
)


def spread(ms: float) -> Spread:
    return Spread(ms, ms * 0.9, ms * 1.1, 20)


def two_stage_profile() -> Profile:
    stages = (
        StageTiming(0, {"F": spread(1.0), "B": spread(2.0)}, 1024.0),
        StageTiming(1, {"F": spread(1.5), "I": spread(1.25), "W": spread(0.75)}, 2048.0),
    )
    links = (LinkFit("gloo", 80.0, 4.0, ((4096.0, 0.081), (1e6, 0.33))),)
    return Profile(stages, links, HostOverhead(0.2, 0.3, 40), {"device": "cpu", "torch": "2.13.0"})


def test_summarize_gives_numpy_percentiles():
    assert summarize(list(range(1, 11))) == Spread(5.5, 1.9, 9.1, 10)


def test_round_trip(tmp_path):
    path = tmp_path / "p.json"
    save_profile(two_stage_profile(), path)
    assert load_profile(path) == two_stage_profile()
    data = json.loads(path.read_text())
    assert data["format"] == "pipesim-profile" and data["version"] == 1
    assert data["stages"][1]["I"] == {
        "median_ms": 1.25,
        "p10_ms": 1.125,
        "p90_ms": 1.375,
        "samples": 20,
    }


def test_costs_from_profile_fills_split_and_full_backward():
    costs = costs_from_profile(two_stage_profile(), 2)
    assert costs.forward_ms == (1.0, 1.5)
    assert costs.backward_ms == (2.0, 2.0)  # stage 1: B = I + W
    assert costs.backward_input_ms == (1.0, 1.25)  # stage 0: I = W = B / 2
    assert costs.backward_weight_ms == (1.0, 0.75)
    assert costs.activation_bytes == (1024.0, 2048.0)
    assert costs.overhead_ms == 0.2


def test_a_one_stage_profile_applies_to_every_stage():
    one = Profile((StageTiming(0, {"F": spread(3.0), "B": spread(6.0)}),))
    costs = costs_from_profile(one, 4)
    assert costs.forward_ms == (3.0,) * 4 and costs.backward_ms == (6.0,) * 4
    assert costs.overhead_ms == 0.0


def test_stage_count_mismatch_is_one_clear_error():
    with pytest.raises(ProfileError, match="the profile has 2 stages, the scenario needs 3"):
        costs_from_profile(two_stage_profile(), 3)


def test_topology_uses_the_fitted_hop_else_the_link():
    assert topology_from_profile(two_stage_profile(), 2).link(0, 1).latency_us == pytest.approx(
        300.0
    )
    no_host = Profile(two_stage_profile().stages, two_stage_profile().links)
    link = topology_from_profile(no_host, 2).link(0, 1)
    assert (link.latency_us, link.bandwidth_gbps) == (80.0, 4.0)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"format": "other"}, "not a pipesim profile"),
        ({"format": "pipesim-profile", "version": 9}, "profile version 9"),
        (
            {"format": "pipesim-profile", "version": 1, "stages": [{"stage": 0}]},
            "needs at least a forward",
        ),
        (
            {"format": "pipesim-profile", "version": 1, "stages": [{"stage": 1, "F": {}}]},
            "stages.*0",
        ),
    ],
)
def test_bad_profiles_are_rejected(tmp_path, data, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError, match=message):
        load_profile(path)


def test_missing_file_names_it(tmp_path):
    with pytest.raises(ProfileError, match="no such profile file"):
        load_profile(tmp_path / "none.json")


def test_infinite_bandwidth_is_stored_as_null():
    profile = Profile((StageTiming(0, {"F": spread(1.0)}),), (LinkFit("ideal", 0.0, float("inf")),))
    assert profile_to_dict(profile)["links"][0]["bandwidth_gbps"] is None


def profile_with(**changes) -> dict:
    data = profile_to_dict(two_stage_profile())
    for path, value in changes.items():
        target = data
        *parents, last = path.split("__")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[last] = value
    return data


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"stages__0__F__median_ms": float("inf")}, "stages[0].F.median_ms: inf is not a finite"),
        ({"stages__0__F__p90_ms": float("nan")}, "stages[0].F.p90_ms: nan is not a finite number"),
        ({"stages__0__F__median_ms": "1"}, "stages[0].F.median_ms: expected a number, got str"),
        ({"stages__0__B__samples": True}, "stages[0].B.samples: expected a number, got bool"),
        ({"stages__1__activation_bytes": 1e300}, "stages[1].activation_bytes: 1e+300 is not"),
        ({"stages__0__stage": -1}, "stages[0].stage: -1 is not a finite number in [0, 9"),
        ({"stages": 5}, "stages must be a list"),
        ({"links__0__bandwidth_gbps": float("inf")}, "links[0].bandwidth_gbps: inf is not"),
        ({"links__0__points": [[1, 2, 3]]}, "links[0].points: must be a list of [bytes, ms] pairs"),
        ({"host": {"overhead_ms": -1, "hop_ms": 0}}, "host.overhead_ms: -1 is not a finite"),
        ({"host": [1]}, "host needs numbers overhead_ms and hop_ms"),
        ({"provenance": [1]}, "provenance must be a mapping"),
    ],
)
def test_profile_numbers_are_finite_and_of_the_right_type(tmp_path, changes, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(profile_with(**changes)))
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert str(info.value).startswith(f"{path}: {message}")


def test_only_regular_utf8_json_files_are_read(tmp_path):
    with pytest.raises(ProfileError, match="^/dev/zero: not a regular file$"):
        load_profile("/dev/zero")
    path = tmp_path / "p.json"
    path.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(ProfileError, match=r"cannot read profile \(nested too deeply\)"):
        load_profile(path)
    path.write_bytes(b'{"format": "caf\xe9"}')
    with pytest.raises(ProfileError, match=r"not UTF-8 text \(byte 0xe9 at offset 15\)"):
        load_profile(path)
