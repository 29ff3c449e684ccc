"""Sweeps: grid parsing, one row per point in grid order, error rows, Dask = local, CLI."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from pipesim.analysis.sweep import SweepError, grid_points, pareto_front, parse_grid, run_sweep
from pipesim.cli import main
from pipesim.scenario.build import read_mapping

SCENARIOS = Path(__file__).parents[2] / "scenarios"
GPIPE = str(SCENARIOS / "gpipe-vs-1f1b.yaml")  # 4 devices, F 1 ms, B 2 ms, 100 MiB per microbatch
GPT = str(SCENARIOS / "gpt-nvlink-vs-pcie.yaml")  # costs derived from a model section
GRID = ["pipeline.microbatches=4,8", "pipeline.schedule=gpipe,1f1b,interleaved-1f1b"]


def sweep(grid=GRID, **options):
    return run_sweep(read_mapping(GPIPE), GPIPE, parse_grid(grid), **options)


def test_grid_values_are_yaml_and_brackets_keep_their_commas():
    axes = parse_grid(["pipeline.microbatches=4, 8", "costs.forward_ms=[1,2,3,4],1.5"])
    assert [(a.key, a.values) for a in axes] == [
        ("pipeline.microbatches", (4, 8)),
        ("costs.forward_ms", ([1, 2, 3, 4], 1.5)),
    ]
    assert grid_points(axes) == [("4", "[1,2,3,4]"), ("4", "1.5"), ("8", "[1,2,3,4]"), ("8", "1.5")]
    for bad in (["pipeline.microbatches"], ["=4"], ["a=1,,2"]):
        with pytest.raises(SweepError):
            parse_grid(bad)
    with pytest.raises(SweepError, match="given twice"):
        parse_grid(["a=1", "a=2"])
    # Read as YAML 1.2, like --set: no base-60 numbers, no yes/no booleans.
    assert parse_grid(["name=1:30,no,true"])[0].values == ("1:30", "no", True)


def test_one_row_per_point_in_grid_order_with_closed_form_values():
    frame = sweep(jobs=1)
    assert list(frame.columns[:4]) == [
        "pipeline.microbatches",
        "pipeline.schedule",
        "scenario",
        "schedule",
    ]
    assert frame.columns[-1] == "error"
    assert list(zip(frame["pipeline.microbatches"], frame["pipeline.schedule"], strict=True)) == [
        (4, "gpipe"),
        (4, "1f1b"),
        (4, "interleaved-1f1b"),
        (8, "gpipe"),
        (8, "1f1b"),
        (8, "interleaved-1f1b"),
    ]
    ok = frame[frame.error == ""]
    # (m + p - 1)(F + B) and (p - 1)/(m + p - 1) for GPipe and 1F1B; interleaved runs with
    # 2 chunks of half the cost each: (m v + p - 1)(F + B) / v
    assert list(ok.makespan_ms) == [21.0, 21.0, 16.5, 33.0, 33.0, 28.5]
    assert np.allclose(ok.bubble_fraction[[0, 1, 3, 4]], [3 / 7, 3 / 7, 3 / 11, 3 / 11])
    assert list(ok.stages) == [4, 4, 8, 4, 4, 8]
    assert list(ok.peak_activation_bytes_max[[0, 1, 3, 4]]) == [
        n * 100 * 2**20 for n in (4, 4, 8, 4)
    ]
    assert str(frame["devices"].dtype) == "Int64"


def test_an_invalid_point_is_a_row_with_its_error():
    frame = sweep(["pipeline.microbatches=9,8", "pipeline.schedule=interleaved-1f1b"], jobs=1)
    bad = frame[frame.error != ""]
    assert list(bad["pipeline.microbatches"]) == [9]
    assert bad.error.iloc[0] == (
        "pipeline: interleaved-1f1b runs microbatches in rounds = max(1, microbatches // "
        "devices) = 2 of equal size: microbatches=9 with devices=4 leaves 1 over; use 8 or 10"
    )
    assert bad.makespan_ms.isna().all()


def test_a_schedule_grid_over_a_model_cuts_the_model_finer():
    # As in `pipesim compare`: zbv runs 2 chunks per device, costs derived from the model.
    frame = run_sweep(read_mapping(GPT), GPT, parse_grid(["pipeline.schedule=gpipe,zbv"]))
    assert list(frame.error) == ["", ""]
    assert list(frame.stages) == [4, 8]
    assert frame.makespan_ms[1] < frame.makespan_ms[0]


def test_processes_give_the_same_frame_as_one_process():
    pd.testing.assert_frame_equal(sweep(jobs=2), sweep(jobs=1))


def test_progress_counts_every_point():
    seen = []
    sweep(jobs=1, progress=seen.append)
    assert sum(seen) == 6


def test_dask_local_cluster_gives_the_same_frame():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        remote = sweep(executor="dask", scheduler=cluster.scheduler_address)
    pd.testing.assert_frame_equal(remote, sweep(jobs=1))


def test_pareto_front():
    frame = pd.DataFrame(
        {
            "peak_activation_bytes_max": [1.0, 2.0, 2.0, 3.0, 1.0, np.nan],
            "samples_per_second": [10.0, 20.0, 15.0, 20.0, 5.0, 99.0],
            "error": ["", "", "", "", "", "failed"],
        }
    )
    assert list(pareto_front(frame)) == [True, True, False, False, False, False]


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def test_cli_writes_csv_json_and_plot(tmp_path):
    out, plot = tmp_path / "r.csv", tmp_path / "s.png"
    args = ["sweep", GPIPE, "--grid", GRID[0], "--grid", GRID[1], "--jobs", "1"]
    result = invoke(*args, "-o", str(out), "--plot", str(plot))
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and result.stderr == ""  # no bar: stderr is not a terminal
    assert pd.read_csv(out, keep_default_na=False).shape[0] == 6
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    as_json = tmp_path / "r.json"
    invoke(*args, "-o", str(as_json), "--no-progress")
    rows = json.loads(as_json.read_text())
    assert [r["makespan_ms"] for r in rows] == [21.0, 21.0, 16.5, 33.0, 33.0, 28.5]
    printed = invoke(*args).stdout
    assert printed.splitlines()[0].split()[:2] == ["pipeline.microbatches", "pipeline.schedule"]


def test_cli_prints_a_narrow_table_in_human_units():
    result = invoke(
        "sweep",
        GPIPE,
        "--grid",
        "pipeline.microbatches=4,9",
        "--grid",
        "pipeline.schedule=1f1b,interleaved-1f1b",
        "--jobs",
        "1",
    )
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.splitlines() == [
        "pipeline.microbatches  pipeline.schedule  makespan ms  bubble  samples/s  peak activations  error",
        "                    4               1f1b       21.000  0.4286      190.5        400.00 MiB",
        "                    4   interleaved-1f1b       16.500  0.2727      242.4        400.00 MiB",
        "                    9               1f1b       36.000  0.2500      250.0        400.00 MiB",
        "                    9   interleaved-1f1b            -       -          -                 -  "
        "pipeline: interleaved-1f1b runs microbatches in rounds = max(1, microbatches // "
        "devices) = 2 of equal size: microbatches=9 with devices=4 leaves 1 over; use 8 or 10",
    ]


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path):
    result = invoke("sweep", GPIPE, "--grid", "pipeline.microbatches")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("pipesim: error: --grid 'pipeline.microbatches': expected")
    result = invoke(
        "sweep", GPIPE, "--grid", "pipeline.microbatches=4", "-o", str(tmp_path / "r.txt")
    )
    assert result.exit_code == 2 and "allowed: .csv, .parquet, .json" in result.stderr
    result = invoke("sweep", GPIPE, "--grid", "pipeline.microbatches=4", "--executor", "dask")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == ("pipesim: error: --executor dask needs --scheduler tcp://HOST:PORT\n")


def test_cli_writes_parquet(tmp_path):
    pytest.importorskip("pyarrow")
    out = tmp_path / "r.parquet"
    result = invoke("sweep", GPIPE, "--grid", "pipeline.microbatches=4,8", "-o", str(out))
    assert result.exit_code == 0, result.output
    frame = pd.read_parquet(out)
    assert list(frame["pipeline.microbatches"]) == [4, 8]
    assert list(frame.makespan_ms) == [21.0, 33.0]


def test_cli_parquet_without_pyarrow_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr("pipesim.cli.sweep._has_parquet", lambda: False)
    out = tmp_path / "r.parquet"
    result = invoke("sweep", GPIPE, "--grid", "pipeline.microbatches=4", "-o", str(out))
    assert result.exit_code == 2
    assert result.stderr == (
        f"pipesim: error: -o {out}: writing parquet needs pyarrow: pip install 'pipesim[parquet]'\n"
    )
    assert not out.exists()


def test_grid_columns_keep_each_value_as_typed_in_csv_json_and_parquet(tmp_path):
    pytest.importorskip("pyarrow")
    grid = [
        "costs.forward_ms=1,[1,2,3,4],2.5",  # a list among numbers: the text as typed
        "name=a,1",  # a string and a number: the text as typed
        "pipeline.microbatches=4,null",  # integers with a hole stay integers
    ]
    args = ["sweep", GPIPE, *(f"--grid={g}" for g in grid), "--no-progress"]
    for suffix in (".csv", ".json", ".parquet"):
        out = tmp_path / f"r{suffix}"
        result = invoke(*args, "-o", str(out))
        assert (result.exit_code, result.stderr) == (0, ""), result.output
    text = (tmp_path / "r.csv").read_text().splitlines()
    assert [line.split(",", 4)[:3] for line in text[:3]] == [
        ["costs.forward_ms", "name", "pipeline.microbatches"],
        ["1", "a", "4"],
        ["1", "a", ""],
    ]
    assert '"[1,2,3,4]",a,4,' in text[5]
    rows = json.loads((tmp_path / "r.json").read_text())
    assert [r["costs.forward_ms"] for r in rows[::4]] == ["1", "[1,2,3,4]", "2.5"]
    assert [r["pipeline.microbatches"] for r in rows[:2]] == [4, None]
    frame = pd.read_parquet(tmp_path / "r.parquet")
    assert list(frame["costs.forward_ms"]) == ["1"] * 4 + ["[1,2,3,4]"] * 4 + ["2.5"] * 4
    assert list(frame["name"][:4]) == ["a", "a", "1", "1"]
    assert list(frame["pipeline.microbatches"][:2].fillna(-1)) == [4, -1]
    assert str(frame["pipeline.microbatches"].dtype) == "Int64"
    assert frame.error[2] == "name: Input should be a valid string (got 1)"


def test_integers_and_fractions_in_one_grid_key_are_written_as_given(tmp_path):
    out = tmp_path / "r.csv"
    grid = ["--grid", "costs.forward_ms=1,2.5", "--grid", "pipeline.microbatches=4,8"]
    result = invoke("sweep", GPIPE, *grid, "-o", str(out))
    assert result.exit_code == 0, result.output
    cells = [line.split(",")[:2] for line in out.read_text().splitlines()[1:]]
    assert cells == [["1", "4"], ["1", "8"], ["2.5", "4"], ["2.5", "8"]]
    frame = sweep(["costs.forward_ms=1,2.5", "pipeline.microbatches=4,8"])
    assert [type(v) for v in frame["costs.forward_ms"][::2]] == [int, float]
    assert str(frame["pipeline.microbatches"].dtype) == "int64"
    assert list(frame.makespan_ms) == [21.0, 33.0, 31.5, 49.5]


def test_a_hole_in_a_grid_key_prints_as_null():
    grid = ["--grid", "pipeline.memory_limit_bytes=null,8589934592"]
    result = invoke("sweep", GPIPE, *grid, "--grid", "pipeline.schedule=zb-auto")
    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.stdout.splitlines()] == [
        "pipeline.memory_limit_bytes",
        "null",
        "8589934592",
    ]


def test_a_number_too_large_to_hold_is_refused_in_one_line(tmp_path):
    out = tmp_path / "r.csv"
    for value in ("1e400", "[1,-1e400,1,1]"):
        result = invoke("sweep", GPIPE, "--grid", f"costs.forward_ms=1,{value}", "-o", str(out))
        assert result.exit_code == 2 and result.stdout == ""
        assert result.stderr == (
            f"pipesim: error: --grid costs.forward_ms: {value}: a number too large to hold "
            "(the largest is about 1.8e308); write .inf for infinity\n"
        )
        assert not out.exists()
    # Infinity spelled as YAML spells it is a value like any other: the point says why not.
    frame = sweep(["costs.forward_ms=.inf,[1,.inf,1,1]"])
    assert list(frame.error) == [
        "costs.forward_ms: Input should be a finite number (got inf)",
        "costs.forward_ms[1]: Input should be a finite number (got inf)",
    ]
