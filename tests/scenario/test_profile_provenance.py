"""A profile's provenance is free-form, but a profile made from it (``fit --profile``)
writes it again: a NaN, an infinity, an integer no float holds or nesting past the
loader's depth is refused when the profile is read, naming the file and the key, so that
no command writes a profile that is not JSON (issue 18)."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from pipesim.cli import main
from pipesim.scenario.profile import ProfileError, load_profile
from pipesim.schedules import get_schedule
from tests.cli.fuzz.corpus import run_file

PROFILE = {
    "format": "pipesim-profile",
    "version": 1,
    "provenance": {"source": "pipesim profile", "traces": ["r0.json"]},
    "stages": [{"stage": 0, "F": {"median_ms": 1.0, "p10_ms": 1.0, "p90_ms": 1.0, "samples": 3}}],
}


def nested(depth: int):
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("provenance", "expected"),
    [
        ({"source": math.nan}, "provenance.source: nan is not a finite number"),
        ({"traces": ["r0.json", math.inf]}, "provenance.traces[1]: inf is not a finite number"),
        ({"date": -(10**400)}, "provenance.date: an integer of 401 digits; at most 308"),
        ({"shapes": nested(70)}, "provenance: nested deeper than 64 levels"),
        ([], "provenance must be a mapping"),
    ],
    ids=["nan", "infinity-in-list", "huge-integer", "deep", "list"],
)
def test_a_provenance_no_json_writer_can_repeat_is_refused(tmp_path, provenance, expected):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**PROFILE, "provenance": provenance}))
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert str(caught.value) == f"{path}: {expected}"


def test_a_plain_provenance_loads_unchanged(tmp_path):
    path = tmp_path / "p.json"
    provenance = {"source": "x", "n": 10**300, "flags": [True, None, 1.5], "meta": {"a": "b"}}
    path.write_text(json.dumps({**PROFILE, "provenance": provenance}))
    assert load_profile(path).provenance == provenance


def test_fit_refuses_a_base_profile_with_a_nan_provenance_and_writes_nothing(tmp_path):
    base = tmp_path / "p.json"
    base.write_text(json.dumps({**PROFILE, "provenance": {"source": math.nan}}))
    run, out = tmp_path / "run.json", tmp_path / "fitted.json"
    run.write_bytes(run_file(get_schedule("1f1b", 2, 2)))
    result = CliRunner().invoke(main, ["fit", str(run), "-o", str(out), "--profile", str(base)])
    assert result.exit_code == 2, result.output
    expected = f"pipesim: error: {base}: provenance.source: nan is not a finite number\n"
    assert result.stderr == expected
    assert not out.exists()
