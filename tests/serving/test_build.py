"""Serving scenarios built into the engine's inputs: costs written out by hand, the KV
capacity from the GPU's memory, and one clear line for each thing that cannot run."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from pipesim.cluster.hardware import gpu_profile, link_profile
from pipesim.cluster.inference import BatchShape, stage_boundary_bytes, stage_iteration_ms
from pipesim.cluster.model import Efficiency, TransformerModel
from pipesim.scenario.schema import ScenarioError
from pipesim.scenario.serving import load_serving, run_serving

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
H100_NODE = {"gpu": "h100-sxm", "gpus_per_node": 8, "intra_node_link": "nvlink4"}


def scenario(tmp_path, name: str = "s.yaml", **sections) -> str:
    data = {"schema_version": 1, "name": "serve-test", "pipeline": {"devices": 1}}
    data.update(sections)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def one_request(prompt: int = 100, output: int = 4) -> dict:
    return {"workload": {"arrival": "trace", "trace_file": "one.csv"}}, (
        f"arrival_s,prompt_tokens,output_tokens\n1.0,{prompt},{output}\n"
    )


# ---------------------------------------------------------------------------
# Hand-typed costs


def test_hand_typed_costs_one_request_pays_each_stage_and_each_link_latency(tmp_path):
    serving, trace = one_request(100, 4)
    (tmp_path / "one.csv").write_text(trace)
    path = scenario(
        tmp_path,
        pipeline={"devices": 3},
        costs={"prefill_ms": [10, 20, 30], "decode_ms": [1, 2, 3]},
        decode={"tokens": 1, "prompt_tokens": 100},
        hardware={"link": {"latency_us": 500}},
        serving=serving,
    )
    run = run_serving(load_serving(path))
    assert run.scenario.costs_from == "hand-typed"
    # two hops of 0.5 ms each: TTFT = 10 + 20 + 30 + 1; each later token also waits for
    # the sampled token's way back from stage 2 to stage 0 (0.5 ms): TPOT = 1 + 2 + 3 + 1.5
    assert run.report.ttft_ms.mean == pytest.approx(61.0)
    assert run.report.tpot_ms.mean == pytest.approx(7.5)
    assert run.report.e2e_ms.mean == pytest.approx(61.0 + 3 * 7.5)


def test_prefill_ms_scales_with_the_prompt_over_decode_prompt_tokens(tmp_path):
    serving, trace = one_request(50, 2)
    (tmp_path / "one.csv").write_text(trace)
    path = scenario(
        tmp_path,
        costs={"prefill_ms": 8.0, "decode_ms": 0.5},
        decode={"tokens": 1, "prompt_tokens": 200},
        serving=serving,
    )
    report = run_serving(load_serving(path)).report
    assert report.ttft_ms.mean == pytest.approx(8.0 * 50 / 200)
    assert report.tpot_ms.mean == pytest.approx(0.5)


def test_a_fixed_workload_prompt_stands_for_decode_prompt_tokens(tmp_path):
    path = scenario(
        tmp_path,
        costs={"prefill_ms": 4.0, "decode_ms": 1.0},
        serving={"workload": {"rate": 1.0, "requests": 3, "prompt_tokens": 64}, "kv_blocks": 99},
    )
    loaded = load_serving(path)
    assert loaded.config.replica.costs.prompt_tokens == 64
    assert loaded.config.replica.kv_blocks == 99
    assert len(loaded.requests) == 3


# ---------------------------------------------------------------------------
# Costs from the model


def llama_params_per_layer() -> int:
    h, f, kv = 8192, 28672, 8 * 128
    attention = h * (h + 2 * kv) + h * h + (h + 2 * kv + h)  # QKV, output, their biases
    mlp = 3 * h * f + 2 * f + h  # gate, up, down and biases
    return attention + mlp + 4 * h  # two norms


def test_kv_capacity_is_the_memory_left_by_the_weights(tmp_path):
    path = scenario(
        tmp_path,
        parallel={"tensor": 8},
        model=LLAMA_70B,
        hardware=H100_NODE,
        serving={"workload": {"rate": 1.0, "requests": 1}, "gpu_memory_utilization": 0.9},
    )
    loaded = load_serving(path)
    weights_per_gpu = (80 * llama_params_per_layer() + 2 * 32000 * 8192) * 2 / 8
    kv_per_token_per_gpu = 2 * 80 * 1 * 128 * 2  # 8 KV heads over 8 ranks: one each
    tokens = math.floor((0.9 * 80 * 2**30 - weights_per_gpu) / kv_per_token_per_gpu)
    assert loaded.costs_from == "model"
    assert loaded.config.replica.kv_blocks == tokens // 16
    overridden = load_serving(path, ["serving.kv_blocks=1000"])
    assert overridden.config.replica.kv_blocks == 1000


def test_model_costs_one_request_is_the_sum_of_stage_rooflines_and_hops(tmp_path):
    serving, trace = one_request(512, 3)
    (tmp_path / "one.csv").write_text(trace)
    path = scenario(
        tmp_path,
        pipeline={"devices": 2},
        parallel={"tensor": 4},
        model=LLAMA_70B,
        hardware=H100_NODE,
        serving=serving,
    )
    report = run_serving(load_serving(path)).report
    model = TransformerModel(
        layers=80,
        hidden=8192,
        heads=64,
        seq_len=4096,
        vocab=32000,
        ffn_hidden=28672,
        kv_heads=8,
        mlp="gated",
    )
    gpu, nvlink = gpu_profile("h100-sxm"), link_profile("nvlink4")
    eff = Efficiency()

    def through(shape: BatchShape, emitting: int) -> float:
        stages = [
            stage_iteration_ms(
                model,
                40,
                gpu,
                shape,
                first=s == 0,
                last=s == 1,
                tensor=4,
                tensor_link=nvlink,
                efficiency=eff,
                emitting=emitting,
            )
            for s in range(2)
        ]
        return sum(stages) + nvlink.transfer_ms(stage_boundary_bytes(model, shape))

    ttft = through(BatchShape(prefill_tokens=512, prefill_attention=512 * 512), 1)
    # before each decode step, the token sampled by the step before comes back from stage
    # 1 to stage 0: one 8-byte token id over NVLink
    back = nvlink.transfer_ms(8.0)
    # a decode step attends over the prompt, the tokens so far and itself
    step_1 = back + through(BatchShape(decode_seqs=1, decode_context=513), 0)
    step_2 = back + through(BatchShape(decode_seqs=1, decode_context=514), 0)
    assert report.ttft_ms.mean == pytest.approx(ttft, rel=1e-9)
    assert report.tpot_ms.mean == pytest.approx((step_1 + step_2) / 2, rel=1e-9)


def test_model_efficiency_reaches_the_serving_costs_whole(tmp_path):
    # every field of model.efficiency, as decode mode and training read it
    given = {
        "max_fraction": 0.5,
        "half_tokens": 256.0,
        "launch_overhead_ms": 0.01,
        "attention_fraction": 0.4,
        "memory_fraction": 0.6,
        "tensor_overlap_fraction": 0.3,
    }
    path = scenario(
        tmp_path,
        parallel={"tensor": 8},
        model={**LLAMA_70B, "efficiency": given},
        hardware=H100_NODE,
        serving={"workload": {"rate": 1.0, "requests": 1}},
    )
    assert load_serving(path).config.replica.costs.efficiency == Efficiency(**given)


# ---------------------------------------------------------------------------
# What cannot run: one line naming the file and the key


@pytest.mark.parametrize(
    ("sections", "expected"),
    [
        ({}, r"s\.yaml: serving: required by pipesim serve"),
        (
            {"serving": {"workload": {"rate": -1.0, "requests": 5}}},
            r"s\.yaml: serving\.workload\.rate: Input should be greater than 0",
        ),
        (
            {"serving": {"workload": {"rate": 1.0, "requests": 5}, "kv_blocks": 0}},
            r"s\.yaml: serving\.kv_blocks: Input should be greater than or equal to 1",
        ),
        (
            {
                "model": LLAMA_70B,
                "hardware": {"gpu": "l40s"},
                "serving": {"workload": {"rate": 1.0, "requests": 5}},
            },
            r"s\.yaml: model: the weights of stage 0 \(.* GiB per GPU .*\) leave no room",
        ),
        (
            {
                "model": LLAMA_70B,
                "hardware": H100_NODE,
                "pipeline": {"devices": 4},
                "parallel": {"tensor": 4},
                "serving": {"workload": {"rate": 1.0, "requests": 5}},
            },
            r"s\.yaml: pipeline\.devices: 1 replicas x 4 pipeline stages x 4 tensor GPUs = 16 "
            r"GPUs, more than one node",
        ),
        (
            {
                "model": LLAMA_70B,
                "hardware": H100_NODE,
                "parallel": {"tensor": 8},
                "serving": {"workload": {"rate": 1.0, "requests": 5}, "replicas": 2},
            },
            r"s\.yaml: serving\.replicas: 2 replicas x 1 pipeline stages x 8 tensor GPUs",
        ),
        (
            {
                "parallel": {"tensor": 2},
                "costs": {"prefill_ms": 1, "decode_ms": 1},
                "serving": {"workload": {"rate": 1.0, "requests": 5, "prompt_tokens": 8}},
            },
            r"s\.yaml: parallel\.tensor: only used with a model section",
        ),
        (
            {
                "pipeline": {"devices": 2},
                "costs": {"prefill_ms": [1, 2, 3], "decode_ms": 1},
                "serving": {"workload": {"rate": 1.0, "requests": 5, "prompt_tokens": 8}},
            },
            r"s\.yaml: costs\.prefill_ms: has 3 entries, expected a number or 2",
        ),
        (
            {
                "costs": {"decode_ms": 1},
                "serving": {"workload": {"rate": 1.0, "requests": 5, "prompt_tokens": 8}},
            },
            r"s\.yaml: costs\.prefill_ms: required by pipesim serve without a model",
        ),
        (
            {
                "costs": {"prefill_ms": 1, "decode_ms": 1},
                "serving": {
                    "workload": {
                        "rate": 1.0,
                        "requests": 5,
                        "prompt_tokens": {"distribution": "uniform", "low": 1, "high": 9},
                    }
                },
            },
            r"s\.yaml: decode\.prompt_tokens: required with costs\.prefill_ms",
        ),
        (
            {
                "pipeline": {"devices": 4},
                "costs": {"prefill_ms": 1, "decode_ms": 1},
                "serving": {
                    "workload": {"rate": 1.0, "requests": 5, "prompt_tokens": 8},
                    "kv_blocks": 3,
                },
            },
            r"s\.yaml: serving\.kv_blocks: 3 KV blocks for 4 pipeline stages",
        ),
        (
            {
                "costs": {"prefill_ms": 1, "decode_ms": 1, "forward_ms": 2},
                "serving": {"workload": {"rate": 1.0, "requests": 5, "prompt_tokens": 8}},
            },
            r"s\.yaml: costs\.forward_ms: not used by pipesim serve",
        ),
        (
            {
                "costs": {"prefill_ms": 1, "decode_ms": 1},
                "parallel": {"data": 2},
                "serving": {"workload": {"rate": 1.0, "requests": 5, "prompt_tokens": 8}},
            },
            r"s\.yaml: parallel\.data: not used by pipesim serve \(give serving\.replicas",
        ),
        (
            {
                "costs": {"prefill_ms": 1, "decode_ms": 1},
                "serving": {
                    "workload": {"rate": 1.0, "requests": 5, "prompt_tokens": 8},
                    "max_num_seqs": 64,
                    "max_num_batched_tokens": 32,
                },
            },
            r"s\.yaml: serving\.max_num_batched_tokens \(32\) must be >= max_num_seqs \(64\)",
        ),
    ],
)
def test_what_cannot_run_is_one_line(tmp_path, sections, expected):
    path = scenario(tmp_path, **sections)
    with pytest.raises(ScenarioError, match=expected) as caught:
        load_serving(path)
    assert "\n" not in str(caught.value)


def test_a_bad_trace_is_named_through_the_scenario(tmp_path):
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n2,5,5\n1,5,5\n")
    path = scenario(
        tmp_path,
        costs={"prefill_ms": 1, "decode_ms": 1},
        decode={"tokens": 1, "prompt_tokens": 5},
        serving={"workload": {"arrival": "trace", "trace_file": "t.csv"}},
    )
    with pytest.raises(ScenarioError, match=r"t\.csv: row 3, column arrival_s: 1 is earlier"):
        load_serving(path)


def test_same_seed_same_requests_through_the_scenario(tmp_path):
    path = scenario(
        tmp_path,
        costs={"prefill_ms": 1, "decode_ms": 1},
        serving={"workload": {"rate": 3.0, "requests": 50, "prompt_tokens": 8, "seed": 4}},
    )
    assert load_serving(path).requests == load_serving(path).requests
    assert load_serving(path).requests != load_serving(path, ["serving.workload.seed=5"]).requests


def spread(median_ms: float) -> dict:
    return {"median_ms": median_ms, "p10_ms": median_ms, "p90_ms": median_ms, "samples": 5}


def test_profiled_prefill_and_decode_timings_are_the_stage_costs(tmp_path):
    profile = {
        "format": "pipesim-profile",
        "version": 1,
        "stages": [
            {"stage": 0, "prefill": spread(12.0), "decode": spread(1.5)},
            {"stage": 1, "prefill": spread(8.0), "decode": spread(2.5)},
        ],
    }
    (tmp_path / "p.json").write_text(json.dumps(profile))
    serving, trace = one_request(100, 3)
    (tmp_path / "one.csv").write_text(trace)
    path = scenario(
        tmp_path,
        pipeline={"devices": 2},
        costs={"profile": "p.json"},
        decode={"tokens": 1, "prompt_tokens": 100},
        hardware={"link": {"latency_us": 250}},
        serving=serving,
    )
    run = run_serving(load_serving(path))
    assert run.scenario.costs_from == "profile"
    assert run.report.ttft_ms.mean == pytest.approx(12.0 + 0.25 + 8.0)
    # a decode step waits for the token's way back from stage 1 to stage 0 (0.25 ms)
    assert run.report.tpot_ms.mean == pytest.approx(0.25 + 1.5 + 0.25 + 2.5)
    profile["stages"][1] = {"stage": 1, "F": spread(8.0)}  # a training profile's stage
    (tmp_path / "p.json").write_text(json.dumps(profile))
    with pytest.raises(
        ScenarioError, match=r"costs\.profile: every stage needs prefill and decode"
    ):
        load_serving(path)
