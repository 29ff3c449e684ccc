"""One GEMM's time from its shape: wave quantisation, the measured rates, FP8, the kernel floor."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pipesim.cluster.activations import layer_activation_memory_bytes
from pipesim.cluster.efficiency import Efficiency
from pipesim.cluster.gemm import gemm_ms, shape_efficiency, thin_gemm_ms, wave_efficiency
from pipesim.cluster.hardware import gpu_profile
from pipesim.cluster.model import TransformerModel
from pipesim.cluster.pass_time import TensorParallel, layer_pass_times, linear_pass_ms
from pipesim.cluster.static_memory import static_memory

ROOT = Path(__file__).parents[2]
H100, A100 = gpu_profile("h100-sxm"), gpu_profile("a100-sxm-80gb")
# The benchmark's own rate: no step-level fraction, no short-reduction penalty.
BENCH = Efficiency(gemm_fraction=1.0, gemm_half_dim=0.0)


def test_one_tile_more_than_the_sms_runs_at_about_half_the_rate():
    # 128 x 256 tiles: 132 of them fill one wave of an H100's 132 SMs; 133 need two.
    assert wave_efficiency(128 * 132, 256, 132) == 1.0
    assert wave_efficiency(128 * 133, 256, 132) == 133 / 264
    # A partial edge tile is computed whole: m = 64 fills half of one tile.
    assert wave_efficiency(64, 256, 1) == 0.5
    assert wave_efficiency(64, 256, None) == 1.0  # no SM count: no quantisation
    # The 128 x 128 tile cuts the same output in 266 tiles: three waves of 132, 266 / 396.
    assert shape_efficiency(128 * 133, 256, 1024, H100, BENCH) == 266 / 396


def test_a100_at_its_benchmark_shape_reaches_the_measured_rate():
    # MAMF's best A100 shape, 6912 x 16384 x 2048: 54 x 64 = 3456 tiles of 128 x 256,
    # 32 full waves of 108 SMs, so exactly 267.9 TFLOP/s.
    flops = 2 * 6912 * 16384 * 2048
    assert gemm_ms(6912, 16384, 2048, A100, BENCH) == pytest.approx(flops / 267.9e12 * 1e3)
    # With the defaults: the A100's own fitted step fraction, 0.81 of it, and
    # 2048 / (2048 + 64) for the reduction.
    expected = flops / (267.9e12 * 0.81 * 2048 / 2112) * 1e3
    assert gemm_ms(6912, 16384, 2048, A100, Efficiency()) == pytest.approx(expected)


def test_h100_square_gemm():
    # 8192^3: 2048 tiles of 128 x 256 take 16 waves of 132 SMs (2112 slots); the 128 x 128
    # tiling gives 4096 / (32 x 132), the same 0.9697.
    flops = 2 * 8192**3
    rate = 792.1e12 * 2048 / 2112
    assert gemm_ms(8192, 8192, 8192, H100, BENCH) == pytest.approx(flops / rate * 1e3)
    # The benchmark's best H100 shape 6144 x 17920 x 2816 (MAMF): 128 x 128 tiles, 6720 in
    # 51 waves (6732 slots).
    best = gemm_ms(6144, 17920, 2816, H100, BENCH)
    assert best == pytest.approx(2 * 6144 * 17920 * 2816 / (792.1e12 * 6720 / 6732) * 1e3)


def test_a_gemm_thinner_than_a_tile_pays_for_its_rows_only():
    # 8192 x 8192 weights on an H100: 32 columns of 256 (or 64 of 128) tiles, one wave.
    # 128 rows fill one tile row (44.7 us); 64 rows pay half of it, 16 rows an eighth, and
    # one row would pay 1/128 (0.35 us) but no kernel is shorter than the launch (2 us).
    full = gemm_ms(128, 8192, 8192, H100, BENCH)
    assert full == pytest.approx(0.0447, abs=1e-4)
    assert thin_gemm_ms(128, 8192, 8192, H100, BENCH) == full
    assert thin_gemm_ms(64, 8192, 8192, H100, BENCH) == pytest.approx(full / 2)
    assert thin_gemm_ms(16, 8192, 8192, H100, BENCH) == pytest.approx(full / 8)
    assert thin_gemm_ms(1, 8192, 8192, H100, BENCH) == H100.kernel_launch_us * 1e-3
    # from a tile's height on it is gemm_ms, partial tile rows and all
    assert thin_gemm_ms(129, 8192, 8192, H100, BENCH) == gemm_ms(129, 8192, 8192, H100, BENCH)
    assert thin_gemm_ms(0, 8192, 8192, H100, BENCH) == 0.0


def test_fp8_is_faster_by_the_measured_rate_ratio():
    shape = (8192, 8192, 8192)
    bf16 = gemm_ms(*shape, H100, Efficiency())
    tensorwise = gemm_ms(*shape, H100, Efficiency(), fp8="tensorwise")
    blockwise = gemm_ms(*shape, H100, Efficiency(), fp8="blockwise")
    assert bf16 / tensorwise == pytest.approx(1453.4 / 792.1)
    assert blockwise == pytest.approx(tensorwise * 1.10)
    b200 = gpu_profile("b200")
    assert gemm_ms(*shape, b200, BENCH) / gemm_ms(*shape, b200, BENCH, fp8="tensorwise") == (
        pytest.approx(3432.5 / 1745.0)
    )


def test_no_kernel_is_shorter_than_its_launch():
    assert gemm_ms(1, 1, 1, H100, Efficiency()) == pytest.approx(0.002)  # 2 us
    assert gemm_ms(0, 8, 8, H100, Efficiency()) == 0.0


def test_fp8_on_a_gpu_without_it_and_unknown_recipes_are_refused():
    with pytest.raises(ValueError, match="'a100-sxm-80gb' has no FP8"):
        gemm_ms(1024, 1024, 1024, A100, Efficiency(), fp8="tensorwise")
    with pytest.raises(ValueError, match="fp8 must be one of tensorwise, blockwise"):
        gemm_ms(1024, 1024, 1024, H100, Efficiency(), fp8="fp4")
    with pytest.raises(ValueError, match="fp8"):
        TransformerModel(layers=1, hidden=8, heads=2, seq_len=4, vocab=16, fp8="e4m3")


def test_a_layer_prices_each_gemm_by_its_shape():
    # Llama-70B-like layer at TP 8, 4096 tokens: the weight gradient of the attention output
    # projection is (h/t, h, T) = (1024, 8192, 4096), its forward (T, h, h/t).
    model = TransformerModel(
        layers=1, hidden=8192, heads=64, kv_heads=8, seq_len=4096, vocab=32000, ffn_hidden=28672
    )
    model = replace(model, mlp="gated", flash_attention=True)
    shapes = ((8192 + 2 * 1024) // 8, 8192), (8192, 1024), (2 * 28672 // 8, 8192), (8192, 3584)
    eff = Efficiency()
    forward = sum(gemm_ms(4096, n, k, H100, eff) for n, k in shapes)
    weights = sum(gemm_ms(k, n, 4096, H100, eff) for n, k in shapes)
    assert linear_pass_ms(shapes, 4096, H100, eff)[::2] == pytest.approx((forward, weights))
    times = layer_pass_times(model, 1, H100, eff, TensorParallel(degree=8))
    assert times.backward_weight_ms == pytest.approx(weights)


def test_fp8_memory_keeps_linear_inputs_in_one_byte_and_adds_weight_copies():
    bf16 = TransformerModel(layers=2, hidden=8, heads=2, seq_len=4, vocab=16)
    fp8 = replace(bf16, fp8="tensorwise")
    # sbh = 32, f = 32: the QKV and MLP inputs lose 32 each, the output projection's input
    # 32 and the down projection's 4 x 32 = 128 (sbf): 224 bytes fewer of 34 x 32 + 5as^2b.
    assert (
        layer_activation_memory_bytes(bf16, 1)[0] - layer_activation_memory_bytes(fp8, 1)[0] == 224
    )
    # FP8 weight and transposed copies: 2 bytes per layer parameter (872 per layer).
    extra = (
        static_memory(fp8, (1, 1))[0].weights_bytes - static_memory(bf16, (1, 1))[0].weights_bytes
    )
    assert extra == 2 * 872


def _pipesim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipesim", *args], capture_output=True, text=True, cwd=ROOT
    )


def test_cli_refuses_fp8_on_an_a100_and_an_unknown_gpu():
    scenario = "scenarios/llama-70b-4x8-h100.yaml"
    gpu, fp8 = "hardware.gpu=a100-sxm-80gb", "model.fp8=tensorwise"
    result = _pipesim("run", scenario, "--set", gpu, "--set", fp8)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"pipesim: error: {scenario}: model.fp8: 'tensorwise' needs FP8 tensor cores, which "
        "hardware.gpu 'a100-sxm-80gb' lacks; leave model.fp8 out (bf16) or use one of: "
        "h100-sxm, h800, h100-pcie, h200, b200, l40s"
    ]
    unknown = _pipesim("run", scenario, "--set", "hardware.gpu=h900")
    assert unknown.returncode == 2
    assert len(unknown.stderr.splitlines()) == 1
    assert unknown.stderr.startswith(f"pipesim: error: {scenario}: hardware.gpu: unknown gpu")


def test_an_fp8_layer_runs_its_weight_gradients_at_the_fp8_rate():
    # Every GEMM of this layer is far above the kernel floor, so the weight-gradient pass,
    # GEMMs only, shrinks by exactly the rate ratio; attention stays bf16.
    model = TransformerModel(layers=1, hidden=8192, heads=64, seq_len=4096, vocab=32000)
    model = replace(model, flash_attention=True)
    bf16 = layer_pass_times(model, 1, H100, Efficiency(), TensorParallel(degree=8))
    fp8 = layer_pass_times(
        replace(model, fp8="tensorwise"), 1, H100, Efficiency(), TensorParallel(degree=8)
    )
    assert bf16.backward_weight_ms / fp8.backward_weight_ms == pytest.approx(1453.4 / 792.1)
    assert bf16.forward_ms / fp8.forward_ms < 1453.4 / 792.1
