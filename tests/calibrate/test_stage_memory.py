"""Stage shapes that cannot be allocated are a user's mistake, not a traceback (issue 18).

``profile --hidden 4294967296`` once reached torch, whose tensor size overflowed a C long
(a TypeError or RuntimeError traceback); a stage of 40 GB on a smaller machine met the
allocator's RuntimeError. The shape is now refused before torch sizes anything when it
passes 1 TiB, and a stage that does not fit where it runs is one line naming its shape.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from pipesim.calibrate import harness
from pipesim.calibrate.ops import MAX_STAGE_BYTES, StageSpec
from pipesim.cli import main

SCENARIO = "scenarios/gpipe-vs-1f1b.yaml"


@pytest.mark.parametrize(
    "shape",
    [
        {"ops": "mlp", "hidden": 2**32},
        {"ops": "mlp", "hidden": 2**16, "layers": 2**10},
        {"ops": "transformer", "hidden": 64, "heads": 4, "seq": 2**22},
        {"ops": "synthetic", "hidden": 2**30, "batch": 2**20},
    ],
    ids=["wide", "deep", "long-attention", "synthetic-input"],
)
def test_a_stage_past_a_terabyte_is_refused_naming_its_shape(shape):
    with pytest.raises(ValueError, match=r"hidden=\d+, layers=\d+, .*at most 1.1e\+12 \(1 TiB\)"):
        StageSpec(**shape)


def test_a_real_stage_shape_is_well_under_the_limit():
    spec = StageSpec("transformer", hidden=8192, layers=4, batch=1, seq=4096, heads=64)
    assert spec.memory_bytes < MAX_STAGE_BYTES // 4


def test_profile_refuses_a_huge_width_in_one_line_and_writes_nothing(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "p.json"
    args = ["profile", SCENARIO, "--set", "pipeline.devices=2", "--hidden", str(2**32)]
    result = CliRunner().invoke(main, [*args, "--no-links", "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("pipesim: error: hidden=4294967296, layers=2, batch=8")
    assert result.stderr.count("\n") == 1
    assert not out.exists()


def test_a_stage_the_allocator_refuses_is_one_line_naming_the_stage(monkeypatch):
    pytest.importorskip("torch")

    def refuse(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 4e10 bytes")

    monkeypatch.setattr(harness, "time_stage", refuse)
    with pytest.raises(harness.HarnessError) as caught:
        harness.profile_stages([StageSpec("mlp", hidden=8)])
    assert str(caught.value) == (
        "stage 0 (ops=mlp, hidden=8, layers=1, batch=1, seq=1, heads=1, dtype=float32) does "
        "not fit in cpu memory: DefaultCPUAllocator: can't allocate memory: you tried 4e10 bytes"
    )


def test_another_runtime_error_of_the_harness_is_not_taken_for_memory(monkeypatch):
    pytest.importorskip("torch")

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(harness, "time_stage", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        harness.profile_stages([StageSpec("mlp", hidden=8)])
