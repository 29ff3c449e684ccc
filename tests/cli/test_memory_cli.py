"""Memory in every command that reports it: static memory, peak memory (static plus the
peak activations) and the OOM flag, under the names and values ``pipesim run`` gives.

Llama-2-70B on 4 x 8 H100 (TP 8, PP 4), 32 microbatches: GPipe holds all 32 activations
at once (128.28 GiB on device 3 of an 80 GiB GPU: out of memory), 1F1B at most 4 (fits).
"""

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim.cli import main

SCENARIOS = Path(__file__).parents[2] / "scenarios"
LLAMA = str(SCENARIOS / "llama-70b-4x8-h100.yaml")
GPIPE = str(SCENARIOS / "gpipe-vs-1f1b.yaml")  # hand-typed costs: no static memory
GIB = 2**30
H100 = 80 * GIB
MEMORY_KEYS = (
    "peak_activation_bytes",
    "static_memory_bytes",
    "runtime_memory_bytes",
    "peak_memory_bytes",
)


def invoke(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def run_devices() -> dict[str, list[dict]]:
    """``pipesim run``'s per-device report of each schedule, one chunk per device."""
    devices = {}
    for name in ("gpipe", "1f1b"):
        schedule = ["--set", f"pipeline.schedule={name}", "--set", "pipeline.virtual_stages=1"]
        result = invoke("run", LLAMA, *schedule, "--format", "json")
        data = json.loads(result.stdout)
        assert data["memory_capacity_bytes"] == H100
        devices[name] = data["per_device"]
    return devices


@pytest.fixture(scope="module")
def compare_json() -> dict[str, dict]:
    result = invoke("compare", LLAMA, "--schedules", "gpipe,1f1b", "--format", "json")
    return {row["schedule"]: row for row in json.loads(result.stdout)}


def test_compare_json_has_static_and_total_memory_and_oom_as_run_reports_them(
    compare_json, run_devices
):
    gpipe, one_f_one_b = compare_json["gpipe"], compare_json["1f1b"]
    assert gpipe["oom"] is True and one_f_one_b["oom"] is False
    for name, row in compare_json.items():
        assert row["memory_capacity_bytes"] == H100
        for key in MEMORY_KEYS:
            assert row[key] == [d[key] for d in run_devices[name]], (name, key)
        assert [d["oom"] for d in run_devices[name]] == [row["oom"]] * 4
        parts = zip(
            row["static_memory_bytes"],
            row["peak_activation_bytes"],
            row["runtime_memory_bytes"],
            strict=True,
        )
        assert row["peak_memory_bytes"] == [static + kept + rt for static, kept, rt in parts]
    assert round(max(gpipe["peak_memory_bytes"]) / GIB, 2) == 128.28
    assert round(max(one_f_one_b["peak_memory_bytes"]) / GIB, 2) == 45.78


def test_compare_csv_has_the_same_memory_fields(compare_json):
    result = invoke("compare", LLAMA, "--schedules", "gpipe,1f1b", "--format", "csv")
    rows = {row["schedule"]: row for row in csv.DictReader(io.StringIO(result.stdout))}
    assert [rows["gpipe"]["oom"], rows["1f1b"]["oom"]] == ["True", "False"]
    for name, row in rows.items():
        assert float(row["memory_capacity_bytes"]) == H100
        for key in MEMORY_KEYS:
            values = [float(v) for v in row[key].split(";")]
            assert values == pytest.approx(compare_json[name][key], abs=0.5), (name, key)


def test_compare_table_shows_peak_memory_static_and_the_verdict():
    result = invoke("compare", LLAMA, "--schedules", "gpipe,1f1b")
    header, gpipe, one_f_one_b = result.stdout.splitlines()
    assert header.split("  samples/s  ")[1] == (
        "peak memory      static on GPU  peak activations per device"
    )
    assert gpipe.split()[5:12] == ["128.28", "GiB", "32.37", "GiB", "OOM", "88.88", "GiB"]
    assert one_f_one_b.split()[5:12] == ["45.78", "GiB", "32.37", "GiB", "fits", "11.11", "GiB"]


def test_compare_without_a_model_keeps_to_activations_in_the_table_and_zeros_in_json():
    table = invoke("compare", GPIPE, "--schedules", "gpipe,1f1b").stdout.splitlines()
    assert table[0] == (
        "schedule   makespan ms   bubble  span bubble    samples/s  peak activations per device"
    )
    rows = json.loads(invoke("compare", GPIPE, "--schedules", "gpipe", "--format", "json").stdout)
    assert rows[0]["static_memory_bytes"] == [0.0] * 4
    assert rows[0]["peak_memory_bytes"] == rows[0]["peak_activation_bytes"] == [800 * 2**20] * 4
    assert rows[0]["oom"] is False and rows[0]["memory_capacity_bytes"] is None


def test_sweep_shows_peak_memory_static_and_oom_per_point(tmp_path, run_devices):
    args = ["sweep", LLAMA, "--grid", "pipeline.schedule=gpipe,1f1b", "--jobs", "1"]
    args += ["--set", "pipeline.virtual_stages=1", "--no-progress"]
    assert invoke(*args).stdout.splitlines() == [
        "pipeline.schedule  makespan ms  bubble  samples/s  peak memory     static  on GPU",
        "            gpipe     4830.572  0.1000        6.6   128.28 GiB  32.37 GiB     OOM",
        "             1f1b     4830.572  0.1000        6.6    45.78 GiB  32.37 GiB    fits",
    ]
    invoke(*args, "-o", str(tmp_path / "sweep.csv"))
    rows = list(csv.DictReader((tmp_path / "sweep.csv").open()))
    for row, name in zip(rows, ("gpipe", "1f1b"), strict=True):
        devices = run_devices[name]
        assert row["oom"] == str(any(d["oom"] for d in devices))
        assert float(row["memory_capacity_bytes"]) == H100
        for key in MEMORY_KEYS:
            assert float(row[f"{key}_max"]) == max(d[key] for d in devices), (name, key)
