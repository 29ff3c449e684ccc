"""A serving run in which every request is rejected (a KV cache too small for any prompt):
its latencies are undefined, not zero (``None`` in the report, ``null`` in JSON, empty in
CSV, ``-`` in the table, and a note on stderr); its rates are defined and 0."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import yaml
from click.testing import CliRunner

from pipesim.cli import main
from pipesim.scenario.serving import load_serving, run_serving
from pipesim.serving.export import report_scalars
from pipesim.serving.metrics import latency_stats
from pipesim.serving.report import LatencyStats

LATENCIES = ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms", "itl_ms")
NOTE = "pipesim: note: no request completed (20 of 20 rejected)"


def scenario(folder: Path, kv_blocks: int = 3) -> Path:
    """20 Poisson requests of 100-token prompts on 3 stages whose KV cache holds 3 blocks:
    no prompt fits, so every request is rejected."""
    data = {
        "schema_version": 1,
        "name": "all-rejected",
        "pipeline": {"devices": 3},
        "costs": {"prefill_ms": [10, 20, 30], "decode_ms": [1, 2, 3]},
        "decode": {"tokens": 1, "prompt_tokens": 100},
        "serving": {
            "kv_blocks": kv_blocks,
            "workload": {"rate": 20.0, "requests": 20, "seed": 3, "prompt_tokens": 100},
            "slo": {"ttft_ms": 100, "tpot_ms": 10},
        },
    }
    path = folder / "rejected.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_no_sample_is_undefined_not_zero():
    assert latency_stats(np.array([])) == LatencyStats.undefined()
    assert latency_stats(np.array([np.nan, np.nan])) == LatencyStats(None, None, None, None)
    assert latency_stats(np.array([1.0]), np.array([0])) == LatencyStats.undefined()
    assert not LatencyStats.undefined().defined
    assert latency_stats(np.array([0.0])) == LatencyStats(0.0, 0.0, 0.0, 0.0)
    assert latency_stats(np.array([0.0])).defined


def test_the_library_report_of_an_all_rejected_run(tmp_path):
    report = run_serving(load_serving(str(scenario(tmp_path)))).report
    assert (report.requests, report.completed, report.rejected) == (20, 0, 20)
    for name in LATENCIES:
        assert getattr(report, name) == LatencyStats.undefined(), name
    # the rates are defined: nothing completed per second of the run
    assert report.throughput_rps == 0.0 and report.goodput_rps == 0.0
    assert report.output_tokens_per_second == 0.0
    assert report.duration_s > 0 and math.isfinite(report.duration_s)
    scalars = report_scalars(report)
    for name in LATENCIES:
        assert all(scalars[f"{name}_{k}"] is None for k in ("mean", "p50", "p90", "p99"))
    assert all(v is None or math.isfinite(v) for v in scalars.values())


def test_json_has_null_latencies_and_zero_rates(tmp_path):
    result = invoke("serve", scenario(tmp_path), "--format", "json")
    assert result.exit_code == 0, result.output
    # strict JSON: no NaN or Infinity anywhere
    data = json.loads(result.stdout, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    for name in LATENCIES:
        assert data[name] == {"mean": None, "p50": None, "p90": None, "p99": None}, name
    assert data["throughput_rps"] == 0.0 and data["goodput_rps"] == 0.0
    assert data["completed"] == 0 and data["rejected"] == 20
    assert result.stderr.startswith(NOTE) and "undefined" in result.stderr


def test_csv_leaves_latencies_empty(tmp_path):
    result = invoke("serve", scenario(tmp_path), "--format", "csv")
    assert result.exit_code == 0, result.output
    (row,) = csv.DictReader(io.StringIO(result.stdout))
    assert row["ttft_ms_p99"] == "" and row["e2e_ms_mean"] == "" and row["itl_ms_p50"] == ""
    assert row["goodput_rps"] == "0.0" and row["throughput_rps"] == "0.0"


def test_the_table_shows_a_dash_and_the_note(tmp_path):
    result = invoke("serve", scenario(tmp_path))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = lines.index("  latency (ms)               mean        p50        p90        p99")
    dashes = "".join(f"{'-':>11}" for _ in range(4))
    assert lines[start + 1 : start + 6] == [
        f"  {label:<20}{dashes}"
        for label in ("TTFT", "TPOT", "inter-token", "end to end", "queueing")
    ]
    assert "0.000 ms" not in result.stdout
    assert "  goodput             0.000 requests/s" in result.stdout
    (note,) = result.stderr.splitlines()
    assert note.startswith(NOTE) and "latencies are undefined" in note


def test_no_note_when_a_request_completes(tmp_path):
    result = invoke("serve", scenario(tmp_path, kv_blocks=65536))
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert "TTFT                          -" not in result.stdout
