"""Each optimizer implementation's bytes per parameter, as its source holds them.

Two stages of two layers each, ``d = 8`` data-parallel replicas; every figure is a
stage's bytes over its parameter count. Megatron-LM's table (docs/source/distrib_optimizer.md):
bf16 weights with fp32 gradients are 18 bytes per parameter, 6 + 12/d distributed.
"""

import json

import pytest
from click.testing import CliRunner

from pipesim.cli import main
from pipesim.cluster.efficiency import memory_ms
from pipesim.cluster.hardware import gpu_profile
from pipesim.cluster.memory_bound import OPTIMIZER_STEP_BYTES, OPTIMIZER_STEP_BYTES_PER_PARAM
from pipesim.cluster.model import Efficiency, TransformerModel, stage_parameters
from pipesim.cluster.optimizers import OPTIMIZERS, sharding_stage
from pipesim.cluster.pass_time import optimizer_step_ms
from pipesim.cluster.static_memory import static_memory
from pipesim.cluster.transformer import layer_parameters

MODEL = TransformerModel(layers=4, hidden=1024, heads=8, seq_len=512, vocab=32000)
PARTITION = (2, 2)
D = 8


def per_param(optimizer, pipelined=False, zero_stage=0, stage=0):
    """(weights, gradients, states) bytes per parameter of ``stage``."""
    params = stage_parameters(MODEL, PARTITION)[stage]
    memory = static_memory(
        MODEL, PARTITION, D, zero_stage, optimizer=optimizer, pipelined=pipelined
    )[stage]
    return (
        memory.weights_bytes / params,
        memory.gradients_bytes / params,
        memory.optimizer_bytes / params,
    )


def test_adam_is_what_pipesim_counted_before():
    assert per_param("adam") == (2, 2, 12)
    assert per_param("adam", zero_stage=1) == (2, 2, 12 / D)
    assert per_param("adam", zero_stage=3) == (2 / D, 2 / D, 12 / D)
    assert static_memory(MODEL, PARTITION, D, 2) == static_memory(
        MODEL, PARTITION, D, 2, optimizer="adam"
    )


def test_megatron_holds_18_bytes_and_6_plus_12_over_d_distributed():
    assert sum(per_param("megatron")) == 18
    assert per_param("megatron-distributed") == (2, 4, 12 / D)
    assert sum(per_param("megatron-distributed")) == pytest.approx(6 + 12 / D)
    # the distributed optimizer shards nothing but the states, pipeline or not
    assert per_param("megatron-distributed", pipelined=True) == (2, 4, 12 / D)


def test_deepspeed_bf16_keeps_a_whole_fp32_gradient_buffer():
    assert per_param("deepspeed-bf16") == (2, 4, 12 / D)


def test_fsdp_shards_fp32_weights_gradients_and_moments():
    params = stage_parameters(MODEL, PARTITION)[0]
    # the two largest units unsharded: the embedding and one layer
    in_use = MODEL.vocab * MODEL.hidden + layer_parameters(MODEL)
    weights, gradients, states = per_param("fsdp")
    assert weights == pytest.approx(4 / D + 2 * in_use / params)
    assert (gradients, states) == (4 / D, 8 / D)
    # under a pipeline: unsharded bf16 weights and fp32 gradients wait for the step
    assert per_param("fsdp", pipelined=True) == (4 / D + 2, 4 / D + 4, 8 / D)


def test_a_stage_of_two_units_holds_them_both_unsharded():
    # the last stage of (3, 1): one layer and the LM head, both gathered
    params = stage_parameters(MODEL, (3, 1))[1]
    assert params == layer_parameters(MODEL) + MODEL.vocab * MODEL.hidden
    memory = static_memory(MODEL, (3, 1), D, optimizer="fsdp")[1]
    assert memory.weights_bytes == pytest.approx(4 * params / D + 2 * params)


def test_forward_only_keeps_the_weights_alone():
    memory = static_memory(MODEL, PARTITION, D, training=False, optimizer="fsdp")
    params = stage_parameters(MODEL, PARTITION)
    assert [(m.weights_bytes, m.gradients_bytes, m.optimizer_bytes) for m in memory] == [
        (2 * p / D, 0.0, 0.0) for p in params
    ]


def test_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match="unknown optimizer 'sgd'; allowed: adam, megatron"):
        static_memory(MODEL, PARTITION, optimizer="sgd")


def test_each_implementation_fixes_its_sharding_over_replicas():
    assert [sharding_stage(name, 0, D) for name in OPTIMIZERS] == [0, 0, 1, 1, 3]
    assert sharding_stage("adam", 2, D) == 2
    assert sharding_stage("fsdp", 0, 1) == 0  # one replica: nothing to shard over


def test_optimizer_step_bytes_per_implementation():
    assert OPTIMIZER_STEP_BYTES == {
        "adam": 34,
        "megatron": 34,
        "megatron-distributed": 34,
        "deepspeed-bf16": 34,
        "fsdp": 32,
    }
    assert OPTIMIZER_STEP_BYTES_PER_PARAM == 34
    gpu, eff = gpu_profile("h100-sxm"), Efficiency()
    params = stage_parameters(MODEL, PARTITION)
    assert optimizer_step_ms(MODEL, PARTITION, gpu, eff, D, optimizer="fsdp") == tuple(
        memory_ms(32 * p / D, gpu, eff) for p in params
    )
    assert optimizer_step_ms(MODEL, PARTITION, gpu, eff, D, optimizer="megatron") == tuple(
        memory_ms(34 * p, gpu, eff) for p in params
    )
    assert optimizer_step_ms(MODEL, PARTITION, gpu, eff, D) == optimizer_step_ms(
        MODEL, PARTITION, gpu, eff, D, 0, 1, optimizer="adam"
    )


SCENARIO = """\
schema_version: 1
name: optimizer
pipeline: {schedule: 1f1b, devices: 2, microbatches: 4}
model: {layers: 4, hidden: 1024, heads: 8, seq_len: 512, vocab: 32000}
hardware: {gpu: h100-sxm}
parallel: {data: 8, optimizer: OPTIMIZER, zero_stage: ZERO}
"""


def run(tmp_path, optimizer, zero_stage, *args):
    path = tmp_path / "optimizer.yaml"
    path.write_text(SCENARIO.replace("OPTIMIZER", optimizer).replace("ZERO", str(zero_stage)))
    return path, CliRunner().invoke(main, ["run", str(path), "--format", "json", *args])


def test_run_reports_the_implementations_static_memory(tmp_path):
    _, result = run(tmp_path, "megatron-distributed", 0)
    assert result.exit_code == 0, result.output
    devices = json.loads(result.stdout)["per_device"]
    params = stage_parameters(MODEL, PARTITION)
    assert [d["static_memory_bytes"] for d in devices] == [
        pytest.approx((6 + 12 / D) * p) for p in params
    ]


def test_a_zero_stage_the_implementation_does_not_run_is_one_error_line(tmp_path):
    path, result = run(tmp_path, "fsdp", 1)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"pipesim: error: {path}: parallel.optimizer: 'fsdp' shards as ZeRO stage 3; "
        "parallel.zero_stage must be 0 or 3 with it, got 1 (got 'fsdp')\n"
    )


def test_an_unknown_optimizer_is_one_error_line(tmp_path):
    path, result = run(tmp_path, "sgd", 0)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"pipesim: error: {path}: parallel.optimizer: Input should")
    assert result.stderr.count("\n") == 1
