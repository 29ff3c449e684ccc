"""Grouped-query attention and gated MLPs, counted the same way in parameters, FLOPs,
activation memory, static memory and MFU; Llama-2-70B as the published anchor."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim import load_scenario
from pipesim.cluster.model import (
    PassFlops,
    TransformerModel,
    layer_activation_memory_bytes,
    layer_flops,
    layer_parameters,
    model_flops_per_step,
    stage_parameters,
    static_memory,
)

LLAMA_SCENARIO = Path(__file__).parents[2] / "scenarios" / "llama-70b-4x8-h100.yaml"

# Llama-2-70B (Touvron et al. 2023, Table 1 and the released config.json): 80 layers,
# hidden 8192, 64 heads, 8 key/value heads, SwiGLU width 28672, vocabulary 32000, untied.
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

# h = 8, a = 4 heads of width d = 2, g = 2 kv heads, f = 12, s = 4.
SMALL = dict(layers=3, hidden=8, heads=4, seq_len=4, vocab=16, ffn_hidden=12)


def megatron_step_flops(model: TransformerModel, batch: int) -> Fraction:
    """Megatron-LM's ``num_floating_point_operations`` (megatron/training/training.py):
    ``12 B s L h^2 (1 + g/a + s/h + k f/h + V/(2 L h))``, k = 1.5 for SwiGLU."""
    b, s, layers, h = batch, model.seq_len, model.layers, model.hidden
    gated = Fraction(3, 2) if model.mlp == "gated" else 1
    return (
        12
        * b
        * s
        * layers
        * h
        * h
        * (
            1
            + Fraction(model.kv_head_count, model.heads)
            + Fraction(s, h)
            + gated * Fraction(model.ffn, h)
            + Fraction(model.vocab, 2 * layers * h)
        )
    )


def test_llama2_70b_has_69_billion_parameters():
    weights = sum(stage_parameters(LLAMA2_70B, (80,)))
    # Matrices alone: 80 (8192 * 10240 + 8192^2 + 3 * 8192 * 28672) + 2 * 32000 * 8192.
    matrices = 80 * (8192 * 10240 + 8192**2 + 3 * 8192 * 28672) + 2 * 32000 * 8192
    assert matrices == 68_975_329_280
    biases_and_norms = 80 * ((8192 + 2 * 1024 + 8192) + (2 * 28672 + 8192) + 4 * 8192)
    assert weights == matrices + biases_and_norms
    assert round(weights / 1e9, 1) == 69.0


def test_the_bundled_llama_scenario_holds_69_billion_parameters():
    scenario = load_scenario(LLAMA_SCENARIO)
    # 16 bytes per parameter (bf16 weights and gradients, fp32 Adam), split 8 ways by TP.
    static = sum(scenario.accounting.static_memory_bytes)  # every stage once
    params = static * 8 / 16
    assert params == pytest.approx(sum(stage_parameters(LLAMA2_70B, (80,))), rel=1e-12)
    assert round(params / 1e9, 1) == 69.0


def test_gqa_and_gated_layer_parameters_by_hand():
    gqa = TransformerModel(**SMALL, kv_heads=2)
    # QKV 8 * (8 + 2 * 4) = 128, output 64, MLP 2 * 8 * 12 = 192; biases 8 + 8 + 8 (QKV,
    # output), 12 + 8 (MLP); norms 32.
    assert layer_parameters(gqa) == 128 + 64 + 192 + 24 + 20 + 32
    gated = TransformerModel(**SMALL, kv_heads=2, mlp="gated")
    assert layer_parameters(gated) == 128 + 64 + 288 + 24 + 32 + 32
    mha = TransformerModel(**SMALL)
    assert layer_parameters(mha) == 4 * 64 + 2 * 8 * 12 + 12 + 9 * 8


def test_gqa_and_gated_layer_flops_by_hand():
    gated = TransformerModel(**SMALL, kv_heads=2, mlp="gated")
    # linear = 2 b s (weights) = 2 * 4 * (128 + 64 + 288) = 3840; scores 4 b s^2 h = 512.
    assert layer_flops(gated, 1) == PassFlops(3840 + 512, 3840 + 1024, 3840)
    assert layer_flops(gated, 2) == PassFlops(2 * 4352, 2 * 4864, 2 * 3840)


def test_gqa_and_gated_activation_memory_by_hand():
    gated = TransformerModel(**SMALL, kv_heads=2, mlp="gated")
    sbh, sbf, sbg = 32, 48, 16  # s b h, s b f, s b g d
    # whole 10 sbh; split: Q and output input 4 sbh, K and V 4 s b g d, gate/up/product 6 sbf.
    whole, split = 10 * sbh, 4 * sbh + 4 * sbg + 6 * sbf
    scores = 5 * 4 * 4 * 4  # 5 a s^2 b
    assert layer_activation_memory_bytes(gated, 1) == (
        whole + split + scores,
        (whole + split) * 32 / 34,
    )
    assert layer_activation_memory_bytes(gated, 1, tensor=2) == (
        whole + split / 2 + scores / 2,
        (whole + split / 2) * 32 / 34,
    )
    assert layer_activation_memory_bytes(gated, 1, 2, sequence_parallel=True)[0] == (
        (whole + split) / 2 + scores / 2
    )


models = st.builds(
    lambda layers, head_dim, heads, group, ffn, s, vocab, mlp: TransformerModel(
        layers=layers,
        hidden=head_dim * heads,
        heads=heads,
        kv_heads=heads // group,
        ffn_hidden=ffn,
        seq_len=s,
        vocab=vocab,
        mlp=mlp,
    ),
    st.integers(1, 6),
    st.sampled_from([2, 4, 8]),
    st.sampled_from([2, 4, 8]),
    st.sampled_from([1, 2]),
    st.integers(1, 64),
    st.integers(1, 64),
    st.integers(1, 500),
    st.sampled_from(["plain", "gated"]),
)


@settings(max_examples=60, deadline=None)
@given(models, st.integers(1, 4))
def test_step_flops_are_megatrons_formula_for_every_architecture(model, batch):
    assert model_flops_per_step(model, batch) == megatron_step_flops(model, batch)


@settings(max_examples=60, deadline=None)
@given(models)
def test_linear_flops_are_two_per_weight_per_token_and_the_split_holds(model):
    flops = layer_flops(model, 1)
    scores = 4 * model.seq_len**2 * model.hidden
    matrix_weights = model.attention_weights + model.mlp_weights
    assert flops.backward_weight == 2 * model.seq_len * matrix_weights
    assert flops.forward == flops.backward_weight + scores
    assert flops.backward_input == flops.backward_weight + 2 * scores
    # Biases (QKV at most 3h, output h, MLP h plus f or 2f) and two norms (4h) come on top.
    h, f = model.hidden, model.ffn
    assert 6 * h + f <= layer_parameters(model) - matrix_weights <= 9 * h + 2 * f


@settings(max_examples=60, deadline=None)
@given(models)
def test_fewer_kv_heads_and_no_gate_never_cost_more(model):
    full = TransformerModel(
        layers=model.layers,
        hidden=model.hidden,
        heads=model.heads,
        ffn_hidden=model.ffn,
        seq_len=model.seq_len,
        vocab=model.vocab,
        mlp="gated",
    )
    for counted in (layer_parameters, lambda m: layer_flops(m, 1).total):
        assert counted(model) <= counted(full)
    assert layer_activation_memory_bytes(model, 1)[0] <= layer_activation_memory_bytes(full, 1)[0]
    (mine,) = static_memory(model, (model.layers,))
    (theirs,) = static_memory(full, (model.layers,))
    assert mine.total_bytes <= theirs.total_bytes
