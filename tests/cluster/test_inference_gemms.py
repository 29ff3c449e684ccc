"""The linear layers of an inference iteration: each GEMM by its shape or its weight reads."""

from __future__ import annotations

import pytest

from pipesim.cluster.efficiency import Efficiency
from pipesim.cluster.gemm import gemm_ms
from pipesim.cluster.hardware import gpu_profile
from pipesim.cluster.inference_gemms import linear_layers_ms, lm_head_ms, weight_bound_gemm_ms
from pipesim.cluster.model import TransformerModel
from pipesim.cluster.transformer import layer_gemm_shapes

A100 = gpu_profile("a100-sxm-80gb")  # 108 SMs, 267.9 TFLOP/s measured, step fraction 0.81
READ = 2039e9 * 0.88  # the serving path's weight reads on an A100 80GB
# Llama-2-7B (its config.json): hidden 4096, 32 heads, SwiGLU width 11008, vocabulary 32000.
LLAMA2_7B = TransformerModel(
    layers=32, hidden=4096, heads=32, ffn_hidden=11008, mlp="gated", seq_len=4096, vocab=32000
)
RATE = 267.9e12 * 0.81  # what an A100 training step's GEMMs keep of the measured rate


def test_one_token_reads_the_weights():
    """A 4096 x 4096 GEMM of one row: its 32 MiB of weights take 18.7 us at 1.79 TB/s; its
    math, 1/128 of a 128-row GEMM that fills 32 of 108 SMs, 0.6 us."""
    read_ms = 4096 * 4096 * 2 / READ * 1e3
    got = weight_bound_gemm_ms(
        1, 4096, 4096, A100, Efficiency(), read_bytes_per_s=READ, dtype_bytes=2
    )
    assert got == pytest.approx(read_ms, rel=1e-12)
    assert got == pytest.approx(0.01870, abs=1e-5)


def test_a_128_token_prompt_pays_the_wave_losses_of_a_narrow_gemm():
    """The attention output of Llama-2-7B over 128 tokens, 128 x 4096 x 4096: 32 tiles of
    128 x 128 on 108 SMs, one wave with 76 SMs idle (32 / 108 of the rate), and 4096 /
    (4096 + 64) for the reduction: 67.8 us, 3.6 times its 18.7 us of weight reads."""
    flops = 2 * 128 * 4096 * 4096
    expected_ms = flops / (RATE * 32 / 108 * 4096 / 4160) * 1e3
    got = weight_bound_gemm_ms(
        128, 4096, 4096, A100, Efficiency(), read_bytes_per_s=READ, dtype_bytes=2
    )
    assert got == pytest.approx(expected_ms, rel=1e-12)
    assert got == pytest.approx(0.0678, abs=1e-4)


def test_a_layer_is_its_four_gemms_and_splits_over_tensor_ranks():
    shapes = layer_gemm_shapes(LLAMA2_7B, 2)
    assert shapes == ((6144, 4096), (4096, 2048), (11008, 4096), (4096, 5504))
    expected = sum(gemm_ms(2048, n, k, A100, Efficiency()) for n, k in shapes)
    got = linear_layers_ms(LLAMA2_7B, 3, 2048, A100, Efficiency(), tensor=2, read_bytes_per_s=READ)
    assert got == pytest.approx(3 * expected, rel=1e-12)  # 2048 tokens: compute bound


def test_the_lm_head_runs_for_the_tokens_that_sample():
    read_ms = 32000 * 4096 * 2 / READ * 1e3
    kwargs = {"tensor": 1, "read_bytes_per_s": READ}
    assert lm_head_ms(LLAMA2_7B, 1, A100, Efficiency(), **kwargs) == pytest.approx(read_ms)
    assert lm_head_ms(LLAMA2_7B, 0, A100, Efficiency(), **kwargs) == 0.0
