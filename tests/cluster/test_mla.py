"""Multi-head latent attention and wider heads: parameters, FLOPs, GEMM shapes, activation
memory and the KV cache, hand-derived on tiny models."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.cluster.activations import layer_activation_memory_bytes
from pipesim.cluster.mla import MLA
from pipesim.cluster.model import PassFlops, TransformerModel, layer_flops, layer_parameters
from pipesim.cluster.moe import MoE
from pipesim.cluster.pass_time import layer_gemm_shapes
from pipesim.cluster.transformer import attention_parameters, parameter_count

# h = 8, a = 2 heads; query latent 4, key-value latent 3, per head 2 + 1 rotary for queries
# and keys, 2 for values; plain MLP f = 32; s = 4.
TINY_MLA = MLA(q_lora_rank=4, kv_lora_rank=3, qk_nope_head_dim=2, qk_rope_head_dim=1, v_head_dim=2)
TINY = TransformerModel(layers=1, hidden=8, heads=2, seq_len=4, vocab=16, mla=TINY_MLA)


def test_a_tiny_mla_layer_has_the_parameters_counted_by_hand():
    # query down 8 -> 4, up 4 -> 2 x (2 + 1); key-value down 8 -> 3 + 1, up 3 -> 2 x (2 + 2);
    # output 2 x 2 -> 8
    weights = 8 * 4 + 4 * 6 + 8 * 4 + 3 * 8 + 4 * 8
    assert weights == 144 and TINY.attention_weights == 144
    biases = 4 + 6 + 4 + 8 + 8
    norms = 2 * (4 + 3)  # the two latents' norms, two vectors each
    assert attention_parameters(TINY) == weights + biases + norms == 188
    mlp = 2 * 8 * 32 + 32 + 8
    assert layer_parameters(TINY) == 188 + mlp + 4 * 8


def test_a_tiny_mla_layer_has_the_flops_counted_by_hand():
    linear = 2 * 4 * (144 + 2 * 8 * 32)  # every projection runs on every one of 4 tokens
    # per head: Q K^T over 3-wide keys (s x s x 3 multiply-adds), scores x V over 2-wide
    # values (s x s x 2); 2 heads, 2 FLOPs each
    scores = 2 * 2 * (4 * 4 * 3 + 4 * 4 * 2)
    assert scores == 320
    assert layer_flops(TINY, 1) == PassFlops(linear + scores, linear + 2 * scores, linear)


def test_mla_gemms_split_the_up_projections_by_heads():
    model = replace(TINY, heads=4)
    # down projections whole, up projections and the output split over 2 GPUs
    assert layer_gemm_shapes(model, 2)[:5] == (
        (4, 8),
        (4 * 3 // 2, 4),
        (3 + 1, 8),
        (4 * 4 // 2, 3),
        (8, 4 * 2 // 2),
    )


def test_mla_keeps_its_latents_and_caches_only_them():
    # per token, bytes: the 10h every layer keeps whole, the latents before and after their
    # norms and the shared rotary key (2 x (2 x 4 + 2 x 3 + 1)), the queries, keys, values
    # and the output's input (2 x (2 x 2 x 3 + 2 x 2 x 2)), the MLP's 2 x 2 x 32; 4 tokens
    total, _ = layer_activation_memory_bytes(replace(TINY, flash_attention=True), 1)
    assert total == 4 * (10 * 8 + 2 * 15 + 2 * 20 + 4 * 32)
    assert TINY_MLA.kv_cache_elements == 3 + 1  # against 2 a d = 8 for standard attention


def test_wider_heads_widen_the_queries_and_the_output():
    # Qwen3's shape in small: 4 heads of 4 on hidden 8, 2 key/value heads
    model = TransformerModel(
        layers=1, hidden=8, heads=4, kv_heads=2, head_dim=4, seq_len=4, vocab=16
    )
    assert model.q_width == 16 and model.kv_width == 8
    assert model.attention_weights == 8 * (16 + 2 * 8) + 16 * 8
    scores = 2 * 4 * (4 * 4 * 4 + 4 * 4 * 4)  # 4 heads of width 4, keys and values
    linear = 2 * 4 * (model.attention_weights + 2 * 8 * 32)
    assert layer_flops(model, 1) == PassFlops(linear + scores, linear + 2 * scores, linear)
    assert layer_gemm_shapes(model, 2)[:2] == ((32 // 2, 8), (8, 16 // 2))


def test_a_model_without_the_new_keys_is_what_it_was():
    plain = TransformerModel(layers=2, hidden=64, heads=4, seq_len=16, vocab=64)
    assert plain.head_dim == 16 and plain.q_width == 64
    assert replace(plain, head_dim=16) == plain
    assert layer_parameters(plain) == 12 * 64 * 64 + 13 * 64  # 12h^2 + 13h


@pytest.mark.parametrize(
    "change, message",
    [
        ({"head_dim": 0}, "model head_dim must be a positive integer, got 0"),
        ({"mtp_layers": -1}, "model mtp_layers must be >= 0, got -1"),
        ({"hidden": 10}, "hidden must be divisible by heads"),
    ],
)
def test_bad_shapes_are_refused(change, message):
    shape = {"layers": 1, "hidden": 8, "heads": 4, "seq_len": 4, "vocab": 16}
    with pytest.raises(ValueError, match=message):
        TransformerModel(**{**shape, **change})
    if "hidden" in change:  # with heads of a width of their own, any hidden size will do
        assert TransformerModel(**{**shape, **change}, head_dim=4).q_width == 16


def test_bad_mla_widths_are_refused():
    with pytest.raises(ValueError, match="mla kv_lora_rank must be a positive integer"):
        replace(TINY_MLA, kv_lora_rank=0)


def test_deepseek_v2_holds_236b_parameters_21b_activated():
    # DeepSeek-V2 (DeepSeek-AI 2024, abstract and its config.json): 60 layers of hidden
    # 5120, the first dense (SwiGLU 12288), then 160 routed experts (6 per token) and 2
    # shared, each 1536 wide; MLA as in V3; a 102,400-token vocabulary. "236B total
    # parameters, of which 21B are activated for each token."
    model = TransformerModel(
        layers=60,
        hidden=5120,
        heads=128,
        seq_len=4096,
        vocab=102400,
        ffn_hidden=12288,
        mlp="gated",
        moe=MoE(experts=160, top_k=6, expert_ffn_hidden=1536, shared_experts=2, dense_layers=1),
        mla=MLA(
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=128,
        ),
    )
    count = parameter_count(model)
    assert (round(count.total / 1e9), round(count.activated / 1e9)) == (236, 21)
    assert (count.total, count.activated) == (235_824_379_872, 21_384_312_800)
