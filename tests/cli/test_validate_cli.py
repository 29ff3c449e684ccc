"""``pipesim validate``: every check that needs no simulation, in the words of the command
that would refuse, and memory flagged as ``pipesim run`` flags it."""

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import pipesim.analysis.run
import pipesim.scenario.serving
from pipesim.cli import main

SCENARIOS = Path(__file__).parents[2] / "scenarios"
LLAMA = str(SCENARIOS / "llama-70b-4x8-h100.yaml")  # interleaved 1F1B, TP 8 x PP 4, 80 GiB
SERVE = str(SCENARIOS / "llama-70b-serve-8xh100.yaml")  # one TP 8 replica on a node of 8
GPIPE = ["--set", "pipeline.schedule=gpipe", "--set", "pipeline.virtual_stages=1"]


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(autouse=True)
def no_simulation(monkeypatch):
    """validate never simulates: neither a training step nor serving."""

    def refuse(*args, **kwargs):
        raise AssertionError("validate simulated")

    monkeypatch.setattr(pipesim.analysis.run, "simulate_with", refuse)
    monkeypatch.setattr(pipesim.scenario.serving, "simulate_serving", refuse)


def test_an_oom_training_layout_is_flagged_not_refused():
    result = invoke("validate", LLAMA, *GPIPE)
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.splitlines() == [
        f"{LLAMA}: ok - gpipe, 4 devices, 4 stages, 32 microbatches, 256 actions",
        "  memory: OOM: device 3 needs 128.28 GiB (32.37 GiB static + 91.20 GiB activations + "
        "4.71 GiB runtime) of 76.00 GiB usable (80.00 GiB less 5% headroom); 4 of 4 devices over",
    ]


def test_a_layout_that_fits_says_its_peak():
    result = invoke("validate", LLAMA)
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.splitlines()[1] == (
        "  memory: fits, peak 50.08 GiB of 76.00 GiB usable (80.00 GiB less 5% headroom) on "
        "device 0 (32.37 GiB static + 15.29 GiB activations + 2.43 GiB runtime)"
    )


def test_json_holds_the_oom_flag_and_each_device_as_run_names_it():
    data = json.loads(invoke("validate", LLAMA, *GPIPE, "--format", "json").stdout)
    assert data["ok"] is True and data["oom"] is True
    assert data["memory_capacity_bytes"] == 80 * 2**30
    assert [d["oom"] for d in data["per_device"]] == [True] * 4
    worst = data["per_device"][3]
    assert data["memory_headroom"] == 0.05
    allocated = worst["static_memory_bytes"] + worst["peak_activation_bytes"]
    # 1 GiB of CUDA context and communication buffers, 3% of the allocated bytes lost
    assert worst["runtime_memory_bytes"] == pytest.approx(2**30 + 0.03 * allocated, rel=1e-12)
    assert worst["peak_memory_bytes"] == pytest.approx(allocated * 1.03 + 2**30, rel=1e-12)
    assert round(worst["peak_memory_bytes"] / 2**30, 2) == 128.28


def test_the_oom_flag_matches_what_run_reports(monkeypatch):
    monkeypatch.undo()  # run simulates
    checked = json.loads(invoke("validate", LLAMA, *GPIPE, "--format", "json").stdout)
    ran = json.loads(invoke("run", LLAMA, *GPIPE, "--format", "json").stdout)
    assert checked["oom"] is ran["oom"] is True
    keys = (
        "device",
        "static_memory_bytes",
        "peak_activation_bytes",
        "runtime_memory_bytes",
        "peak_memory_bytes",
        "oom",
    )
    assert checked["per_device"] == [{k: d[k] for k in keys} for d in ran["per_device"]]
    assert checked["memory_capacity_bytes"] == ran["memory_capacity_bytes"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["parallel.tensor=1"], "model: the weights of stage 0"),  # no room for a KV cache
        (["pipeline.devices=2"], "pipeline.devices: 1 replicas x 2 pipeline stages"),  # 16 GPUs
        (["serving.replicas=2"], "serving.replicas: 2 replicas x 1 pipeline stages"),
    ],
)
def test_what_serve_refuses_validate_refuses_in_its_words(overrides, field):
    args = [a for o in overrides for a in ("--set", o)]
    checked = invoke("validate", SERVE, *args)
    served = invoke("serve", SERVE, *args, "--no-progress")
    assert checked.exit_code == served.exit_code == 2
    assert checked.stdout == ""
    assert checked.stderr == served.stderr
    assert checked.stderr.startswith(f"pipesim: error: {SERVE}: {field}")
    assert len(checked.stderr.splitlines()) == 1


def test_a_serving_scenario_shows_what_serve_would_run():
    result = invoke("validate", SERVE)
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.splitlines()[1:] == [
        "  memory: fits, peak 17.95 GiB of 76.00 GiB usable (80.00 GiB less 5% headroom) on "
        "device 0 (16.45 GiB static + 0 B activations + 1.49 GiB runtime)",
        "  serve: 1 replicas x (1 pipeline stages x 8 tensor GPUs), 91,649 KV blocks of 16 "
        "tokens, 1,000 requests, costs model",
    ]
    data = json.loads(invoke("validate", SERVE, "--format", "json").stdout)
    assert data["serving"]["kv_blocks"] == 91649 and data["serving"]["requests"] == 1000


def test_a_file_only_serve_can_use_is_valid_for_serve(tmp_path):
    (tmp_path / "one.csv").write_text("arrival_s,prompt_tokens,output_tokens\n1.0,100,4\n")
    scenario = tmp_path / "serve.yaml"
    data = {
        "schema_version": 1,
        "name": "serve-only",
        "pipeline": {"devices": 3},
        "costs": {"prefill_ms": [10, 20, 30], "decode_ms": [1, 2, 3]},
        "decode": {"tokens": 1, "prompt_tokens": 100},
        "serving": {"workload": {"arrival": "trace", "trace_file": "one.csv"}},
    }
    scenario.write_text(yaml.safe_dump(data))
    result = invoke("validate", scenario)
    assert result.exit_code == 0
    assert result.stdout == (
        f"{scenario}: ok for pipesim serve - 1 replicas x (3 pipeline stages x 1 tensor GPUs), "
        "65,536 KV blocks of 16 tokens, 1 requests, costs hand-typed\n"
    )
    assert result.stderr == (
        "pipesim: note: pipesim run would refuse it: pipeline.microbatches: required "
        "(or give model.global_batch)\n"
    )
    assert json.loads(invoke("validate", scenario, "--format", "json").stdout)["run_refusal"]


def test_a_scenario_without_a_model_says_nothing_of_memory():
    result = invoke("validate", SCENARIOS / "gpipe-vs-1f1b.yaml")
    assert result.exit_code == 0
    assert result.stdout == (
        f"{SCENARIOS / 'gpipe-vs-1f1b.yaml'}: ok - gpipe, 4 devices, 4 stages, 8 microbatches, "
        "64 actions\n"
    )
