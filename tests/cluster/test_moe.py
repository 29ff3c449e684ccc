"""Mixture-of-experts layers: parameters, FLOPs, activation and static memory, pass times
and stage splits, hand-derived on a tiny model and checked against closed forms."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.cluster.activations import layer_activation_memory_bytes
from pipesim.cluster.efficiency import Efficiency
from pipesim.cluster.gemm import gemm_ms, grouped_gemm_ms
from pipesim.cluster.hardware import gpu_profile
from pipesim.cluster.model import (
    PassFlops,
    TransformerModel,
    flops_loads,
    layer_flops,
    layer_parameters,
    model_flops_per_step,
    partition_layers,
    stage_costs,
    stage_flops,
    stage_parameters,
    static_memory,
)
from pipesim.cluster.moe import MoE
from pipesim.cluster.pass_time import TensorParallel, layer_pass_times, stage_pass_times
from pipesim.cluster.transformer import mtp_module_parameters, parameter_count

H100 = gpu_profile("h100-sxm")

# h = 8, a = 2 heads of width 4, s = 4, V = 16, gated MLPs: the first layer dense (f = 12),
# the second a MoE layer of 4 routed experts (2 per token) and 1 shared, each f_e = 6.
TINY = TransformerModel(
    layers=2,
    hidden=8,
    heads=2,
    seq_len=4,
    vocab=16,
    ffn_hidden=12,
    mlp="gated",
    moe=MoE(experts=4, top_k=2, expert_ffn_hidden=6, shared_experts=1, dense_layers=1),
)


def test_a_tiny_moe_model_has_the_parameters_counted_by_hand():
    # attention: QKV 8 x 24 + output 8 x 8 = 256 weights, 8 + 16 + 8 = 32 biases
    attention = 256 + 32
    # dense MLP: 3 x 8 x 12 = 288 weights, 2 x 12 + 8 = 32 biases; two norms 4 x 8 = 32
    assert layer_parameters(TINY.dense_layer) == attention + 288 + 32 + 32 == 640
    # an expert: 3 x 8 x 6 = 144 weights, 2 x 6 + 8 = 20 biases; the router 8 x 4 + 4
    expert, router = 144 + 20, 8 * 4 + 4
    assert layer_parameters(TINY) == attention + 5 * expert + router + 32 == 1176
    assert layer_parameters(TINY, activated=True) == attention + 3 * expert + router + 32 == 848
    embedding_and_head = 2 * 16 * 8
    count = parameter_count(TINY)
    assert count.total == embedding_and_head + 640 + 1176 == 2072
    assert count.activated == embedding_and_head + 640 + 848 == 1744
    assert count.mtp == 0
    assert stage_parameters(TINY, (1, 1)) == (128 + 640, 1176 + 128)


def test_a_tiny_moe_layer_has_the_flops_counted_by_hand():
    # a token multiplies by the attention's 256 weights, 3 experts' 144 and the router's 32;
    # 2 FLOPs a weight for each of b s = 4 tokens, in each pass
    linear = 2 * 4 * (256 + 3 * 144 + 32)
    scores = 4 * 4 * 4 * 8  # 4 b s^2 h
    assert layer_flops(TINY, 1) == PassFlops(linear + scores, linear + 2 * scores, linear)
    dense = 2 * 4 * (256 + 288)
    assert layer_flops(TINY.dense_layer, 1) == PassFlops(dense + scores, dense + 2 * scores, dense)
    head = 2 * 4 * 8 * 16
    # the step: both layers and the head, forward and backward, for 3 sequences
    step = (dense + scores) + (dense + 2 * scores) + dense
    step += (linear + scores) + (linear + 2 * scores) + linear + 3 * head
    assert model_flops_per_step(TINY, 3) == 3 * step
    # a stage knows which of its layers are dense: the second stage holds the MoE layer
    assert stage_flops(TINY, 1, 1, first=False, last=True, start=1) == layer_flops(
        TINY, 1
    ) + PassFlops(head, head, head)
    assert stage_flops(TINY, 1, 1, first=True, last=False) == layer_flops(TINY.dense_layer, 1)


def test_a_single_expert_always_chosen_is_a_dense_mlp_and_a_router():
    dense = TransformerModel(layers=4, hidden=64, heads=4, seq_len=32, vocab=128, mlp="gated")
    one = replace(dense, moe=MoE(experts=1, top_k=1, expert_ffn_hidden=dense.ffn))
    tokens = 32 * 2
    router = 2 * tokens * 64 * 1  # h x 1 weights, 2 FLOPs each, every token
    assert layer_flops(one, 2) == layer_flops(dense, 2) + PassFlops(router, router, router)
    assert layer_parameters(one) == layer_parameters(dense) + 64 + 1  # the router, its bias
    assert parameter_count(one).activated == parameter_count(one).total


def test_k_routed_and_s_shared_experts_cost_a_dense_mlp_k_plus_s_experts_wide():
    base = TransformerModel(layers=2, hidden=64, heads=4, seq_len=16, vocab=64, mlp="gated")
    moe = MoE(experts=16, top_k=3, expert_ffn_hidden=40, shared_experts=2)
    wide = replace(base, ffn_hidden=5 * 40)  # (k + S) f_e
    router = 2 * 16 * 64 * 16
    assert layer_flops(replace(base, moe=moe), 1) == layer_flops(wide, 1) + PassFlops(
        router, router, router
    )


def test_a_moe_model_of_dense_layers_only_costs_what_the_dense_model_costs():
    dense = TransformerModel(
        layers=8, hidden=1024, heads=8, seq_len=512, vocab=4096, mlp="gated", recompute=True
    )
    all_dense = replace(dense, moe=MoE(experts=8, top_k=2, expert_ffn_hidden=512, dense_layers=8))
    partition = (2, 3, 3)
    assert stage_parameters(all_dense, partition) == stage_parameters(dense, partition)
    assert model_flops_per_step(all_dense, 4) == model_flops_per_step(dense, 4)
    assert stage_costs(all_dense, partition, 2, H100) == stage_costs(dense, partition, 2, H100)
    assert static_memory(all_dense, partition) == static_memory(dense, partition)
    assert partition_layers(all_dense, 3, "balanced") == partition_layers(dense, 3, "balanced")


def test_moe_activation_memory_itemised():
    # per token, bytes: the dense layer's 34h less its MLP's 2 x 3 x f, plus the router's
    # fp32 probabilities (4 E), the k dispatched copies (2 k h) and the k + S experts'
    # gate, up and product (2 x 3 f_e each); s b = 4 tokens
    dense, _ = layer_activation_memory_bytes(replace(TINY.dense_layer, flash_attention=True), 1)
    moe, for_w = layer_activation_memory_bytes(replace(TINY, flash_attention=True), 1)
    assert dense == 4 * (10 * 8 + 4 * 8 + 4 * 8 + 6 * 12)
    assert moe == 4 * (10 * 8 + 4 * 8 + 4 * 8 + 4 * 4 + 2 * 2 * 8 + 3 * 6 * 6)
    assert for_w == moe * 32 / 34


def test_every_gpu_holds_every_expert():
    big = TransformerModel(
        layers=4,
        hidden=1024,
        heads=8,
        seq_len=256,
        vocab=1024,
        mlp="gated",
        moe=MoE(experts=64, top_k=2, expert_ffn_hidden=512),
    )
    partition = (2, 2)
    params = stage_parameters(big, partition)
    assert params[0] == 2 * layer_parameters(big) + 1024 * 1024  # all 64 experts, not 2
    memory = static_memory(big, partition, tensor=2)
    assert [m.total_bytes for m in memory] == [16 * p / 2 for p in params]


def test_mtp_modules_sit_on_the_last_stage():
    mtp = replace(TINY, mtp_layers=2)
    h = 8
    module = 1176 + 2 * h * h + h + 4 * h  # a MoE block, the 2h -> h projection, two norms
    assert mtp_module_parameters(mtp) == module
    # the last stage holds the modules and a copy of the embedding they look tokens up in
    assert stage_parameters(mtp, (1, 1)) == (128 + 640, 1176 + 128 + 2 * module + 128)
    assert parameter_count(mtp).total == parameter_count(TINY).total
    assert parameter_count(mtp).mtp == 2 * module
    head = PassFlops(*(2 * 4 * 8 * 16,) * 3)
    project = PassFlops(*(2 * 4 * 2 * h * h,) * 3)
    extra = (layer_flops(TINY, 1) + project + head).scaled(2)
    last = stage_flops(mtp, 1, 1, first=False, last=True, start=1)
    assert last == stage_flops(TINY, 1, 1, first=False, last=True, start=1) + extra
    # and their loads go to the last stage's extra when balancing
    assert flops_loads(mtp)[2] == head.total + extra.total


def test_experts_run_as_one_grouped_gemm():
    efficiency = Efficiency()
    # one GEMM alone costs what gemm_ms says
    alone = grouped_gemm_ms([(4096, 8192, 4096, 1)], H100, efficiency)
    assert alone == pytest.approx(gemm_ms(4096, 8192, 4096, H100, efficiency), rel=1e-12)
    # 256 GEMMs of 128 rows fill the SMs together: far faster than 256 kernels one by one
    grouped = grouped_gemm_ms([(128, 512, 7168, 256)], H100, efficiency)
    assert grouped < 256 * gemm_ms(128, 512, 7168, H100, efficiency) / 4
    assert grouped_gemm_ms([(0, 512, 7168, 256)], H100, efficiency) == 0.0
    # 4096 tokens x 8 experts spread over 256 experts: 128 rows each
    moe = MoE(experts=256, top_k=8, expert_ffn_hidden=2048)
    assert moe.expert_rows(4096) == ((128, 256),)
    assert MoE(experts=3, top_k=2, expert_ffn_hidden=8).expert_rows(4) == ((3, 2), (2, 1))


def test_a_moe_layer_takes_longer_with_more_experts_per_token():
    model = TransformerModel(
        layers=4,
        hidden=2048,
        heads=16,
        seq_len=2048,
        vocab=32000,
        mlp="gated",
        moe=MoE(experts=16, top_k=2, expert_ffn_hidden=1024),
    )
    tp = TensorParallel()
    two = layer_pass_times(model, 1, H100, Efficiency(), tp)
    four = layer_pass_times(
        replace(model, moe=replace(model.moe, top_k=4)), 1, H100, Efficiency(), tp
    )
    assert four.forward_ms > two.forward_ms and four.backward_weight_ms > two.backward_weight_ms
    stage = stage_pass_times(model, 2, 1, H100, Efficiency(), tp, first=False, last=False)
    assert stage.forward_ms == pytest.approx(2 * two.forward_ms)


MOE_MODELS = st.builds(
    lambda layers, dense, experts, top_k, shared, width, hidden, gated: TransformerModel(
        layers=layers,
        hidden=hidden * 4,
        heads=4,
        seq_len=16,
        vocab=32,
        mlp="gated" if gated else "plain",
        moe=MoE(
            experts=experts,
            top_k=min(top_k, experts),
            expert_ffn_hidden=width,
            shared_experts=shared,
            dense_layers=min(dense, layers),
        ),
    ),
    st.integers(1, 6),
    st.integers(0, 6),
    st.integers(1, 64),
    st.integers(1, 8),
    st.integers(0, 2),
    st.integers(1, 64),
    st.integers(1, 16),
    st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(MOE_MODELS, st.integers(1, 8))
def test_activated_never_exceed_total_and_flops_scale_with_the_microbatch(model, size):
    count = parameter_count(model)
    assert count.activated <= count.total
    assert (count.activated == count.total) == (
        model.moe.top_k == model.moe.experts or model.moe.dense_layers == model.layers
    )
    assert layer_flops(model, size) == layer_flops(model, 1).scaled(size)
    partition = partition_layers(model, 1)
    one = stage_flops(model, partition[0], 1, first=True, last=True)
    assert stage_flops(model, partition[0], size, first=True, last=True) == one.scaled(size)
    assert model_flops_per_step(model, size) == size * model_flops_per_step(model, 1)
