"""Inference costs of one stage: KV-cache sizes, the prefill and decode roofs, capacity."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.cluster.collectives import Collective, Group, collective_choice
from pipesim.cluster.gemm import gemm_ms
from pipesim.cluster.hardware import gpu_profile, link_profile
from pipesim.cluster.inference import (
    ROOFLINE,
    BatchShape,
    ServingCosts,
    kv_cache_bytes_per_token,
    kv_capacity_tokens,
    stage_boundary_bytes,
    stage_iteration_ms,
)
from pipesim.cluster.model import Efficiency, TransformerModel
from pipesim.cluster.parallel import ring_allreduce_ms, tensor_parallel_comm_ms
from pipesim.cluster.transformer import layer_gemm_shapes, layer_parameters, stage_parameters
from pipesim.sim.links import Link

# Llama-2-70B (Touvron et al. 2023; its config.json): 80 layers, hidden 8192, 64 heads
# sharing 8 key/value heads of width 128, SwiGLU width 28672, vocabulary 32000.
LLAMA2_70B = TransformerModel(
    layers=80,
    hidden=8192,
    heads=64,
    kv_heads=8,
    ffn_hidden=28672,
    mlp="gated",
    seq_len=4096,
    vocab=32000,
)
H100 = gpu_profile("h100-sxm")  # 989.4 TFLOP/s bf16, 3,350 GB/s, 80 GiB
GEMM = Efficiency().max_fraction  # the calibrated GEMM fraction (docs/validation.md)
# The calibrated serving costs (docs/validation.md, "Serving"): weights read at 88 % of the
# bandwidth, 9 kernels per layer at 9.75 us each without CUDA graphs.
BANDWIDTH = 3350e9 * 0.88
KERNELS_MS = 9 * 9.75e-3  # one layer's kernels
# The weights of one layer's four GEMMs (QKV, output, gate/up, down): the layer's weights
# without its biases and norms.
GEMM_WEIGHTS = sum(n * k for n, k in layer_gemm_shapes(LLAMA2_70B))


def test_llama2_70b_kv_bytes_per_token():
    # 2 (K and V) * 80 layers * 8 kv heads * 128 head_dim * 2 bytes
    assert kv_cache_bytes_per_token(LLAMA2_70B) == 2 * 80 * 8 * 128 * 2 == 327_680
    # TP 8: one kv head per rank
    assert kv_cache_bytes_per_token(LLAMA2_70B, tensor=8) == 327_680 // 8 == 40_960
    # TP 16: fewer kv heads than ranks, each rank keeps a replica of one head
    assert kv_cache_bytes_per_token(LLAMA2_70B, tensor=16) == 40_960


def test_multi_head_attention_keeps_one_kv_head_per_head():
    model = TransformerModel(layers=2, hidden=64, heads=4, seq_len=8, vocab=10)
    assert kv_cache_bytes_per_token(model) == 2 * 2 * 4 * 16 * 2
    assert kv_cache_bytes_per_token(model, tensor=2) == 2 * 2 * 2 * 16 * 2


def test_batch1_decode_is_bandwidth_bound_on_weights_and_kv():
    """A middle stage of 40 layers, one sequence at context 1000: every GEMM reads its
    weights (40 layers x 855,638,016 GEMM weights x 2 bytes) and the attention 1000
    tokens' KV of its 40 layers (40 x 2*8*128*2 bytes each); their FLOPs (2 per weight, 4h
    per context token) take ~150x less time. The bare roofs read the biases and norms too."""
    layers, context = 40, 1000
    shape = BatchShape(decode_seqs=1, decode_context=context)
    assert GEMM_WEIGHTS == 855_638_016
    read = layers * GEMM_WEIGHTS * 2 + layers * 4096 * context
    # the bytes at the achievable bandwidth, then 40 layers' kernels: 23.275 + 3.510 ms
    expected_ms = read / BANDWIDTH * 1e3 + layers * KERNELS_MS
    got = stage_iteration_ms(LLAMA2_70B, layers, H100, shape, first=False, last=False)
    assert got == pytest.approx(expected_ms, rel=1e-12)
    assert got == pytest.approx(26.785, abs=1e-3)
    read = layers * layer_parameters(LLAMA2_70B) * 2 + layers * 4096 * context
    bare = stage_iteration_ms(
        LLAMA2_70B, layers, H100, shape, first=False, last=False, serving=ROOFLINE
    )
    assert bare == pytest.approx(read / 3350e9 * 1e3, rel=1e-12)
    flops_ms = (
        layers * (2 * layer_parameters(LLAMA2_70B) + 4 * 8192 * context) / (989.4e12 * GEMM) * 1e3
    )
    assert got > 100 * flops_ms


def test_large_batch_decode_becomes_compute_bound():
    """At 4096 sequences of context 1 every GEMM's math outweighs its weight reads: each
    runs at its shape's rate (4096 rows, training's GEMM model), the attention reads its
    KV entries (4096 x 4096 bytes per layer, more than its FLOPs take)."""
    layers, seqs = 10, 4096
    shape = BatchShape(decode_seqs=seqs, decode_context=seqs)
    gemms = [gemm_ms(seqs, n, k, H100, Efficiency()) for n, k in layer_gemm_shapes(LLAMA2_70B)]
    reads = [n * k * 2 / BANDWIDTH * 1e3 for n, k in layer_gemm_shapes(LLAMA2_70B)]
    assert all(g > 10 * r for g, r in zip(gemms, reads, strict=True))
    kv_ms = layers * 4096 * seqs / BANDWIDTH * 1e3
    got = stage_iteration_ms(LLAMA2_70B, layers, H100, shape, first=False, last=False)
    expected = layers * sum(gemms) + kv_ms + layers * KERNELS_MS
    assert got == pytest.approx(expected, rel=1e-12)


def test_roofline_prefill_is_compute_bound_at_the_efficiency_curve():
    """The bare roofs: a 2048-token prompt on 20 layers and the LM head (last stage, one
    prompt emits): FLOPs = 20 (2P * 2048 + 4h * 2048 * 2048) + 2hV, at max_fraction * 2048 /
    (2048 + 512)."""
    layers, tokens = 20, 2048
    shape = BatchShape(prefill_tokens=tokens, prefill_attention=tokens * tokens)
    flops = layers * (2 * layer_parameters(LLAMA2_70B) * tokens + 4 * 8192 * tokens * tokens)
    flops += 2 * 8192 * 32000
    rate = 989.4e12 * GEMM * tokens / (tokens + 512)
    got = stage_iteration_ms(
        LLAMA2_70B, layers, H100, shape, first=False, last=True, emitting=1, serving=ROOFLINE
    )
    assert got == pytest.approx(flops / rate * 1e3, rel=1e-12)


def test_prefill_gemms_are_priced_by_shape_and_attention_at_its_own_rate():
    """The same prompt with the calibrated costs. Each of a layer's GEMMs over 2048 tokens
    at its shape's rate: QKV 2048 x 10240 x 8192 in 128 x 256 tiles, 16 x 40 = 640 of them
    in 5 waves of 132 SMs (640 / 660), 8192 / (8192 + 64) for the reduction, at 0.74 of the
    measured 792.1 TFLOP/s. The head's GEMM runs for the one token that samples: it reads
    its 32000 x 8192 weights. The causal half of the attention (20 x 4h x 2048^2 / 2) at
    60 % of the peak; then 20 layers' kernels."""
    layers, tokens = 20, 2048
    shape = BatchShape(prefill_tokens=tokens, prefill_attention=tokens * tokens)
    qkv = 2 * tokens * 10240 * 8192 / (792.1e12 * 0.74 * 640 / 660 * 8192 / 8256) * 1e3
    assert gemm_ms(tokens, 10240, 8192, H100, Efficiency()) == pytest.approx(qkv, rel=1e-12)
    gemms = sum(gemm_ms(tokens, n, k, H100, Efficiency()) for n, k in layer_gemm_shapes(LLAMA2_70B))
    head = 32000 * 8192 * 2 / BANDWIDTH * 1e3
    attention = layers * 4 * 8192 * tokens * tokens / 2 / (989.4e12 * 0.6) * 1e3
    expected = layers * gemms + head + attention + layers * KERNELS_MS
    got = stage_iteration_ms(LLAMA2_70B, layers, H100, shape, first=False, last=True, emitting=1)
    assert got == pytest.approx(expected, rel=1e-12)


def test_tensor_parallel_divides_work_and_adds_two_allreduces_per_layer():
    """The bare roofs: the work splits four ways, and each layer adds two ring all-reduces."""
    link = Link(latency_us=5.0, bandwidth_gbps=400.0)
    shape = BatchShape(prefill_tokens=512, prefill_attention=512 * 512)
    layers = 8
    kwargs = {"first": True, "last": False, "serving": ROOFLINE}
    one = stage_iteration_ms(LLAMA2_70B, layers, H100, shape, **kwargs)
    four = stage_iteration_ms(LLAMA2_70B, layers, H100, shape, tensor=4, tensor_link=link, **kwargs)
    message = 512 * 8192 * 2
    allreduces = layers * 2 * ring_allreduce_ms(message, 4, link)
    # 2 * (4-1) steps of 5 us latency and 2 * 3/4 * message / 400 GB/s, twice per layer
    assert allreduces == pytest.approx(8 * 2 * (6 * 0.005 + 1.5 * message / 400e6))
    assert four == pytest.approx(one / 4 + allreduces, rel=1e-12)


def test_tensor_parallel_kernels_are_not_divided_and_all_reduces_are_trainings():
    """With the calibrated costs every rank launches every kernel; the all-reduces are what
    training's tensor parallelism charges (tensor_parallel_comm_ms: on a link given by its
    numbers, the ring's 2 x 3 steps of 5 us and its bytes), the ideal link none."""
    link = Link(latency_us=5.0, bandwidth_gbps=400.0)
    shape = BatchShape(prefill_tokens=512, prefill_attention=512 * 512)
    layers = 8
    kwargs = {"first": True, "last": False, "tensor": 4}
    four = stage_iteration_ms(LLAMA2_70B, layers, H100, shape, tensor_link=link, **kwargs)
    free = stage_iteration_ms(LLAMA2_70B, layers, H100, shape, tensor_link=Link(), **kwargs)
    silent = ServingCosts(kernel_overhead_us=0.0)
    bare = stage_iteration_ms(
        LLAMA2_70B, layers, H100, shape, tensor_link=Link(), serving=silent, **kwargs
    )
    message = 512 * 8192 * 2
    allreduces = layers * tensor_parallel_comm_ms(message, 4, link)
    assert allreduces == pytest.approx(8 * 2 * (6 * 0.005 + 1.5 * message / 400e6))
    assert four - free == pytest.approx(allreduces, rel=1e-9)
    assert free - bare == pytest.approx(layers * KERNELS_MS, rel=1e-9)


def test_launch_overhead_is_added_once_per_iteration():
    shape = BatchShape(decode_seqs=4, decode_context=400)
    plain = stage_iteration_ms(LLAMA2_70B, 5, H100, shape, first=False, last=False)
    slow = stage_iteration_ms(
        LLAMA2_70B,
        5,
        H100,
        shape,
        first=False,
        last=False,
        efficiency=Efficiency(launch_overhead_ms=0.25),
    )
    assert slow == pytest.approx(plain + 0.25)


def test_empty_batch_costs_nothing():
    assert stage_iteration_ms(LLAMA2_70B, 5, H100, BatchShape(), first=True, last=True) == 0.0


def test_tensor_parallel_needs_a_link():
    with pytest.raises(ValueError, match="tensor_link"):
        stage_iteration_ms(
            LLAMA2_70B,
            5,
            H100,
            BatchShape(decode_seqs=1, decode_context=1),
            first=False,
            last=False,
            tensor=2,
        )


def test_boundary_bytes_are_one_hidden_vector_per_token():
    shape = BatchShape(prefill_tokens=100, prefill_attention=100 * 100, decode_seqs=7)
    assert stage_boundary_bytes(LLAMA2_70B, shape) == 107 * 8192 * 2


@settings(max_examples=40, deadline=None)
@given(
    seqs=st.integers(1, 512),
    context=st.integers(1, 8192),
    prefill=st.integers(0, 4096),
)
def test_mixed_batch_is_bounded_by_its_parts(seqs, context, prefill):
    """A mixed batch costs at least each of its parts alone, and at most its decodes' step
    plus its prompt tokens and decode tokens run as one prefill (its GEMMs run over all its
    rows at once, reading the weights once; an extra row of tiles can cost a wave more, so
    it may cost more than its parts apart)."""
    decode = BatchShape(decode_seqs=seqs, decode_context=seqs * context)
    pre = BatchShape(prefill_tokens=prefill, prefill_attention=prefill * prefill)
    rows = BatchShape(prefill_tokens=prefill + seqs, prefill_attention=prefill * prefill)
    mixed = BatchShape(prefill, prefill * prefill, seqs, seqs * context)
    cost = lambda s: stage_iteration_ms(LLAMA2_70B, 10, H100, s, first=False, last=True)  # noqa: E731
    both = cost(mixed)
    assert both >= max(cost(decode), cost(pre)) * (1 - 1e-12)
    assert both <= (cost(decode) + cost(rows)) * (1 + 1e-12)


def test_kv_capacity_tp8_one_replica_on_h100():
    """Llama-2-70B, TP 8, one stage: each GPU holds 1/8 of all weights; the rest of
    0.9 * 80 GiB holds 40,960 bytes per token."""
    weights = stage_parameters(LLAMA2_70B, [80])[0] * 2 / 8
    free = 80 * 2**30 * 0.9 - weights
    expected = math.floor(free / 40_960)
    got = kv_capacity_tokens(LLAMA2_70B, H100, tensor=8, pipeline=1, gpu_memory_utilization=0.9)
    assert got == expected
    assert 1_000_000 < got < 1_500_000  # 69B weights leave ~55 GiB per GPU


def test_kv_capacity_is_limited_by_the_most_loaded_stage():
    """PP 2 x TP 4: 40 layers per stage; the last stage carries the LM head, the first the
    embedding (same size here, untied), so both leave the same room; a workspace comes off
    every GPU."""
    workspace = 2 * 2**30
    params = stage_parameters(LLAMA2_70B, [40, 40])
    per_token = 40 * 2 * 2 * 128 * 2  # 40 layers, 2 kv heads per rank of 4
    expected = min(
        math.floor((80 * 2**30 * 0.9 - workspace - p * 2 / 4) / per_token) for p in params
    )
    got = kv_capacity_tokens(
        LLAMA2_70B,
        "h100-sxm",
        tensor=4,
        pipeline=2,
        gpu_memory_utilization=0.9,
        workspace_bytes=workspace,
    )
    assert got == expected


def test_kv_capacity_refuses_weights_that_do_not_fit():
    with pytest.raises(ValueError, match="stage 0 .* leave no room"):
        kv_capacity_tokens(LLAMA2_70B, H100, tensor=1, pipeline=1, gpu_memory_utilization=0.9)


def test_llama2_70b_tp8_batch1_decode_written_out():
    """One token of Llama-2-70B on 8 H100s (TP 8, one stage holding all 80 layers and the
    LM head), context 1. A layer holds 855,754,752 weights (attention 2h^2 + 2 h 1024 =
    150,994,944, SwiGLU 3 h 28672 = 704,643,072, biases and norms 116,736); with the
    32000 x 8192 head each GPU reads (80 x 855,754,752 + 262,144,000) x 2 / 8 =
    17,180,631,040 bytes of weights and 80 x 512 bytes of KV: 5.129 ms at 3.35 TB/s.
    Then two all-reduces per layer of one 16,384-byte hidden vector over NVLink 4
    (achievable: 3.4 us per step, 380 GB/s): on a link given by its numbers, 14 steps x
    3.4 us + 14/8 x 16,384 B / 380 GB/s each."""
    assert layer_parameters(LLAMA2_70B) == 855_754_752
    nvlink = Link(latency_us=3.4, bandwidth_gbps=380.0)
    got = stage_iteration_ms(
        LLAMA2_70B,
        80,
        H100,
        BatchShape(decode_seqs=1, decode_context=1),
        first=True,
        last=True,
        tensor=8,
        tensor_link=nvlink,
    )
    bare = stage_iteration_ms(
        LLAMA2_70B,
        80,
        H100,
        BatchShape(decode_seqs=1, decode_context=1),
        first=True,
        last=True,
        tensor=8,
        tensor_link=nvlink,
        serving=ROOFLINE,
    )
    memory_ms = (17_180_631_040 + 80 * 512) / 3350e9 * 1e3
    ring_ms = 14 * 3.4e-3 + 14 / 8 * 16_384 / 380e6
    assert bare == pytest.approx(memory_ms + 160 * ring_ms, rel=1e-12)
    assert memory_ms == pytest.approx(5.1286, abs=1e-4)
    # calibrated, over the NVLink 4 profile NCCL knows: the GEMMs' weights (80 x 855,638,016
    # + 262,144,000, over 8) and the KV at 88 % of the bandwidth (5.827 ms), 80 layers x 9
    # kernels x 9.75 us (7.020 ms) and 160 all-reduces as NCCL's LL ring (15.0 us latency:
    # 6.6 us + 14 steps of 0.6 us; 16,384 B at 80.6 GB/s), 2.433 ms
    nccl = link_profile("nvlink4", "achievable")
    choice = collective_choice(Collective.ALL_REDUCE, 16_384, Group(8, nccl))
    assert (choice.algorithm, choice.protocol) == ("ring", "LL")
    assert choice.ms == pytest.approx(0.015 + 16_384 / (80.571e9 / 1e3), rel=1e-4)
    calibrated = stage_iteration_ms(
        LLAMA2_70B,
        80,
        H100,
        BatchShape(decode_seqs=1, decode_context=1),
        first=True,
        last=True,
        tensor=8,
        tensor_link=nccl,
    )
    weights = (80 * GEMM_WEIGHTS + 262_144_000) * 2 / 8
    expected = (weights + 80 * 512) / BANDWIDTH * 1e3 + 80 * KERNELS_MS + 160 * choice.ms
    assert calibrated == pytest.approx(expected, rel=1e-12)
    assert calibrated == pytest.approx(15.280, abs=1e-3)
    # over the link given by its numbers the ring pays its 14 steps of latency each time
    assert got - calibrated == pytest.approx(160 * (ring_ms - choice.ms), rel=1e-9)


def test_kv_capacity_follows_an_uneven_partition():
    """Stages of 60 and 20 layers: the 60-layer stage holds the most weights and the most
    KV per token, so it sets the capacity."""
    params = stage_parameters(LLAMA2_70B, [60, 20])
    expected = math.floor((80 * 2**30 * 0.9 - params[0] * 2 / 8) / (60 * 512))
    got = kv_capacity_tokens(
        LLAMA2_70B, H100, tensor=8, pipeline=2, gpu_memory_utilization=0.9, partition=[60, 20]
    )
    assert got == expected


def test_decode_all_reduces_take_ncclls_low_latency_protocol():
    """A decode step's 16 KiB all-reduce over 8 NVLink 4 GPUs runs as NCCL's LL ring (the
    collectives model, as training's tensor parallelism prices it); a 64 MiB prefill
    all-reduce as NVLink SHARP with the Simple protocol."""
    nvlink = link_profile("nvlink4", "achievable")
    small = collective_choice(Collective.ALL_REDUCE, 16_384, Group(8, nvlink))
    large = collective_choice(Collective.ALL_REDUCE, 64 * 2**20, Group(8, nvlink))
    assert (small.algorithm, small.protocol) == ("ring", "LL")
    assert (large.algorithm, large.protocol) == ("nvls", "Simple")
    decode = BatchShape(decode_seqs=1, decode_context=100)
    kwargs = {"first": False, "last": False, "tensor": 8}
    with_link = stage_iteration_ms(LLAMA2_70B, 10, H100, decode, tensor_link=nvlink, **kwargs)
    free = stage_iteration_ms(LLAMA2_70B, 10, H100, decode, tensor_link=Link(), **kwargs)
    assert with_link - free == pytest.approx(10 * 2 * small.ms, rel=1e-9)


def test_cuda_graphs_shrink_the_kernel_cost_of_decode_steps_only():
    """With CUDA graphs a decode step's kernels cost 7.5 us each instead of 9.75; a prefill
    still launches eagerly (vLLM captures graphs for decode batches only)."""
    graphs = ServingCosts(cuda_graphs=True)
    decode = BatchShape(decode_seqs=1, decode_context=100)
    prefill = BatchShape(prefill_tokens=100, prefill_attention=100 * 100)
    for shape, saved_us in ((decode, 2.25), (prefill, 0.0)):
        eager = stage_iteration_ms(LLAMA2_70B, 10, H100, shape, first=False, last=False)
        graph = stage_iteration_ms(
            LLAMA2_70B, 10, H100, shape, first=False, last=False, serving=graphs
        )
        assert eager - graph == pytest.approx(10 * 9 * saved_us / 1e3, abs=1e-12)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("bandwidth_fraction", 0.0, "bandwidth_fraction must be in"),
        ("attention_fraction", 1.5, "attention_fraction must be in"),
        ("kernel_overhead_us", -1.0, "kernel_overhead_us must be >= 0"),
        ("graph_kernel_overhead_us", -0.5, "graph_kernel_overhead_us must be >= 0"),
    ],
)
def test_serving_costs_refuse_impossible_values(field, value, message):
    with pytest.raises(ValueError, match=message):
        ServingCosts(**{field: value})


def test_a_one_token_prompt_costs_about_a_decode_step():
    """A prompt of one token is one row through every GEMM, as a decode step is: both read
    the weights; only the KV entries the decode step reads (context 1) and the prefill's
    attention (one pair) tell them apart."""
    prefill = BatchShape(prefill_tokens=1, prefill_attention=1)
    decode = BatchShape(decode_seqs=1, decode_context=1)
    kwargs = {"first": False, "last": True}
    one = stage_iteration_ms(LLAMA2_70B, 10, H100, prefill, emitting=1, **kwargs)
    step = stage_iteration_ms(LLAMA2_70B, 10, H100, decode, **kwargs)
    assert one == pytest.approx(step, rel=1e-3)
