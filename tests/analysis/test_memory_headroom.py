"""Runtime memory and headroom: what each GPU holds besides its tensors (CUDA context,
communication buffers, allocator fragmentation) and the share of its memory the OOM check
keeps free, in run, validate and plan alike."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from pipesim.analysis.plan import plan
from pipesim.analysis.plan.prune import capacity_reason, exceeds
from pipesim.cli import main
from pipesim.sim.metrics import Accounting
from tests.analysis.test_plan import SOURCE, small_base
from tests.analysis.test_plan_row import ONE_CANDIDATE

GIB = 2**30
SCENARIOS = Path(__file__).parents[2] / "scenarios"
LLAMA = str(SCENARIOS / "llama-70b-4x8-h100.yaml")


def invoke(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_runtime_is_the_fixed_part_plus_fragmentation_of_what_is_allocated():
    accounting = Accounting(
        (10 * GIB, 20 * GIB),
        memory_capacity_bytes=80 * GIB,
        runtime_memory_bytes=1 * GIB,
        fragmentation=0.25,
        memory_headroom=0.25,
    )
    # device 1: 20 GiB static + 4 GiB activations = 24 GiB allocated, a quarter of it lost
    # to the allocator (6 GiB) and 1 GiB of context and buffers: 7 GiB runtime, 31 GiB peak
    assert accounting.device_memory(1, 4 * GIB) == (7 * GIB, 31 * GIB)
    assert accounting.device_memory(0, 0.0) == (3.5 * GIB, 13.5 * GIB)
    assert accounting.usable_bytes == 60 * GIB  # 80 GiB less a quarter


def test_oom_flips_at_exactly_capacity_times_one_less_headroom():
    accounting = Accounting((0.0,), memory_capacity_bytes=80 * GIB, memory_headroom=0.25)
    assert not accounting.over_capacity(60 * GIB)
    assert accounting.over_capacity(np.nextafter(60 * GIB, np.inf))
    # the planner's walk asks the same question
    program_peak = np.array([48 * GIB])  # x 1.25 fragmentation = 60 GiB
    fragmented = Accounting(
        (0.0,), memory_capacity_bytes=80 * GIB, fragmentation=0.25, memory_headroom=0.25
    )
    assert not exceeds(program_peak, fragmented)
    assert exceeds(program_peak + 1024, fragmented)
    assert capacity_reason(fragmented) == (
        "exceed 60.0 GiB usable (80 GiB less 25% headroom) on some device"
    )
    assert not Accounting((0.0,), memory_headroom=0.5).over_capacity(1e18)  # unknown GPU


def _run_json(*sets: str) -> dict:
    args = [a for s in sets for a in ("--set", s)]
    result = invoke("run", LLAMA, *args, "--format", "json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_run_flags_oom_on_either_side_of_the_usable_memory():
    data = _run_json("hardware.memory_headroom=0")
    assert data["oom"] is False
    peak = max(d["peak_memory_bytes"] for d in data["per_device"])
    edge = 1 - peak / (80 * GIB)  # the headroom that leaves exactly the peak usable
    assert _run_json(f"hardware.memory_headroom={edge - 1e-9!r}")["oom"] is False
    over = _run_json(f"hardware.memory_headroom={edge + 1e-9!r}")
    assert over["oom"] is True
    assert [d["oom"] for d in over["per_device"]] == [
        d["peak_memory_bytes"] == peak for d in data["per_device"]
    ]


def test_runtime_keys_change_memory_and_nothing_of_the_timeline():
    plain = _run_json("hardware.runtime_bytes=0", "hardware.fragmentation=0")
    default = _run_json()
    assert default["makespan_ms"] == plain["makespan_ms"]
    for bare, d in zip(plain["per_device"], default["per_device"], strict=True):
        assert bare["runtime_memory_bytes"] == 0.0
        assert (
            bare["peak_memory_bytes"] == bare["static_memory_bytes"] + bare["peak_activation_bytes"]
        )
        assert d["peak_memory_bytes"] == pytest.approx(
            bare["peak_memory_bytes"] * 1.03 + GIB, rel=1e-12
        )


def _h100_base(**hardware) -> dict:
    base = small_base()
    base["hardware"] |= {"gpu": "h100-sxm", "fragmentation": 0.0, **hardware}
    return base


def test_plan_drops_a_layout_at_79_9_of_80_gib_under_5_percent_headroom():
    bare = plan(_h100_base(runtime_bytes=0.0), SOURCE, 8, ONE_CANDIDATE, top=3, confirm=0)
    (row,) = bare.results
    runtime = 79.9 * GIB - row.peak_memory_bytes  # tops the fullest GPU up to 79.9 GiB
    kept = plan(
        _h100_base(runtime_bytes=runtime, memory_headroom=0.0),
        SOURCE,
        8,
        ONE_CANDIDATE,
        top=3,
        confirm=1,
    )
    assert kept.scored == 1
    assert kept.results[0].peak_memory_bytes == pytest.approx(79.9 * GIB, rel=1e-12)
    dropped = plan(_h100_base(runtime_bytes=runtime), SOURCE, 8, ONE_CANDIDATE, top=3, confirm=0)
    assert dropped.scored == 0 and not dropped.results
    assert dropped.pruned == {
        "exceed 76.0 GiB usable (80 GiB less 5% headroom) on some device": dropped.space_size
    }


def test_plan_memory_headroom_option_and_explain_name_the_headroom(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(_h100_base()))
    args = ["plan", path, "--gpus", 8, *[a for s in ONE_CANDIDATE for a in ("--space", s)]]
    args += ["--confirm", 0, "--no-progress", "--explain", "--format", "json"]
    default = json.loads(invoke(*args).stdout)
    peak = default["results"][0]["peak_memory_bytes"] / GIB
    assert default["explain"]["winner"]["memory"] == (
        f"memory: {peak:.1f} of 76.0 GiB usable (80 GiB less 5% headroom)"
    )
    tight = json.loads(invoke(*args, "--memory-headroom", 0.75).stdout)
    assert tight["explain"]["winner"]["memory"] == (
        f"memory: {peak:.1f} of 20.0 GiB usable (80 GiB less 75% headroom)"
    )
    emitted = tmp_path / "best.yaml"
    assert invoke(*args, "--memory-headroom", 0.75, "--emit", emitted).exit_code == 0
    assert yaml.safe_load(emitted.read_text())["hardware"]["memory_headroom"] == 0.75
    refused = invoke(*args, "--memory-headroom", 0.8)  # 16 GiB: the layout does not fit
    assert refused.exit_code == 2
    assert (
        refused.stderr == f"pipesim: error: {path}: no candidate fits; nothing to emit or explain\n"
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("hardware.memory_headroom=1", "hardware.memory_headroom: Input should be less than 1"),
        (
            "hardware.memory_headroom=-0.1",
            "hardware.memory_headroom: Input should be greater than or equal to 0",
        ),
        ("hardware.fragmentation=1", "hardware.fragmentation: Input should be less than 1"),
        (
            "hardware.runtime_bytes=-1",
            "hardware.runtime_bytes: Input should be greater than or equal to 0",
        ),
    ],
)
def test_a_bad_memory_key_is_one_line_naming_the_file_and_field(setting, message):
    result = invoke("run", LLAMA, "--set", setting)
    assert result.exit_code == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"pipesim: error: {LLAMA}: {message}")


def test_a_bad_memory_headroom_option_is_one_line(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(small_base()))
    result = invoke("plan", path, "--gpus", 8, "--memory-headroom", 1, "--no-progress")
    assert result.exit_code == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line == (
        "pipesim: error: --memory-headroom: 1.0 is not in the range 0<=x<1 "
        "(see 'pipesim plan --help')"
    )


def test_run_table_shows_the_runtime_column_and_the_usable_memory():
    lines = invoke("run", LLAMA).stdout.splitlines()
    assert (
        "  peak memory       50.08 GiB on device 0 (fits; 76.00 GiB usable of 80.00 GiB, "
        "5% kept free)"
    ) in lines
    (header,) = [line for line in lines if line.split()[:1] == ["device"]]
    assert header.split()[-4:] == ["static", "runtime", "peak", "total"]
    (device_0,) = [line for line in lines if line.split()[:1] == ["0"]]
    # 32.37 static + 15.29 activations = 47.66 GiB; 3% of it and 1 GiB: 2.43 GiB runtime
    assert device_0.split()[-6:] == ["32.37", "GiB", "2.43", "GiB", "50.08", "GiB"]
