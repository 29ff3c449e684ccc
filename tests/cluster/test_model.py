"""Transformer FLOPs, memory, parameters, partitioning, collectives and per-stage costs,
checked against hand-computed values for one small model."""

from __future__ import annotations

import itertools
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.cluster.hardware import GpuProfile
from pipesim.cluster.model import (
    FLOPS_ONLY,
    Efficiency,
    PassFlops,
    TransformerModel,
    activation_message_bytes,
    data_parallel_allreduce_ms,
    layer_activation_memory_bytes,
    layer_flops,
    layer_parameters,
    lm_head_flops,
    mfu,
    model_flops_per_step,
    partition_layers,
    stage_costs,
    stage_extra_activation_bytes,
    stage_flops,
    stage_parameters,
    stage_work_flops,
    static_memory,
)
from pipesim.cluster.parallel import (
    data_parallel_link,
    hierarchical_allreduce_ms,
    ring_allreduce_ms,
    tensor_parallel_comm_ms,
)
from pipesim.sim.costs import Costs
from pipesim.sim.links import Link

# s = 4, b = 1, h = 8: sbh = 32.
TINY = TransformerModel(layers=4, hidden=8, heads=2, seq_len=4, vocab=16)
# 1e6 FLOP/s peak; with a flat 50 % efficiency a pass runs at 5e5 FLOP/s = 500 FLOPs per ms.
# FLAT counts FLOPs only (no memory-bound operators, attention at the GEMM rate):
# tests/cluster/test_pass_time.py checks the rest of the cost model.
TOY_GPU = GpuProfile("toy", peak_tflops=1e-6, memory_bandwidth_gbps=1.0, memory_bytes=2**30)
FLAT = Efficiency(
    max_fraction=0.5,
    half_tokens=0.0,
    attention_fraction=None,
    memory_fraction=None,
    gemm_fraction=0.5,
    gemm_half_dim=0.0,
)


# -- FLOPs -----------------------------------------------------------------------------------


def test_layer_flops_match_zero_bubble_table_1():
    # F = sbh(24h + 4s), I = sbh(24h + 8s), W = sbh(24h) with sbh = 32, h = 8, s = 4.
    assert layer_flops(TINY, 1) == PassFlops(32 * 208, 32 * 224, 32 * 192)
    assert layer_flops(TINY, 3) == PassFlops(3 * 6656, 3 * 7168, 3 * 6144)


def test_layer_flops_use_the_real_ffn_width():
    narrow = TransformerModel(layers=4, hidden=8, heads=2, seq_len=4, vocab=16, ffn_hidden=16)
    # linear = sbh(8h + 4f) = 32 * 128, scores = 4 b s^2 h = 512.
    assert layer_flops(narrow, 1) == PassFlops(4096 + 512, 4096 + 1024, 4096)
    assert TINY.ffn_hidden == 32


def test_lm_head_and_stage_flops():
    assert lm_head_flops(TINY, 1) == PassFlops(1024, 1024, 1024)  # 2 b s h V
    assert stage_flops(TINY, 2, 1, first=True, last=False) == PassFlops(13312, 14336, 12288)
    assert stage_flops(TINY, 2, 1, first=False, last=True) == PassFlops(14336, 15360, 13312)
    recompute = TransformerModel(layers=4, hidden=8, heads=2, seq_len=4, vocab=16, recompute=True)
    # Recomputation repeats the forward inside I.
    assert stage_flops(recompute, 2, 1, first=True, last=False) == PassFlops(
        13312, 14336 + 13312, 12288
    )


def test_model_flops_per_step_is_megatrons_formula():
    batch, s, layers, h, vocab = 3, 4, 4, 8, 16
    megatron = (
        72
        * batch
        * s
        * layers
        * h
        * h
        * (1 + Fraction(s, 6 * h) + Fraction(vocab, 12 * h * layers))
    )
    assert model_flops_per_step(TINY, batch) == megatron
    assert model_flops_per_step(TINY, batch) == 3 * (4 * (6656 + 7168 + 6144) + 3 * 1024)


def test_forward_only_flops_count_the_forward_pass_alone():
    batch, s, layers, h, vocab = 3, 4, 4, 8, 16
    # A third of Megatron's 72: forward is 24 B s L h^2 (1 + s/(6h) + V/(12 h L)) for f = 4h.
    megatron_forward = (
        24
        * batch
        * s
        * layers
        * h
        * h
        * (1 + Fraction(s, 6 * h) + Fraction(vocab, 12 * h * layers))
    )
    assert model_flops_per_step(TINY, batch, forward_only=True) == megatron_forward
    assert model_flops_per_step(TINY, batch, forward_only=True) == 3 * (4 * 6656 + 1024)


def test_mfu():
    flops = model_flops_per_step(TINY, 2)
    # Two toy GPUs (1e6 FLOP/s each) running for exactly the time the FLOPs need at 25 %.
    step_ms = flops / (0.25 * 2e6) * 1e3
    assert mfu(TINY, 2, step_ms, TOY_GPU, gpus=2) == pytest.approx(0.25, rel=1e-12)


# -- bytes -----------------------------------------------------------------------------------


def test_activation_message_and_memory():
    assert activation_message_bytes(TINY, 1) == 64  # b s h * 2 bytes
    assert activation_message_bytes(TINY, 5) == 320
    # sbh(34 + 5as/h) = 32 * (34 + 5) = 1248; W keeps 32 sbh = 1024.
    assert layer_activation_memory_bytes(TINY, 1) == (1248, 1024)
    # Tensor parallel t = 2: sbh(10 + 24/t) + 5 a s^2 b / t = 704 + 80.
    assert layer_activation_memory_bytes(TINY, 1, tensor=2) == (784, 704 * 32 / 34)
    # ... and with sequence parallelism: 34 sbh / t + 80.
    assert layer_activation_memory_bytes(TINY, 1, 2, sequence_parallel=True) == (624, 512)


def test_flash_attention_drops_the_score_matrices():
    flash = TransformerModel(layers=4, hidden=8, heads=2, seq_len=4, vocab=16, flash_attention=True)
    assert layer_activation_memory_bytes(flash, 1) == (34 * 32, 32 * 32)
    assert layer_flops(flash, 1) == layer_flops(TINY, 1)


def test_recomputation_keeps_only_the_layer_input():
    recompute = TransformerModel(layers=4, hidden=8, heads=2, seq_len=4, vocab=16, recompute=True)
    assert layer_activation_memory_bytes(recompute, 1) == (64, 64)  # 2 sbh
    assert layer_activation_memory_bytes(recompute, 1, 2, sequence_parallel=True) == (32, 32)


def test_embedding_and_lm_head_activation_extras():
    extra = stage_extra_activation_bytes
    assert extra(TINY, 1, first=True, last=False) == (32, 0)  # dropout mask, sbh
    # 4 sbh + 4 s b V = 128 + 256, of which the LM-head input 2 sbh waits for W.
    assert extra(TINY, 1, first=False, last=True) == (384, 64)
    assert extra(TINY, 1, first=True, last=True) == (416, 64)
    assert extra(TINY, 1, first=False, last=True, tensor=2) == (128 + 128, 64)
    assert extra(TINY, 1, first=False, last=False) == (0, 0)


# -- parameters and static memory ------------------------------------------------------------


def test_parameters():
    assert layer_parameters(TINY) == 12 * 64 + 13 * 8 == 872
    narrow = TransformerModel(layers=4, hidden=8, heads=2, seq_len=4, vocab=16, ffn_hidden=16)
    assert layer_parameters(narrow) == 4 * 64 + 2 * 8 * 16 + 16 + 9 * 8
    assert stage_parameters(TINY, (2, 2)) == (2 * 872 + 128, 2 * 872 + 128)
    assert stage_parameters(TINY, (4,)) == (4 * 872 + 256,)
    tied = TransformerModel(layers=4, hidden=8, heads=2, seq_len=4, vocab=16, tied_embeddings=True)
    assert stage_parameters(tied, (1, 2, 1)) == (872 + 128, 2 * 872, 872)


def test_sixteen_bytes_per_parameter_without_zero():
    (first, last) = static_memory(TINY, (2, 2))
    assert (first.weights_bytes, first.gradients_bytes, first.optimizer_bytes) == (
        2 * 1872,
        2 * 1872,
        12 * 1872,
    )
    assert first.total_bytes == last.total_bytes == 16 * 1872


@pytest.mark.parametrize(
    ("zero_stage", "weights", "grads", "optimizer"),
    [(0, 2, 2, 12), (1, 2, 2, 3), (2, 2, 0.5, 3), (3, 0.5, 0.5, 3)],
)
def test_zero_stages_divide_by_the_data_parallel_size(zero_stage, weights, grads, optimizer):
    (memory,) = static_memory(TINY, (4,), data_parallel=4, zero_stage=zero_stage)
    params = 4 * 872 + 256
    assert (memory.weights_bytes, memory.gradients_bytes, memory.optimizer_bytes) == (
        weights * params,
        grads * params,
        optimizer * params,
    )
    (split,) = static_memory(TINY, (4,), data_parallel=4, zero_stage=zero_stage, tensor=2)
    assert split.total_bytes == memory.total_bytes / 2


@pytest.mark.parametrize(
    ("zero_stage", "weights", "grads", "optimizer"),
    [(0, 2, 2, 12), (1, 2, 2, 3), (2, 2, 2, 3), (3, 0.5, 2, 3)],
)
def test_a_pipeline_reduces_the_gradients_once_so_they_stay_whole(
    zero_stage, weights, grads, optimizer
):
    # gradients accumulate unsharded until the step's one reduce-scatter (REDUCE_GRAD)
    (memory,) = static_memory(TINY, (4,), 4, zero_stage, pipelined=True)
    params = 4 * 872 + 256
    assert (memory.weights_bytes, memory.gradients_bytes, memory.optimizer_bytes) == (
        weights * params,
        grads * params,
        optimizer * params,
    )
    (split,) = static_memory(TINY, (4,), 4, zero_stage, tensor=2, pipelined=True)
    assert split.gradients_bytes == memory.gradients_bytes / 2


def test_inference_keeps_the_weights_only():
    for zero_stage in (0, 3):
        trained = static_memory(TINY, (2, 2), data_parallel=2, zero_stage=zero_stage)
        served = static_memory(TINY, (2, 2), 2, zero_stage, training=False)
        for train, serve in zip(trained, served, strict=True):
            assert serve.weights_bytes == train.weights_bytes
            assert serve.gradients_bytes == serve.optimizer_bytes == 0
            assert serve.total_bytes == train.weights_bytes


def test_static_memory_rejects_bad_zero_stage():
    with pytest.raises(ValueError, match="zero_stage"):
        static_memory(TINY, (4,), zero_stage=4)


# -- partitioning ----------------------------------------------------------------------------


def test_even_partition_and_explicit_lists():
    ten = TransformerModel(layers=10, hidden=8, heads=2, seq_len=4, vocab=16)
    assert partition_layers(ten, 4) == (3, 3, 2, 2)
    assert partition_layers(ten, 5, "even") == (2,) * 5
    assert partition_layers(ten, 3, [4, 4, 2]) == (4, 4, 2)
    with pytest.raises(ValueError, match=r"sum to 10"):
        partition_layers(ten, 3, [4, 4, 1])
    with pytest.raises(ValueError, match="expected 3"):
        partition_layers(ten, 3, [5, 5])
    with pytest.raises(ValueError, match="allowed: 'even', 'balanced'"):
        partition_layers(ten, 3, "greedy")
    with pytest.raises(ValueError, match="stages <= layers"):
        partition_layers(ten, 11)


def _compositions(total: int, parts: int):
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0, *cuts, total)
        yield tuple(b - a for a, b in itertools.pairwise(bounds))


small_models = st.builds(
    lambda layers, hidden, s, vocab, recompute: TransformerModel(
        layers=layers, hidden=hidden, heads=2, seq_len=s, vocab=vocab, recompute=recompute
    ),
    st.integers(2, 10),
    st.sampled_from([8, 16, 32]),
    st.sampled_from([4, 8, 16]),
    st.integers(1, 4000),
    st.booleans(),
)


@settings(max_examples=40, deadline=None)
@given(small_models, st.integers(1, 5))
def test_balanced_is_optimal_and_never_slower_than_even(model, stages):
    stages = min(stages, model.layers)
    balanced = partition_layers(model, stages, "balanced")
    assert sum(balanced) == model.layers and min(balanced) >= 1
    best = min(max(stage_work_flops(model, p)) for p in _compositions(model.layers, stages))
    assert max(stage_work_flops(model, balanced)) == best
    even = partition_layers(model, stages, "even")
    assert max(stage_work_flops(model, balanced)) <= max(stage_work_flops(model, even))


def test_balanced_answers_at_once_for_deep_models():
    # The search is over the bottleneck, not over every layer count of every stage.
    deep = TransformerModel(layers=10**9, hidden=64, heads=4, seq_len=128, vocab=50304)
    balanced = partition_layers(deep, 1000, "balanced")
    assert sum(balanced) == 10**9 and max(balanced) - min(balanced[:-1]) <= 1
    assert balanced[-1] < balanced[0]
    # An LM head heavier than all the layers together: the other stages could hold 10^15
    # layers each, and the surplus is taken away in bulk, not one layer at a time.
    huge_head = TransformerModel(layers=24, hidden=4096, heads=32, seq_len=2048, vocab=2**53)
    assert partition_layers(huge_head, 4, "balanced") == (7, 8, 8, 1)


def test_balanced_is_strictly_faster_with_a_large_vocabulary():
    model = TransformerModel(layers=16, hidden=64, heads=4, seq_len=128, vocab=50304)
    even = partition_layers(model, 4, "even")
    balanced = partition_layers(model, 4, "balanced")
    assert even == (4, 4, 4, 4)
    assert balanced[-1] < 4 and sum(balanced) == 16

    def slowest_ms(partition):
        costs = stage_costs(model, partition, 1, "h100-sxm")
        return max(f + b for f, b in zip(costs.forward_ms, costs.backward_ms, strict=True))

    assert slowest_ms(balanced) < slowest_ms(even)


# -- collectives -----------------------------------------------------------------------------


def test_ring_allreduce_closed_form():
    link = Link(latency_us=2.0, bandwidth_gbps=10.0)
    # 2(n-1)/n * B / bw + 2(n-1) * latency, n = 4, B = 1e6 bytes.
    assert ring_allreduce_ms(1e6, 4, link) == pytest.approx(1.5 * 1e6 / 1e7 + 6 * 0.002)
    assert ring_allreduce_ms(1e6, 1, link) == 0.0
    assert ring_allreduce_ms(1e6, 8, Link(latency_us=1.0)) == pytest.approx(14 * 0.001)
    assert tensor_parallel_comm_ms(1e6, 4, link) == 2 * ring_allreduce_ms(1e6, 4, link)
    with pytest.raises(ValueError, match="ranks=0"):
        ring_allreduce_ms(1.0, 0, link)


def test_data_parallel_link_and_allreduce():
    nv, ib = Link(1.0, 100.0, "nv"), Link(5.0, 10.0, "ib")
    assert data_parallel_link(2, 4, 8, nv, ib) is nv
    assert data_parallel_link(2, 8, 8, nv, ib) is ib
    link = Link(latency_us=2.0, bandwidth_gbps=10.0)
    grads = 1872 * 2  # bf16 gradients of each (2, 2) stage
    expected = 1.5 * grads / 1e7 + 6 * 0.002
    assert data_parallel_allreduce_ms(TINY, (2, 2), 4, link) == pytest.approx((expected,) * 2)
    halved = 1.5 * grads / 2 / 1e7 + 6 * 0.002
    assert data_parallel_allreduce_ms(TINY, (2, 2), 4, link, tensor=2) == pytest.approx(
        (halved,) * 2
    )


# -- efficiency and Costs --------------------------------------------------------------------


def test_efficiency_curve():
    curve = Efficiency(max_fraction=0.8, half_tokens=100.0)
    assert curve.fraction(100) == pytest.approx(0.4)
    assert curve.fraction(300) == pytest.approx(0.6)
    assert FLAT.fraction(1) == 0.5
    with pytest.raises(ValueError, match="max_fraction"):
        Efficiency(max_fraction=1.5)


def test_stage_costs_exact_on_a_toy_gpu():
    costs = stage_costs(TINY, (2, 2), 1, TOY_GPU, FLAT)
    assert isinstance(costs, Costs)
    per_ms = 500.0  # FLOPs per ms at 50 % of 1e6 FLOP/s
    assert costs.forward_ms == pytest.approx((13312 / per_ms, 14336 / per_ms))
    assert costs.backward_input_ms == pytest.approx((14336 / per_ms, 15360 / per_ms))
    assert costs.backward_weight_ms == pytest.approx((12288 / per_ms, 13312 / per_ms))
    assert costs.backward_ms == pytest.approx((26624 / per_ms, 28672 / per_ms))
    assert costs.activation_bytes == (64.0, 64.0)
    assert costs.activation_memory_bytes == (2 * 1248 + 32, 2 * 1248 + 384)
    assert costs.weight_grad_memory_bytes == (2 * 1024, 2 * 1024 + 64)
    assert costs.overhead_ms == 0.0


def test_stage_costs_tensor_parallel_adds_two_allreduces_per_layer_per_pass():
    link = Link(latency_us=1.0, bandwidth_gbps=1.0)
    ring = 2 * 1 / 2 * 64 / 1e6 + 2 * 0.001  # t = 2, 64-byte activation
    costs = stage_costs(TINY, (2, 2), 1, TOY_GPU, FLAT, tensor=2, tensor_link=link)
    assert costs.forward_ms[0] == pytest.approx(13312 / 2 / 500 + 2 * 2 * ring)
    assert costs.backward_input_ms[0] == pytest.approx(14336 / 2 / 500 + 2 * 2 * ring)
    assert costs.backward_weight_ms[0] == pytest.approx(12288 / 2 / 500)
    recompute = TransformerModel(layers=4, hidden=8, heads=2, seq_len=4, vocab=16, recompute=True)
    again = stage_costs(recompute, (2, 2), 1, TOY_GPU, FLAT, tensor=2, tensor_link=link)
    assert again.backward_input_ms[0] == pytest.approx((14336 + 13312) / 2 / 500 + 2 * 4 * ring)
    with pytest.raises(ValueError, match="tensor_link"):
        stage_costs(TINY, (2, 2), 1, TOY_GPU, FLAT, tensor=2)


def test_stage_costs_checks_the_partition():
    with pytest.raises(ValueError, match="sum to 4"):
        stage_costs(TINY, (2, 1), 1, TOY_GPU, FLAT)


def test_launch_overhead_goes_to_costs():
    costs = stage_costs(TINY, (4,), 1, TOY_GPU, replace(FLAT, launch_overhead_ms=0.25))
    assert costs.overhead_ms == 0.25


def test_fixed_global_batch_has_an_interior_best_microbatch_count():
    """1F1B's step time (m + p - 1)(F + B) with a fixed global batch G = m * b.

    More microbatches shrink the bubble, but each one's GEMMs get thinner: with b s tokens
    of a hidden-64 model on an H100 a GEMM fills few of the 132 SMs' tiles and, at the
    smallest, hits the 2 us kernel floor (pipesim.cluster.gemm). So neither one microbatch
    of 64 sequences nor 64 microbatches of one is best: m = 4 or 8 is.
    """
    model = TransformerModel(layers=8, hidden=64, heads=4, seq_len=256, vocab=1000)
    partition = partition_layers(model, 4, "even")
    global_batch, stages = 64, 4

    def step_ms(microbatches: int) -> float:
        costs = stage_costs(model, partition, global_batch // microbatches, "h100-sxm", FLOPS_ONLY)
        slowest = max(f + b for f, b in zip(costs.forward_ms, costs.backward_ms, strict=True))
        return (microbatches + stages - 1) * slowest

    times = {m: step_ms(m) for m in (1, 2, 4, 8, 16, 32, 64)}
    best = min(times, key=times.get)
    assert best in (4, 8)
    assert times[1] > 1.5 * times[best] and times[64] > 2.5 * times[best]


def test_hierarchical_allreduce_reduces_inside_the_node_first():
    intra, inter = Link(latency_us=1.0, bandwidth_gbps=100.0), Link(5.0, 10.0)
    # k = 4 GPUs per node, 2 nodes, B = 8e6 bytes: ring of 4 over NVLink on B, then a ring
    # of 2 over the network on B / 4, each GPU on its own link.
    inside = 6 * 0.001 + 6 / 4 * 8e6 / 1e8
    across = 2 * 0.005 + 2 / 2 * 2e6 / 1e7
    assert hierarchical_allreduce_ms(8e6, 8, 4, intra, inter) == pytest.approx(inside + across)
    assert hierarchical_allreduce_ms(8e6, 8, 1, intra, inter) == ring_allreduce_ms(8e6, 8, inter)
    # The network carries a quarter: much less than the flat ring over the network.
    assert hierarchical_allreduce_ms(8e6, 8, 4, intra, inter) < ring_allreduce_ms(8e6, 8, inter)
    with pytest.raises(ValueError, match="ranks_per_node must divide"):
        hierarchical_allreduce_ms(8e6, 8, 3, intra, inter)
    grads = 1872 * 2
    assert data_parallel_allreduce_ms(
        TINY, (2, 2), 8, inter, ranks_per_node=4, intra_node_link=intra
    ) == pytest.approx((hierarchical_allreduce_ms(grads, 8, 4, intra, inter),) * 2)
    with pytest.raises(ValueError, match="intra_node_link"):
        data_parallel_allreduce_ms(TINY, (2, 2), 8, inter, ranks_per_node=4)


def test_sequence_parallel_sends_each_gpu_its_share_of_the_sequence():
    link = Link(latency_us=1.0, bandwidth_gbps=1.0)
    plain = stage_costs(TINY, (2, 2), 1, TOY_GPU, FLAT, tensor=2, tensor_link=link)
    split = stage_costs(
        TINY, (2, 2), 1, TOY_GPU, FLAT, tensor=2, tensor_link=link, sequence_parallel=True
    )
    assert plain.activation_bytes == (64.0, 64.0)  # b s h * 2 bytes on every GPU
    assert split.activation_bytes == (32.0, 32.0)  # s / t of it, each rank over its own link
