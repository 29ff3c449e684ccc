"""The cost model beyond matrix multiplications, by hand on a toy GPU: memory-bound bytes,
attention at its own rate, overlapped tensor-parallel communication, recomputation, the
embedding and LM-head stages, the optimizer step and the exposed gradient reduction."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.cluster.efficiency import FLOPS_ONLY, Efficiency, memory_ms
from pipesim.cluster.hardware import GpuProfile, gpu_profile
from pipesim.cluster.memory_bound import (
    OPTIMIZER_STEP_BYTES_PER_PARAM,
    PassBytes,
    embedding_memory_bound_bytes,
    layer_memory_bound_bytes,
    lm_head_memory_bound_bytes,
    stage_memory_bound_bytes,
)
from pipesim.cluster.model import (
    TransformerModel,
    flops_loads,
    layer_flops,
    partition_layers,
    stage_costs,
    time_loads,
)
from pipesim.cluster.pass_time import (
    PassTimes,
    TensorParallel,
    exposed_data_parallel_ms,
    layer_pass_times,
    optimizer_step_ms,
    stage_pass_times,
)
from pipesim.sim.links import Link

# s = 4, b = 1, h = 8, f = 32, a = 2, V = 16: T = 4 tokens.
TINY = TransformerModel(layers=4, hidden=8, heads=2, seq_len=4, vocab=16)
FLASH = replace(TINY, flash_attention=True)
# 1e6 FLOP/s and 2000 bytes/s: at these fractions GEMMs run 500 FLOPs per ms, attention
# 250 FLOPs per ms, memory-bound operators 1 byte per ms.
TOY = GpuProfile("toy", peak_tflops=1e-6, memory_bandwidth_gbps=2e-6, memory_bytes=2**30)
EFF = Efficiency(
    max_fraction=0.5,
    half_tokens=0.0,
    attention_fraction=0.25,
    memory_fraction=0.5,
    gemm_fraction=0.5,
    gemm_half_dim=0.0,
)
ALONE = TensorParallel()


def test_layer_bytes_by_hand():
    # 2 bytes x T x (10h + 2f + 4as) = 8 (80 + 64 + 32) forward, twice that backward.
    assert layer_memory_bound_bytes(TINY, 1) == PassBytes(1408, 2816)
    assert layer_memory_bound_bytes(FLASH, 1) == PassBytes(1152, 2304)  # no softmax
    assert layer_memory_bound_bytes(TINY, 3) == PassBytes(3 * 1408, 3 * 2816)
    # Tensor parallel t = 2 splits the activation and the scores; the norms and residual
    # adds only under sequence parallelism.
    assert layer_memory_bound_bytes(TINY, 1, 2) == PassBytes(8 * (80 + 32 + 16), 16 * 128)
    assert layer_memory_bound_bytes(TINY, 1, 2, True).forward == 8 * (40 + 32 + 16)
    gated = replace(FLASH, mlp="gated")  # SwiGLU reads two f-wide tensors, writes one
    assert layer_memory_bound_bytes(gated, 1).forward == 8 * (80 + 96)


def test_embedding_and_lm_head_bytes_by_hand():
    assert embedding_memory_bound_bytes(TINY, 1) == PassBytes(128, 128)  # 2 x 2 T h
    # Final norm 2 x 2 T h = 128 (256 backward); T V = 64 fp32 logits at 30 and 14 bytes.
    assert lm_head_memory_bound_bytes(TINY, 1) == PassBytes(128 + 1920, 256 + 896)
    assert lm_head_memory_bound_bytes(TINY, 1, 2) == PassBytes(128 + 960, 256 + 448)
    assert lm_head_memory_bound_bytes(TINY, 1, 2, True) == PassBytes(64 + 960, 128 + 448)
    both = stage_memory_bound_bytes(FLASH, 2, 1, first=True, last=True)
    assert both == PassBytes(2 * 1152 + 128 + 2048, 2 * 2304 + 128 + 1152)


def test_layer_passes_by_hand():
    # Linear 2 b s (4 h^2 + 2 h f) = 6144 FLOPs per pass at 500/ms; scores 4 b s^2 h = 512
    # at 250/ms (twice in I); bytes at 1/ms.
    assert layer_pass_times(FLASH, 1, TOY, EFF, ALONE) == PassTimes(
        6144 / 500 + 512 / 250 + 1152, 6144 / 500 + 1024 / 250 + 2304, 6144 / 500
    )
    # Without flash attention the scores are batched GEMMs at the GEMM rate.
    plain = layer_pass_times(TINY, 1, TOY, EFF, ALONE)
    assert plain.forward_ms == pytest.approx(6144 / 500 + 512 / 500 + 1408)


def test_first_and_last_stages_by_hand():
    layer = layer_pass_times(FLASH, 1, TOY, EFF, ALONE)
    first = stage_pass_times(FLASH, 2, 1, TOY, EFF, ALONE, first=True, last=False)
    assert first.forward_ms == pytest.approx(2 * layer.forward_ms + 128)
    assert first.backward_input_ms == pytest.approx(2 * layer.backward_input_ms + 128)
    assert first.backward_weight_ms == pytest.approx(2 * layer.backward_weight_ms)
    # LM head 2 b s h V = 1024 FLOPs per pass at 500/ms, plus norm and cross-entropy bytes.
    last = stage_pass_times(FLASH, 2, 1, TOY, EFF, ALONE, first=False, last=True)
    assert last.forward_ms == pytest.approx(2 * layer.forward_ms + 1024 / 500 + 2048)
    assert last.backward_input_ms == pytest.approx(2 * layer.backward_input_ms + 2.048 + 1152)
    assert last.backward_weight_ms == pytest.approx(2 * layer.backward_weight_ms + 2.048)


def test_recomputation_runs_the_layers_forward_again_inside_i():
    again = replace(FLASH, recompute=True)
    plain = stage_pass_times(FLASH, 2, 1, TOY, EFF, ALONE, first=True, last=False)
    redo = stage_pass_times(again, 2, 1, TOY, EFF, ALONE, first=True, last=False)
    layers_forward = plain.forward_ms - 128  # without the embedding lookup
    assert redo.backward_input_ms == pytest.approx(plain.backward_input_ms + layers_forward)
    assert (redo.forward_ms, redo.backward_weight_ms) == (
        plain.forward_ms,
        plain.backward_weight_ms,
    )


def test_overlapped_tensor_parallel_communication_exposes_what_the_gemms_do_not_hide():
    gemm = 6144 / 2 / 500  # t = 2 halves the GEMM FLOPs: 6.144 ms
    for comm, hidden, exposed in ((4.0, 1.0, 0.0), (4.0, 0.75, 1.0), (10.0, 1.0, 10.0 - gemm)):
        tp = TensorParallel(degree=2, comm_ms=comm, overlap=True, hidden_fraction=hidden)
        assert tp.exposed_ms(gemm) == pytest.approx(exposed)
        times = layer_pass_times(FLASH, 1, TOY, EFF, tp)
        no_comm = layer_pass_times(FLASH, 1, TOY, EFF, replace(tp, comm_ms=0.0))
        assert times.forward_ms == pytest.approx(no_comm.forward_ms + exposed)
        assert times.backward_input_ms == pytest.approx(no_comm.backward_input_ms + exposed)
        assert times.backward_weight_ms == no_comm.backward_weight_ms
    assert TensorParallel(degree=2, comm_ms=4.0).exposed_ms(gemm) == 4.0  # not overlapped


def test_stage_costs_passes_the_overlap_through():
    link = Link(latency_us=1.0, bandwidth_gbps=1.0)
    full = stage_costs(FLASH, (2, 2), 1, TOY, EFF, tensor=2, tensor_link=link)
    hidden = stage_costs(
        FLASH, (2, 2), 1, TOY, EFF, tensor=2, tensor_link=link, tensor_overlap=True
    )
    ring = 2 * 1 / 2 * 64 / 1e6 + 2 * 0.001  # t = 2, a 64-byte activation
    per_layer = 2 * ring  # two all-reduces, shorter than the 6.144 ms GEMM
    # what is hidden costs the GEMMs overlap_slowdown of itself
    hidden_part = per_layer * EFF.tensor_overlap_fraction
    exposed = per_layer - hidden_part + EFF.overlap_slowdown * hidden_part
    assert full.forward_ms[0] - hidden.forward_ms[0] == pytest.approx(2 * (per_layer - exposed))


def test_hidden_tensor_parallel_communication_slows_the_gemms():
    # 4 ms of communication under a 6.144 ms GEMM, 3 ms of it hidden: 1 ms shows, and the
    # GEMMs run 10 % of the 3 ms longer
    gemm = 6144 / 2 / 500
    tp = TensorParallel(degree=2, comm_ms=4.0, overlap=True, hidden_fraction=0.75, slowdown=0.1)
    assert tp.exposed_ms(gemm) == pytest.approx(1.0 + 0.3)
    # more communication than GEMM: the GEMM's 6.144 ms hidden, and 10 % of it added
    tp = replace(tp, comm_ms=10.0, hidden_fraction=1.0)
    assert tp.exposed_ms(gemm) == pytest.approx(10.0 - gemm + 0.1 * gemm)
    assert replace(tp, overlap=False).exposed_ms(gemm) == 10.0  # not overlapped: no slowdown


def test_optimizer_step_bytes_per_owned_parameter():
    params = (2 * 872 + 128, 2 * 872 + 128)  # stage_parameters(TINY, (2, 2))
    assert optimizer_step_ms(TINY, (2, 2), TOY, EFF) == pytest.approx(
        tuple(OPTIMIZER_STEP_BYTES_PER_PARAM * p for p in params)
    )
    # ZeRO-1 over 4 replicas and TP 2: each GPU updates an eighth.
    assert optimizer_step_ms(TINY, (2, 2), TOY, EFF, 4, 1, 2) == pytest.approx(
        tuple(34 * p / 8 for p in params)
    )
    assert optimizer_step_ms(TINY, (2, 2), TOY, EFF, 4, 0, 1)[0] == pytest.approx(34 * 1872)
    assert optimizer_step_ms(TINY, (2, 2), TOY, FLOPS_ONLY) == (0.0, 0.0)


def test_exposed_gradient_reduction():
    assert exposed_data_parallel_ms(10.0, 1.0, 2.0, overlap=False) == 10.0
    # Reduce-scatter half 5 behind a 2 ms backward, all-gather half 5 behind a 1 ms forward.
    assert exposed_data_parallel_ms(10.0, 1.0, 2.0, overlap=True) == pytest.approx(3.0 + 4.0)
    assert exposed_data_parallel_ms(10.0, 6.0, 7.0, overlap=True) == 0.0
    # each half slows the pass it hides under by 10 % of what it hides: 2 of the first half
    # and 1 of the second are hidden, 5 - 6 and 5 - 7 of nothing outlast
    assert exposed_data_parallel_ms(10.0, 1.0, 2.0, overlap=True, slowdown=0.1) == pytest.approx(
        3.0 + 4.0 + 0.1 * (2.0 + 1.0)
    )
    assert exposed_data_parallel_ms(10.0, 6.0, 7.0, True, slowdown=0.1) == pytest.approx(1.0)
    assert exposed_data_parallel_ms(10.0, 6.0, 7.0, False, slowdown=0.1) == 10.0


def test_efficiency_checks_its_fractions():
    with pytest.raises(ValueError, match="memory_fraction"):
        Efficiency(memory_fraction=0.0)
    with pytest.raises(ValueError, match="tensor_overlap_fraction"):
        Efficiency(tensor_overlap_fraction=1.5)
    with pytest.raises(ValueError, match="overlap_slowdown"):
        Efficiency(overlap_slowdown=-0.1)
    assert memory_ms(1e9, gpu_profile("h100-sxm"), Efficiency(memory_fraction=0.5)) == (
        pytest.approx(1e3 / 1541)  # half of 0.92 x 3,350 GB/s
    )


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1024, 2048, 4096, 8192, 16384]), st.sampled_from(["plain", "gated"]))
def test_memory_bound_share_falls_as_the_model_widens(hidden, mlp):
    """GEMM FLOPs grow as h^2 per token, memory-bound bytes as h: their ratio halves
    exactly each time h doubles (f = 4h), so wide models lose less to memory-bound work."""
    h100 = gpu_profile("h100-sxm")

    def model(width: int) -> TransformerModel:
        return TransformerModel(
            layers=1,
            hidden=width,
            heads=width // 128,
            seq_len=4096,
            vocab=32000,
            mlp=mlp,
            flash_attention=True,
        )

    def bytes_per_flop(width: int) -> float:
        moved = layer_memory_bound_bytes(model(width), 1).forward
        return moved / layer_flops(model(width), 1).backward_weight

    assert bytes_per_flop(2 * hidden) == pytest.approx(bytes_per_flop(hidden) / 2, rel=1e-12)

    def share(width: int) -> float:
        full = layer_pass_times(model(width), 1, h100, Efficiency(), ALONE).forward_ms
        flops_only = replace(Efficiency(), memory_fraction=None)
        return 1 - layer_pass_times(model(width), 1, h100, flops_only, ALONE).forward_ms / full

    assert 0 < share(2 * hidden) < share(hidden)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8), st.booleans(), st.booleans())
def test_memory_bound_work_only_adds_time(microbatch_size, flash, recompute):
    model = replace(TINY, flash_attention=flash, recompute=recompute)
    with_bytes = stage_costs(model, (2, 2), microbatch_size, TOY, EFF)
    without = stage_costs(model, (2, 2), microbatch_size, TOY, replace(EFF, memory_fraction=None))
    for more, less in (
        (with_bytes.forward_ms, without.forward_ms),
        (with_bytes.backward_input_ms, without.backward_input_ms),
    ):
        assert all(a > b for a, b in zip(more, less, strict=True))
    assert with_bytes.backward_weight_ms == without.backward_weight_ms


@settings(max_examples=30, deadline=None)
@given(
    st.integers(2, 12),
    st.sampled_from([64, 128, 256]),
    st.integers(1000, 200_000),
    st.integers(1, 6),
    st.booleans(),
)
def test_a_time_balanced_split_is_never_slower_than_a_flops_balanced_one(
    layers, hidden, vocab, stages, flash
):
    model = TransformerModel(
        layers=layers,
        hidden=hidden,
        heads=hidden // 64,
        seq_len=512,
        vocab=vocab,
        flash_attention=flash,
    )
    stages = min(stages, layers)
    h100 = gpu_profile("h100-sxm")

    def slowest_ms(partition) -> float:
        costs = stage_costs(model, partition, 1, h100)
        return max(f + b for f, b in zip(costs.forward_ms, costs.backward_ms, strict=True))

    by_flops = partition_layers(model, stages, "balanced", loads=flops_loads(model))
    by_time = partition_layers(
        model, stages, "balanced", loads=time_loads(model, 1, h100, Efficiency())
    )
    assert partition_layers(model, stages, "balanced") == by_flops
    assert slowest_ms(by_time) <= slowest_ms(by_flops) * (1 + 1e-9)
