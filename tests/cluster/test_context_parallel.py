"""Context parallelism, checked by hand on a tiny model: per-GPU FLOPs and activation
memory at 2 and 4 context ranks, the ring's exposed communication in closed form (hidden
behind a longer attention block, exposed behind a shorter one), the all-to-all's volume,
and that one context rank changes nothing."""

from __future__ import annotations

import pytest

from pipesim.cluster.context_parallel import (
    ALL_TO_ALL,
    RING,
    ContextParallel,
    LayerContextMs,
    all_to_all_bytes,
    context_all_to_all_ms,
    context_link,
    kv_chunk_bytes,
    layer_context_ms,
    local_model,
    ring_exposed_ms,
)
from pipesim.cluster.hardware import GpuProfile
from pipesim.cluster.model import (
    Efficiency,
    PassFlops,
    TransformerModel,
    layer_activation_memory_bytes,
    layer_flops,
    stage_activation_memory_bytes,
    stage_costs,
    stage_extra_activation_bytes,
)
from pipesim.sim.links import Link

# s = 8, b = 1, h = 8, two heads of width 4, f = 32: sbh = 64.
MODEL = TransformerModel(layers=4, hidden=8, heads=2, seq_len=8, vocab=16, flash_attention=True)
# Grouped-query: h = 16, 4 query heads of width 4 sharing 2 key/value heads.
GQA = TransformerModel(
    layers=2, hidden=16, heads=4, kv_heads=2, seq_len=8, vocab=16, flash_attention=True
)
# 1e6 FLOP/s at a flat 50 %: 500 FLOPs per ms; no memory-bound work counted.
TOY_GPU = GpuProfile("toy", peak_tflops=1e-6, memory_bandwidth_gbps=1.0, memory_bytes=2**30)
FLAT = Efficiency(
    max_fraction=0.5,
    half_tokens=0.0,
    attention_fraction=None,
    memory_fraction=None,
    gemm_fraction=0.5,
    gemm_half_dim=0,
)
# bandwidth_gbps is 1e9 bytes/s: 0.000256 GB/s moves 256 bytes per ms, 0.000064 GB/s 64.
FAST = Link(latency_us=0.0, bandwidth_gbps=0.000256)
SLOW = Link(latency_us=0.0, bandwidth_gbps=0.000064)


# -- FLOPs and memory per GPU ------------------------------------------------------------


def test_per_gpu_flops_divide_by_the_context_ranks():
    # Linear 2bs x 768 weights (4h^2 + 2hf) = 12288 for the whole sequence; scores
    # 4bs^2h = 2048. One of N ranks: its s/N tokens' linear FLOPs and 1/N of the scores
    # (its queries against every key), never the (s/N)^2 of its own tokens alone.
    assert layer_flops(MODEL, 1) == PassFlops(12288 + 2048, 12288 + 4096, 12288)
    assert layer_flops(MODEL, 1, context=2) == PassFlops(6144 + 1024, 6144 + 2048, 6144)
    assert layer_flops(MODEL, 1, context=4) == PassFlops(3072 + 512, 3072 + 1024, 3072)
    # the local model alone (s = 4) would count 4bs^2h = 512 scores: a quarter, not a half
    local = layer_flops(local_model(MODEL, 2), 1)
    assert local.forward - local.backward_weight == 512


def test_per_gpu_activation_memory_divides_by_the_context_ranks():
    # 34 sbh per layer with flash attention (10 whole + Q, K, V, out 8 + MLP 16), for_w 32 sbh
    assert layer_activation_memory_bytes(MODEL, 1) == (34 * 64, 32 * 64)
    assert layer_activation_memory_bytes(MODEL, 1, context=2) == (34 * 32, 32 * 32)
    assert layer_activation_memory_bytes(MODEL, 1, context=4) == (34 * 16, 32 * 16)
    # last stage: 4sbh + 4sbV (fp32 logits) = 4 x 32 + 4 x 4 x 16 at two ranks
    extra = stage_extra_activation_bytes(MODEL, 1, first=False, last=True, context=2)
    assert extra == (128 + 256, 2 * 32)
    # two stages of two layers: + sbh (embedding dropout) first, + the LM head's last
    act, wgrad = stage_activation_memory_bytes(MODEL, (2, 2), 1, context=2)
    assert act == (2 * 34 * 32 + 32, 2 * 34 * 32 + 384)
    assert wgrad == (2 * 32 * 32, 2 * 32 * 32 + 64)


def test_context_must_divide_the_sequence():
    with pytest.raises(ValueError, match="divide seq_len"):
        layer_flops(MODEL, 1, context=3)
    with pytest.raises(ValueError, match="flash_attention"):
        local_model(TransformerModel(layers=1, hidden=8, heads=2, seq_len=8, vocab=16), 2)


# -- the ring ------------------------------------------------------------------------------


def test_ring_sends_the_local_key_and_value_chunk():
    # 2 (K and V) x b (s/N) = 4 tokens x 2 kv heads x width 4 x 2 bytes
    assert kv_chunk_bytes(MODEL, 1, 2) == 2 * 4 * 2 * 4 * 2
    assert kv_chunk_bytes(GQA, 1, 2) == 2 * 4 * 2 * 4 * 2  # 2 of the 4 heads
    assert kv_chunk_bytes(GQA, 1, 2, tensor=2) == 2 * 4 * 1 * 4 * 2  # one kv head per TP rank


def test_ring_hidden_behind_a_longer_attention_block():
    # One block: the local 4 x 4 attention, 4bs^2h = 512 FLOPs = 1.024 ms forward, twice
    # that backward. The chunk of 128 bytes takes 0.5 ms (1.0 ms with its gradients): all
    # hidden, so a layer adds only the N - 1 = 1 other block.
    ring = ContextParallel(2, RING, FAST)
    added = layer_context_ms(MODEL, 1, TOY_GPU, FLAT, ring)
    assert added.forward_ms == pytest.approx(1.024, rel=1e-12)
    assert added.backward_input_ms == pytest.approx(2.048, rel=1e-12)


def test_ring_exposed_behind_a_shorter_attention_block():
    # 128 bytes at 64 bytes per ms: 2 ms a step against 1.024 of attention, 0.976 exposed;
    # the backward's 4 ms against 2.048, 1.952 exposed. A layer then costs its N - 1 steps.
    added = layer_context_ms(MODEL, 1, TOY_GPU, FLAT, ContextParallel(2, RING, SLOW))
    assert added.forward_ms == pytest.approx(1.024 + 0.976, rel=1e-12)
    assert added.backward_input_ms == pytest.approx(2.048 + 1.952, rel=1e-12)
    # Four ranks: blocks of 4 x 2^2 x 8 = 128 FLOPs (0.256 ms), a 64-byte chunk in
    # 1 ms + 0.1 ms latency, three steps: 3 x 0.256 + 3 x (1.1 - 0.256) = 3 x 1.1.
    slow = Link(latency_us=100.0, bandwidth_gbps=0.000064)
    added = layer_context_ms(MODEL, 1, TOY_GPU, FLAT, ContextParallel(4, RING, slow))
    assert added.forward_ms == pytest.approx(3 * 1.1, rel=1e-12)
    assert added.backward_input_ms == pytest.approx(3 * 2.1, rel=1e-12)


def test_ring_exposed_closed_form():
    assert ring_exposed_ms(2.0, 1.5, 3) == 1.5
    assert ring_exposed_ms(1.0, 1.5, 3) == 0.0


# -- all-to-all ----------------------------------------------------------------------------


def test_all_to_all_volume():
    # b (s/N) d bytes x heads: 4 tokens x width 4 x 2 bytes = 32 per head
    assert all_to_all_bytes(GQA, 1, 2) == (4 * 32, 2 * 32, 2 * 32, 4 * 32)
    assert all_to_all_bytes(GQA, 1, 2, tensor=2) == (2 * 32, 32, 32, 2 * 32)
    # each rank keeps 1/N and sends the rest: 64 of 128 bytes at 64 bytes per ms
    assert context_all_to_all_ms(128, 2, SLOW) == pytest.approx(1.0, rel=1e-12)
    assert context_all_to_all_ms(128, 4, SLOW) == pytest.approx(1.5, rel=1e-12)
    assert context_all_to_all_ms(128, 1, SLOW) == 0.0


def test_all_to_all_exposed_whole():
    # four all-to-alls of 128, 64, 64, 128 bytes: half of each sent, 192 bytes = 3 ms,
    # the same again backward; blocks: 4 x 4^2 x 16 = 1024 FLOPs = 2.048 ms.
    added = layer_context_ms(GQA, 1, TOY_GPU, FLAT, ContextParallel(2, ALL_TO_ALL, SLOW))
    assert added.forward_ms == pytest.approx(2.048 + 3.0, rel=1e-12)
    assert added.backward_input_ms == pytest.approx(4.096 + 3.0, rel=1e-12)


# -- stage costs ---------------------------------------------------------------------------


def test_stage_costs_at_two_ranks_are_half_the_work():
    # One stage of 4 layers (embedding and LM head on it): F = (4 x 7168 + LM head 2bshV / 2
    # = 1024) / 500, I = (4 x 8192 + 1024) / 500, W = (4 x 6144 + 1024) / 500; the ring
    # hides behind attention. Every number is half the whole sequence's.
    whole = stage_costs(MODEL, (4,), 1, TOY_GPU, FLAT)
    split = stage_costs(MODEL, (4,), 1, TOY_GPU, FLAT, context=2, context_link=FAST)
    assert split.forward_ms == pytest.approx(((4 * 7168 + 1024) / 500,), rel=1e-12)
    assert split.backward_input_ms == pytest.approx(((4 * 8192 + 1024) / 500,), rel=1e-12)
    assert split.backward_weight_ms == pytest.approx(((4 * 6144 + 1024) / 500,), rel=1e-12)
    assert split.forward_ms[0] == pytest.approx(whole.forward_ms[0] / 2, rel=1e-12)
    assert split.activation_memory_bytes == (4 * 34 * 32 + 32 + 128 + 256,)
    assert split.activation_bytes == (4 * 8 * 2,)  # b (s/N) h elements to the next stage


def test_one_context_rank_changes_nothing():
    assert local_model(MODEL, 1) is MODEL
    assert layer_context_ms(MODEL, 1, TOY_GPU, FLAT, ContextParallel()) == LayerContextMs()
    for model in (MODEL, GQA, TransformerModel(layers=4, hidden=8, heads=2, seq_len=4, vocab=16)):
        assert layer_flops(model, 2, context=1) == layer_flops(model, 2)
        layers = (model.layers // 2, model.layers - model.layers // 2)
        assert stage_costs(model, layers, 2, TOY_GPU, context=1) == stage_costs(
            model, layers, 2, TOY_GPU
        )


def test_context_link_inside_or_across_nodes():
    intra, inter = Link(1.0, 100.0), Link(5.0, 10.0)
    assert context_link(2, 4, 8, intra, inter) is intra
    assert context_link(4, 4, 8, intra, inter) is inter


def test_recomputation_runs_the_ring_again_inside_the_backward():
    # I adds the recomputed forward: per layer its 7168 FLOPs, the N - 1 other blocks
    # included, on top of 8192; F and W are as without recomputation (W: 6144).
    model = TransformerModel(
        layers=4, hidden=8, heads=2, seq_len=8, vocab=16, flash_attention=True, recompute=True
    )
    split = stage_costs(model, (4,), 1, TOY_GPU, FLAT, context=2, context_link=FAST)
    assert split.forward_ms == pytest.approx(((4 * 7168 + 1024) / 500,), rel=1e-12)
    assert split.backward_input_ms == pytest.approx(((4 * (8192 + 7168) + 1024) / 500,), rel=1e-12)
    assert split.activation_memory_bytes == (4 * 2 * 32 + 32 + 128 + 256,)  # 2sbh a layer
