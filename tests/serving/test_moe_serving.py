"""``pipesim serve`` on mixture-of-experts and MLA models: the bundled Mixtral scenario
conserves requests and tokens under tensor and expert parallelism, its KV cache is the
memory the weights leave, MLA's latent sizes the cache of a DeepSeek-style model, and
every bad expert-parallel setting is one error line with exit code 2."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipesim.cli import main
from pipesim.cluster.hardware import gpu_profile
from pipesim.cluster.transformer import parameter_count, stage_parameters
from pipesim.scenario.serving import load_serving, run_serving
from tests.serving.test_conservation import check_invariants

ROOT = Path(__file__).resolve().parents[2]
MIXTRAL = ROOT / "scenarios" / "serve-mixtral-8x7b-h100.yaml"
SMALL = ["serving.workload.requests=30", "serving.workload.rate=6"]


@pytest.mark.parametrize("expert", [1, 8])
def test_a_mixtral_run_conserves_requests_and_tokens(expert):
    scenario = load_serving(MIXTRAL, [*SMALL, f"parallel.expert={expert}"])
    run = run_serving(scenario)
    check_invariants(scenario.config, list(scenario.requests), run.result)
    assert run.report.completed == 30


def test_mixtral_kv_blocks_are_the_memory_the_weights_leave():
    """Each of the 8 GPUs holds an eighth of Mixtral's 46.7B parameters (the experts split
    8 ways or one whole expert each: the same bytes) and, per token, 32 layers x 1 KV head
    (8 over 8 GPUs) x 128 x 2 (keys, values) x 2 bytes."""
    scenario = load_serving(MIXTRAL, SMALL)
    h100 = gpu_profile("h100-sxm")
    total = parameter_count(_model(scenario)).total
    free = h100.memory_bytes * 0.9 - total * 2 / 8
    tokens = math.floor(free / (32 * 1 * 128 * 2 * 2))
    assert scenario.config.replica.kv_blocks == tokens // 16
    with_ep = load_serving(MIXTRAL, [*SMALL, "parallel.expert=8"])
    assert with_ep.config.replica.kv_blocks == tokens // 16


def _model(scenario):
    return scenario.config.replica.costs.model


MLA_SCENARIO = """\
schema_version: 1
name: mla-serve
pipeline: {devices: 1}
parallel: {tensor: 2, expert: 2}
model:
  layers: 6
  hidden: 1024
  heads: 16
  attention: mla
  mla: {q_lora_rank: 256, kv_lora_rank: 512, qk_nope_head_dim: 64, qk_rope_head_dim: 32,
        v_head_dim: 64}
  ffn_hidden: 4096
  mlp: gated
  moe: {experts: 16, top_k: 4, expert_ffn_hidden: 512, shared_experts: 1, dense_layers: 1}
  seq_len: 4096
  vocab: 8000
  dtype: bf16
hardware: {gpu: h100-sxm, gpus_per_node: 8, intra_node_link: nvlink4}
serving:
  workload: {arrival: poisson, rate: 20, requests: 20, prompt_tokens: 200, output_tokens: 20}
"""


def test_an_mla_model_caches_its_latent(tmp_path):
    """A DeepSeek-style model (MLA, a dense first layer, 16 routed experts and a shared one)
    on TP2 x EP2: each GPU keeps every token's 512 + 32 latent elements for each of 6
    layers, 6,528 bytes, whole on both GPUs; the blocks are what the weights leave."""
    path = tmp_path / "mla.yaml"
    path.write_text(MLA_SCENARIO)
    scenario = load_serving(path)
    model = _model(scenario)
    weights = sum(stage_parameters(model, (6,))) * 2 / 2
    free = gpu_profile("h100-sxm").memory_bytes * 0.9 - weights
    assert scenario.config.replica.kv_blocks == math.floor(free / (6 * 544 * 2)) // 16
    run = run_serving(scenario)
    check_invariants(scenario.config, list(scenario.requests), run.result)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["parallel.expert=3"], "parallel.expert: 3 does not divide model.moe.experts (8)"),
        (
            ["model.moe.top_k=9"],
            "model.moe.top_k: 9 experts per token of 8; allowed: 1 to model.moe.experts (8)",
        ),
        (
            ["parallel.expert=16"],
            "parallel.expert: 16 expert-parallel ranks, but a replica has 8 GPUs",
        ),
        (
            ["parallel.tensor=2", "parallel.expert=4"],
            "parallel.expert: 4 expert-parallel ranks, but a replica has 2 GPUs",
        ),
        (
            ["parallel.tensor=2", "pipeline.devices=2", "parallel.expert=4"],
            "parallel.expert: 4 ranks do not divide parallel.tensor (2)",
        ),
        (
            ["model.moe.routing.kind=zipf"],
            "model.moe.routing.kind: pipesim serve models uniform routing only",
        ),
        (["model.mtp_layers=1"], "model.mtp_layers: 1; pipesim serve does not model"),
        (["parallel.expert_tensor=1"], "parallel.expert_tensor: not used by pipesim serve"),
    ],
)
def test_bad_expert_settings_are_one_line(overrides, message):
    args = ["serve", str(MIXTRAL)] + [a for o in overrides for a in ("--set", o)]
    result = CliRunner().invoke(main, args)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(f"pipesim: error: {MIXTRAL}: {message}")
    assert result.stderr.count("\n") == 1
