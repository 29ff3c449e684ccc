"""The bundled mixture-of-experts scenarios: DeepSeek-V3, Mixtral 8x7B and Qwen3-235B-A22B
hold the parameters their model cards publish, run end to end from ``pipesim run``, and
every bad ``model.moe`` / ``model.mla`` input is one line naming its key."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim import load_scenario, run_scenario
from pipesim.cli import main
from pipesim.cluster.hardware import gpu_profile
from pipesim.cluster.transformer import model_flops_per_step, stage_parameters
from pipesim.scenario import derive

SCENARIOS = Path(__file__).parents[2] / "scenarios"
DEEPSEEK = SCENARIOS / "deepseek-v3-2048xh800.yaml"
MIXTRAL = SCENARIOS / "mixtral-8x7b-4x8-h100.yaml"
QWEN3 = SCENARIOS / "qwen3-235b-a22b-512xh100.yaml"
SERVE = SCENARIOS / "llama-70b-serve-8xh100.yaml"

# pipesim's counts: every linear layer with a bias and every norm with two vectors, as it
# counts dense models; the checkpoints have neither biases nor LayerNorm's second vector
# (RMSNorm), so their matrices are pinned too, and the rest is written out below.
PINNED = {
    DEEPSEEK: (671_199_508_800, 37_563_365_696, 11_613_060_416),
    MIXTRAL: (46_711_767_296, 12_882_608_384, 0),
    QWEN3: (235_181_885_184, 22_198_159_104, 0),
}


def model_of(path: Path):
    scenario = load_scenario(path)
    return scenario, derive.build_job(scenario.spec, str(path)).model


def test_deepseek_v3_holds_671b_parameters_37b_activated():
    scenario, _ = model_of(DEEPSEEK)
    count = scenario.parameters
    h, a, layers = 7168, 128, 61
    # MLA: query down 7168 x 1536, up 1536 x 128 (128 + 64); key-value down 7168 x (512 + 64),
    # up 512 x 128 (128 + 128); output 128 x 128 -> 7168
    mla = h * 1536 + 1536 * a * 192 + h * 576 + 512 * a * 256 + a * 128 * h
    assert mla == 187_105_280
    expert = 3 * h * 2048  # SwiGLU experts of width 2048
    moe_layer = mla + (256 + 1) * expert + h * 256  # 256 routed, 1 shared, the router
    dense_layer = mla + 3 * h * 18432
    ends = 2 * 129280 * h  # embedding and LM head
    matrices = 3 * dense_layer + (layers - 3) * moe_layer + ends
    assert matrices == 671_025_397_760
    # biases (each projection's outputs), norms (two vectors: the layer's two, MLA's latents)
    mla_rest = (1536 + a * 192 + 576 + a * 256 + h) + 2 * (1536 + 512) + 4 * h
    dense_rest = mla_rest + 2 * 18432 + h
    moe_rest = mla_rest + 257 * (2 * 2048 + h) + 256
    assert count.total == matrices + 3 * dense_rest + 58 * moe_rest
    active = 3 * dense_layer + 58 * (mla + 9 * expert + h * 256) + ends
    assert count.activated == active + 3 * dense_rest + 58 * (mla_rest + 9 * (2 * 2048 + h) + 256)
    # the card: "671B total parameters with 37B activated for each token" (37.56B counting
    # the embedding, as Mixtral's and Qwen3's cards do; the card's figure is truncated)
    assert round(count.total / 1e9) == 671
    assert 37e9 <= count.activated < 38e9
    # the MTP module: a MoE layer, the projection 2h -> h and two norms, 11.6B; the card's
    # 14B also counts its copies of the embedding and the LM head (1.85B)
    assert count.mtp == moe_layer + moe_rest + 2 * h * h + h + 4 * h
    assert round((count.mtp + ends) / 1e9) == 13


def test_mixtral_holds_46_7b_parameters_12_9b_activated():
    scenario, _ = model_of(MIXTRAL)
    count = scenario.parameters
    h, layers = 4096, 32
    attention = h * (h + 2 * 1024) + h * h  # 8 key/value heads of 128
    expert = 3 * h * 14336
    matrices = layers * (attention + 8 * expert + h * 8) + 2 * 32000 * h
    # the checkpoint's own count adds the RMSNorm vectors: 2 a layer and the final one
    assert matrices + layers * 2 * h + h == 46_702_792_704
    rest = (h + 2 * 1024 + h) + 8 * (2 * 14336 + h) + 8 + 4 * h
    assert count.total == matrices + layers * rest
    assert round(count.total / 1e8) == 467 and round(count.activated / 1e8) == 129


def test_qwen3_235b_holds_235b_parameters_22b_activated():
    scenario, model = model_of(QWEN3)
    count = scenario.parameters
    assert model.head_dim == 128 and model.q_width == 8192  # wider than hidden / heads
    h, layers = 4096, 94
    attention = h * (8192 + 2 * 512) + 8192 * h
    expert = 3 * h * 1536
    matrices = layers * (attention + 128 * expert + h * 128) + 2 * 151936 * h
    assert matrices == 235_092_836_352
    rest = (8192 + 2 * 512 + h) + 128 * (2 * 1536 + h) + 128 + 4 * h
    assert count.total == matrices + layers * rest
    assert round(count.total / 1e9) == 235 and round(count.activated / 1e9) == 22
    # the card's "non-embedding" count, 234B
    assert round((count.total - 2 * 151936 * h) / 1e9) == 234


@pytest.mark.parametrize("path", sorted(PINNED), ids=lambda p: p.stem)
def test_pipesim_run_reports_both_counts(path):
    result = CliRunner().invoke(main, ["run", str(path), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    total, activated, mtp = PINNED[path]
    assert (data["parameters"], data["activated_parameters"]) == (total, activated)
    assert data["mtp_parameters"] == mtp
    table = CliRunner().invoke(main, ["run", str(path)])
    line = next(s for s in table.stdout.splitlines() if s.lstrip().startswith("parameters"))
    assert f"{total / 1e9:.2f} B total, {activated / 1e9:.2f} B activated per token" in line


def test_a_dense_model_reports_its_parameters_once():
    data = json.loads(
        CliRunner()
        .invoke(main, ["run", str(SCENARIOS / "llama-70b-4x8-h100.yaml"), "--format", "json"])
        .stdout
    )
    assert data["parameters"] == data["activated_parameters"] == 68_984_668_160
    assert data["mtp_parameters"] == 0
    bare = json.loads(
        CliRunner()
        .invoke(main, ["run", str(SCENARIOS / "interleaved.yaml"), "--format", "json"])
        .stdout
    )
    assert bare["parameters"] is bare["activated_parameters"] is None


def test_mfu_counts_the_activated_flops():
    scenario, model = model_of(MIXTRAL)
    report = run_scenario(scenario).report
    flops = model_flops_per_step(model, 64)
    every_expert = replace(model, moe=replace(model.moe, top_k=8))  # 8 experts, not 2
    assert model_flops_per_step(every_expert, 64) > 3 * flops
    peak = gpu_profile("h100-sxm").peak_tflops * 1e12 * 32
    assert report.mfu == pytest.approx(flops / (report.makespan_ms / 1e3) / peak)


def test_deepseek_stages_hold_the_dense_layers_first_and_mtp_last():
    scenario, model = model_of(DEEPSEEK)
    partition = derive.split_layers(derive.build_job(scenario.spec, str(DEEPSEEK)), 16, "x")
    assert sum(partition) == 61
    params = stage_parameters(model, partition)
    embedding = 129280 * 7168
    count = scenario.parameters
    # every stage once: the main model, the MTP module and its copy of the embedding
    assert sum(params) == count.total + count.mtp + embedding
    # a dense layer's SwiGLU (18432 = 9 x 2048) costs about what 8 routed and 1 shared
    # expert cost, so the layers weigh alike; the last stage, with the LM head and the MTP
    # module, keeps one layer
    assert partition == (4,) * 15 + (1,)
    # DualPipe runs two copies of the model, one each way: device 1 holds model stages 1
    # and 14, 4 MoE layers each; each GPU holds 4 of every MoE layer's 256 routed experts
    # (EP 64), each expert on 2 GPUs (128 replicas / 64): Adam's 4 bytes of weights and
    # gradients and 2 of FP8 copies a parameter it holds, its 12 optimizer bytes over 128
    # replicas for the rest of the layer, over the expert's 2 for the experts (ZeRO-1)
    expert = model.moe.expert_parameters(model.hidden, model.mlp_matrices)
    routed, local = 4 * 256 * expert, 4 * 4 * expert
    one = (params[1] - routed) * (4 + 12 / 128 + 2) + local * (4 + 12 / 2 + 2)
    assert params[14] == params[1]
    expected = 2 * one
    static = scenario.accounting.static_memory_bytes
    assert static[1] == pytest.approx(expected, rel=1e-12)


def mla_without(key: str, tmp_path: Path) -> Path:
    text = DEEPSEEK.read_text().replace(f"    {key}:", f"    # {key}:")
    path = tmp_path / "deepseek.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "path, overrides, message",
    [
        (MIXTRAL, ["model.moe.top_k=9"], "model.moe.top_k: 9 experts per token of 8; allowed: 1"),
        (
            MIXTRAL,
            ["model.moe.experts=0"],
            "model.moe.experts: Input should be greater than or equal to 1",
        ),
        (
            DEEPSEEK,
            ["model.moe.dense_layers=62"],
            "model.moe.dense_layers: 62 dense layers of 61; allowed: 0 to model.layers (61)",
        ),
        (DEEPSEEK, ["model.mla=null"], "model.mla: required with model.attention: mla"),
        (
            DEEPSEEK,
            ["model.attention=mha"],
            "model.mla: only used with model.attention: mla (got attention: mha)",
        ),
        (MIXTRAL, ["model.attention=mla"], "model.mla: required with model.attention: mla"),
        (
            MIXTRAL,
            ["model.head_dim=0"],
            "model.head_dim: Input should be greater than or equal to 1 (got 0)",
        ),
        (
            MIXTRAL,
            ["model.attention=mha"],
            "model.kv_heads: 8 key/value heads for 32 heads is grouped-query",
        ),
        (MIXTRAL, ["model.kv_heads=null"], "model.kv_heads: required with model.attention: gqa"),
        (
            MIXTRAL,
            ["model.moe.expert_ffn_hidden=100"],
            "parallel.tensor: 8 does not divide model.moe.expert_ffn_hidden (100)",
        ),
        (
            MIXTRAL,
            ["model.moe.capacity_factor=0"],
            "model.moe.capacity_factor: Input should be greater than 0",
        ),
        (
            MIXTRAL,
            ["model.moe.routed=8"],
            "model.moe.routed: unknown key; allowed keys here: experts, top_k",
        ),
        (
            SERVE,
            ["model.moe.experts=8", "model.moe.top_k=2"],
            "model.moe: the static decode pipeline (pipeline.mode: decode) does not model",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_key(path, overrides, message):
    args = ["run", str(path)] + [a for o in overrides for a in ("--set", o)]
    result = CliRunner().invoke(main, args)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(f"pipesim: error: {path}: {message}")
    assert result.stderr.count("\n") == 1


def test_a_missing_mla_rank_is_named(tmp_path):
    path = mla_without("kv_lora_rank", tmp_path)
    result = CliRunner().invoke(main, ["run", str(path)])
    assert result.exit_code == 2
    assert (
        result.stderr
        == f"pipesim: error: {path}: model.mla.kv_lora_rank: required key is missing\n"
    )
