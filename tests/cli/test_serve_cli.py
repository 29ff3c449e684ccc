"""``pipesim serve``: the report in three formats, the extra files, the same bytes for the
same seed, and one line with exit code 2 for bad input (nothing written)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.analysis.serving_sweep import run_serving_sweep
from pipesim.analysis.sweep import parse_grid
from pipesim.cli import main, progress

LLAMA_70B = {
    "layers": 80,
    "hidden": 8192,
    "heads": 64,
    "kv_heads": 8,
    "ffn_hidden": 28672,
    "mlp": "gated",
    "seq_len": 4096,
    "vocab": 32000,
}
JSON_KEYS = {
    "requests",
    "completed",
    "rejected",
    "preemptions",
    "duration_s",
    "throughput_rps",
    "output_tokens_per_second",
    "goodput_rps",
    "mean_in_system",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "queue_ms",
}


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def write_scenario(folder: Path, name: str = "serve.yaml", **sections) -> Path:
    data = {
        "schema_version": 1,
        "name": "serve-cli",
        "pipeline": {"devices": 3},
        "costs": {"prefill_ms": [10, 20, 30], "decode_ms": [1, 2, 3]},
        "decode": {"tokens": 1, "prompt_tokens": 100},
        "hardware": {"link": {"latency_us": 500}},
        "serving": {
            "workload": {"arrival": "trace", "trace_file": "one.csv"},
            "slo": {"ttft_ms": 100, "tpot_ms": 10},
        },
    }
    data.update(sections)
    (folder / "one.csv").write_text("arrival_s,prompt_tokens,output_tokens\n1.0,100,4\n")
    path = folder / name
    path.write_text(yaml.safe_dump(data))
    return path


def poisson(folder: Path, **serving) -> Path:
    workload = {
        "rate": 20.0,
        "requests": 60,
        "seed": 3,
        "prompt_tokens": 100,
        "output_tokens": {"distribution": "uniform", "low": 1, "high": 30},
    }
    return write_scenario(folder, serving={"workload": workload, **serving})


def test_the_table_of_one_request(tmp_path):
    # two hops of 0.5 ms: TTFT = 60 + 1 ms; each later token also waits 0.5 ms for the
    # one before it to come back from stage 2 to stage 0: TPOT = 6 + 1.5 ms, e2e = 61 +
    # 3 x 7.5 = 83.5 ms; it arrives at 1 s, so the run lasts 1.0835 s (printed 1.083: the
    # sum lands a hair below the half), with 0.0835 / 1.0835 requests in the system on
    # average; the stages are busy 60 + 3 x 6 = 78 ms of 3 x 1083.5 ms. The default 65,536
    # KV blocks split into 3 virtual engines of 21,845: 65,535 usable, what KV use is of
    result = invoke("serve", write_scenario(tmp_path))
    assert result.exit_code == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[:12] == [
        "pipesim serve - serve-cli",
        "",
        "  replicas            1 x (3 pipeline stages x 1 tensor GPUs), router round_robin, "
        "costs hand-typed",
        "  requests            1 (1 completed, 0 rejected), 0 preemptions",
        "  duration            1.083 s",
        "  throughput          0.923 requests/s, 3.7 output tokens/s",
        "  goodput             0.923 requests/s within SLO TTFT <= 100 ms, TPOT <= 10 ms",
        "  in system (mean)    0.077 requests",
        "  batch size          mean 1.00, peak 1 sequences",
        "  KV cache in use     mean 0.0%, peak 0.0% of 65,535 blocks per replica",
        "  bubble fraction     0.9760",
        "",
    ]
    assert lines[12:18] == [
        "  latency (ms)               mean        p50        p90        p99",
        "  TTFT                     61.000     61.000     61.000     61.000",
        "  TPOT                      7.500      7.500      7.500      7.500",
        "  inter-token               7.500      7.500      7.500      7.500",
        "  end to end               83.500     83.500     83.500     83.500",
        "  queueing                  0.000      0.000      0.000      0.000",
    ]


def test_json_has_the_keys_scripts_use(tmp_path):
    result = invoke("serve", write_scenario(tmp_path), "--format", "json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert JSON_KEYS <= set(data)
    assert data["ttft_ms"] == pytest.approx({"mean": 61.0, "p50": 61.0, "p90": 61.0, "p99": 61.0})
    assert (data["requests"], data["completed"], data["rejected"]) == (1, 1, 0)


def test_csv_is_a_header_and_one_row(tmp_path):
    result = invoke("serve", write_scenario(tmp_path), "--format", "csv")
    header, row = result.stdout.splitlines()
    values = dict(zip(header.split(","), row.split(","), strict=True))
    assert float(values["ttft_ms_p99"]) == pytest.approx(61.0)
    assert float(values["e2e_ms_mean"]) == pytest.approx(83.5)
    assert values["completed"] == "1"


def outputs(folder: Path) -> list[str]:
    return [
        "-o",
        folder / "r.json",
        "--requests",
        folder / "req.csv",
        "--trace",
        folder / "t.json",
        "--plot",
        folder / "p.png",
    ]


@pytest.mark.slow
def test_same_seed_same_bytes_in_every_output(tmp_path):
    scenario = poisson(tmp_path, max_num_seqs=4)
    files = []
    for run in ("a", "b"):
        folder = tmp_path / run
        folder.mkdir()
        result = invoke("serve", scenario, "--format", "json", *outputs(folder))
        assert result.exit_code == 0, result.output
        assert result.stdout == ""
        files.append({p.name: p.read_bytes() for p in sorted(folder.iterdir())})
    assert sorted(files[0]) == ["p.png", "r.json", "req.csv", "t.json"]
    assert files[0] == files[1]
    lines = files[0]["req.csv"].decode().splitlines()
    assert len(lines) == 61 and lines[0].startswith("id,replica,arrival_s,prompt_tokens")
    trace = json.loads(files[0]["t.json"])
    assert any(e["ph"] == "X" for e in trace["traceEvents"])


def test_another_seed_other_requests(tmp_path):
    scenario = poisson(tmp_path)
    first = invoke("serve", scenario, "--format", "csv").stdout
    other = invoke("serve", scenario, "--format", "csv", "--set", "serving.workload.seed=4")
    assert first == invoke("serve", scenario, "--format", "csv").stdout
    assert other.stdout != first


def test_max_rate_reports_the_bracket(tmp_path):
    scenario = poisson(tmp_path, max_num_seqs=8, slo={"ttft_ms": 150.0, "percentile": 90})
    result = invoke("serve", scenario, "--max-rate", "--format", "json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)["max_rate"]
    low, high = found["bracket_rps"]
    assert found["max_rate_rps"] == low and high - low <= 0.01 * high
    assert found["probes"][0]["rate_rps"] == 20.0
    table = invoke("serve", scenario, "--max-rate").stdout
    assert f"  max rate            {low:.4g} requests/s meets the p90 TTFT <= 150 ms" in table


# ---------------------------------------------------------------------------
# Bad input: one line, exit 2, nothing written


def assert_refused(folder: Path, args: list, expected: str) -> None:
    result = invoke(*args, "-o", folder / "out.json", "--requests", folder / "req.csv")
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("pipesim: error: ")
    assert expected in result.stderr, result.stderr
    assert not (folder / "out.json").exists() and not (folder / "req.csv").exists()


def test_a_negative_rate(tmp_path):
    scenario = poisson(tmp_path)
    assert_refused(
        tmp_path,
        ["serve", scenario, "--set", "serving.workload.rate=-2"],
        "serve.yaml: serving.workload.rate: Input should be greater than 0",
    )


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [("scheduler", "sarathi", "vllm"), ("router", "random", "round_robin, least_outstanding")],
)
def test_an_unknown_scheduler_or_router(tmp_path, key, value, allowed):
    scenario = poisson(tmp_path)
    assert_refused(
        tmp_path,
        ["serve", scenario, "--set", f"serving.{key}={value}"],
        f"serve.yaml: serving.{key}: unknown {key} '{value}'; allowed: {allowed}",
    )


def test_zero_blocks(tmp_path):
    scenario = poisson(tmp_path)
    assert_refused(
        tmp_path,
        ["serve", scenario, "--set", "serving.kv_blocks=0"],
        "serve.yaml: serving.kv_blocks: Input should be greater than or equal to 1",
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("arrival_s,prompt_tokens\n0,4\n", "bad.csv: row 1: missing column output_tokens"),
        (
            "arrival_s,prompt_tokens,output_tokens\n3,4,4\n1,4,4\n",
            "bad.csv: row 3, column arrival_s: 1 is earlier than the row before (3)",
        ),
    ],
)
def test_a_bad_trace(tmp_path, text, expected):
    (tmp_path / "bad.csv").write_text(text)
    scenario = write_scenario(
        tmp_path, serving={"workload": {"arrival": "trace", "trace_file": "bad.csv"}}
    )
    assert_refused(tmp_path, ["serve", scenario], expected)


def test_weights_that_do_not_fit(tmp_path):
    scenario = write_scenario(
        tmp_path,
        pipeline={"devices": 1},
        costs={},
        decode=None,
        model=LLAMA_70B,
        hardware={"gpu": "a100-sxm-40gb"},
        serving={"workload": {"rate": 1.0, "requests": 5}},
    )
    assert_refused(tmp_path, ["serve", scenario], "serve.yaml: model: the weights of stage 0")


def test_no_serving_section(tmp_path):
    scenario = write_scenario(tmp_path, serving=None)
    assert_refused(tmp_path, ["serve", scenario], "serve.yaml: serving: required by pipesim serve")


def test_max_rate_on_a_trace_is_refused(tmp_path):
    assert_refused(
        tmp_path,
        ["serve", write_scenario(tmp_path), "--max-rate"],
        "--max-rate needs poisson or gamma arrivals",
    )


def test_a_bad_output_path_is_refused_before_running(tmp_path):
    result = invoke("serve", write_scenario(tmp_path), "--trace", tmp_path / "t.txt")
    assert result.exit_code == 2
    assert (
        result.stderr
        == f"pipesim: error: --trace {tmp_path / 't.txt'}: unsupported file type; allowed: .json\n"
    )


# ---------------------------------------------------------------------------
# Sweeps of serving keys


def test_sweep_over_serving_keys(tmp_path):
    scenario = poisson(tmp_path)
    out = tmp_path / "sweep.csv"
    result = invoke(
        "sweep",
        scenario,
        "--grid",
        "serving.workload.rate=5,40",
        "--grid",
        "serving.max_num_seqs=1,8",
        "--jobs",
        "1",
        "-o",
        out,
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert frame[["serving.workload.rate", "serving.max_num_seqs"]].values.tolist() == [
        [5, 1],
        [5, 8],
        [40, 1],
        [40, 8],
    ]
    assert (frame["completed"] == 60).all() and frame["error"].isna().all()
    # more sequences per batch never hurt the p99 TTFT of the same requests here
    assert (frame["ttft_ms_p99"][1::2].values <= frame["ttft_ms_p99"][0::2].values).all()
    table = invoke("sweep", scenario, "--grid", "serving.workload.rate=5,-1", "--jobs", "1")
    assert table.exit_code == 0
    rows = table.stdout.splitlines()
    assert "requests/s" in rows[0] and "TTFT p99 ms" in rows[0]
    assert "serving.workload.rate: Input should be greater than 0" in rows[2]


# ---------------------------------------------------------------------------
# Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_counts_the_requests_on_a_terminal_unless_silenced(tmp_path, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(progress, "sys", SimpleNamespace(stderr=terminal))
    scenario = poisson(tmp_path)
    assert invoke("serve", scenario, "--no-progress", "-o", tmp_path / "a.txt").exit_code == 0
    assert terminal.getvalue() == ""
    assert invoke("serve", scenario, "-o", tmp_path / "b.txt").exit_code == 0
    assert terminal.getvalue().startswith("\rserving: ")
    assert "60/60" in terminal.getvalue()


@pytest.mark.slow
def test_a_serving_sweep_is_the_same_bytes_with_one_or_two_jobs(tmp_path):
    scenario = poisson(tmp_path)
    files = []
    for jobs in ("1", "2"):
        folder = tmp_path / f"jobs{jobs}"
        folder.mkdir()
        result = invoke(
            "sweep",
            scenario,
            "--grid",
            "serving.workload.rate=5,40",
            "--grid",
            "serving.max_num_seqs=1,8",
            "--jobs",
            jobs,
            "-o",
            folder / "s.csv",
            "--plot",
            folder / "s.png",
        )
        assert result.exit_code == 0, result.output
        files.append({p.name: p.read_bytes() for p in sorted(folder.iterdir())})
    assert sorted(files[0]) == ["s.csv", "s.png"]
    assert files[0] == files[1]


# ---------------------------------------------------------------------------
# Whatever is thrown at it: a finite report, or one line and exit 2 with nothing written

SERVING_KEYS = [
    "serving.workload.arrival",
    "serving.workload.rate",
    "serving.workload.cv",
    "serving.workload.requests",
    "serving.workload.duration_s",
    "serving.workload.seed",
    "serving.workload.prompt_tokens",
    "serving.workload.output_tokens",
    "serving.workload.trace_file",
    "serving.replicas",
    "serving.router",
    "serving.max_num_seqs",
    "serving.max_num_batched_tokens",
    "serving.chunked_prefill",
    "serving.block_size",
    "serving.kv_blocks",
    "serving.gpu_memory_utilization",
    "serving.slo.ttft_ms",
    "serving.slo.percentile",
    "pipeline.devices",
    "parallel.tensor",
    "costs.prefill_ms",
    "decode.prompt_tokens",
    "serving",
]
VALUES = [
    "0",
    "1",
    "2",
    "7",
    "64",
    "-1",
    "0.5",
    "1e-320",
    "1e308",
    "9007199254740993",
    "1e400",
    ".nan",
    ".inf",
    "true",
    "poisson",
    "gamma",
    "trace",
    "least_outstanding",
    "one.csv",
    "nope.csv",
    "[1, 2]",
    "{}",
    "null",
    "{distribution: lognormal, mean: 50, cv: 2}",
    "{distribution: empirical, samples: [1, 4000]}",
    "{distribution: uniform, low: 9, high: 2}",
]


def finite(value) -> bool:
    if isinstance(value, dict):
        return all(finite(v) for v in value.values())
    if isinstance(value, list):
        return all(finite(v) for v in value)
    return not isinstance(value, float) or math.isfinite(value)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    overrides=st.lists(
        st.tuples(st.sampled_from(SERVING_KEYS), st.sampled_from(VALUES)), min_size=1, max_size=3
    ),
    model=st.booleans(),
)
def test_serve_keeps_the_contract_whatever_is_set(tmp_path_factory, overrides, model):
    folder = tmp_path_factory.mktemp("fuzz")
    if model:
        scenario = write_scenario(
            folder,
            pipeline={"devices": 2},
            costs={},
            decode=None,
            parallel={"tensor": 4},
            model=LLAMA_70B,
            hardware={"gpu": "h100-sxm", "gpus_per_node": 8},
            serving={"workload": {"rate": 5.0, "requests": 20}, "slo": {"ttft_ms": 500}},
        )
    else:
        scenario = poisson(folder, slo={"tpot_ms": 5.0})
    sets = [item for key, value in overrides for item in ("--set", f"{key}={value}")]
    report = folder / "out" / "r.json"
    report.parent.mkdir()
    result = invoke(
        "serve",
        scenario,
        *sets,
        "--format",
        "json",
        "-o",
        report,
        "--requests",
        report.parent / "q.csv",
    )
    if result.exit_code == 0:
        assert finite(json.loads(report.read_text()))
        return
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("pipesim: error: ") and result.stderr.count("\n") == 1
    assert len(result.stderr) <= 302
    assert list(report.parent.iterdir()) == []


@pytest.mark.slow
def test_a_serving_sweep_on_dask_gives_the_same_frame(tmp_path):
    distributed = pytest.importorskip("distributed")
    base = yaml.safe_load(poisson(tmp_path).read_text())
    source = str(tmp_path / "serve.yaml")
    axes = parse_grid(["serving.workload.rate=5,40", "serving.max_num_seqs=1,8"])
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        remote = run_serving_sweep(
            base, source, axes, executor="dask", scheduler=cluster.scheduler_address
        )
    pd.testing.assert_frame_equal(remote, run_serving_sweep(base, source, axes))
    assert (remote["completed"] == 60).all()


def test_a_serving_sweep_on_dask_needs_a_scheduler(tmp_path):
    result = invoke(
        "sweep", poisson(tmp_path), "--grid", "serving.workload.rate=5", "--executor", "dask"
    )
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == "pipesim: error: --executor dask needs --scheduler tcp://HOST:PORT\n"
