"""A serving iteration of a mixture-of-experts model: the experts a batch touches, the bytes
it reads, the all-to-alls of expert parallelism; and MLA's latent KV cache
(pipesim.cluster.inference_moe, pipesim.cluster.inference_attention)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.cluster.all_to_all import all_to_all_streams_ms
from pipesim.cluster.collectives import Group
from pipesim.cluster.hardware import gpu_profile, link_profile
from pipesim.cluster.inference import (
    BatchShape,
    ServingCosts,
    kv_cache_bytes_per_token,
    kv_capacity_tokens,
    stage_iteration_flops,
    stage_iteration_ms,
    stage_read_bytes,
)
from pipesim.cluster.inference_attention import decode_pair_flops, prefill_pair_flops
from pipesim.cluster.inference_moe import (
    dispatch_bytes,
    expected_experts_touched,
    expert_all_to_all_ms,
    routed_expert_read_bytes,
    routed_experts_ms,
)
from pipesim.cluster.mla import MLA
from pipesim.cluster.model import Efficiency
from pipesim.cluster.moe import MoE
from pipesim.cluster.transformer import TransformerModel, layer_parameters

H100 = gpu_profile("h100-sxm")
NVLINK = link_profile("nvlink4", "achievable")
# Mixtral 8x7B (Jiang et al. 2024, Table 1; its config.json)
MIXTRAL = TransformerModel(
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    ffn_hidden=14336,
    mlp="gated",
    seq_len=32768,
    vocab=32000,
    moe=MoE(experts=8, top_k=2, expert_ffn_hidden=14336),
)
# DeepSeek-V3 (DeepSeek-AI 2024, section 4.2; its config.json), bf16
DEEPSEEK_V3 = TransformerModel(
    layers=61,
    hidden=7168,
    heads=128,
    ffn_hidden=18432,
    mlp="gated",
    seq_len=4096,
    vocab=129280,
    mla=MLA(
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
    ),
    moe=MoE(experts=256, top_k=8, expert_ffn_hidden=2048, shared_experts=1, dense_layers=3),
)
# One Mixtral expert: gate, up (4096 -> 14336) and down (14336 -> 4096)
EXPERT_WEIGHTS = 3 * 4096 * 14336  # 176,160,768
# One Mixtral layer without its routed experts: attention 4096 (4096 + 2 x 1024) + 4096^2
# weights and 4096 + 2 x 1024 + 4096 biases, the router 4096 x 8 + 8, two norms 4 x 4096
DENSE_PART = 41_943_040 + 10_240 + 32_776 + 16_384  # 42,002,440
LM_HEAD = 32000 * 4096


def touched_by_enumeration(experts: int, top_k: int, tokens: int) -> Fraction:
    """The mean number of distinct experts over every way ``tokens`` tokens can each pick
    ``top_k`` of ``experts`` (all equally likely)."""
    choices = list(itertools.combinations(range(experts), top_k))
    picks = list(itertools.product(choices, repeat=tokens))
    total = sum(len(set().union(*pick)) for pick in picks)
    return Fraction(total, len(picks))


@pytest.mark.parametrize(
    ("experts", "top_k", "tokens"), [(4, 2, 3), (5, 1, 4), (6, 3, 2), (8, 2, 2), (3, 3, 2)]
)
def test_touched_experts_is_the_mean_over_every_routing(experts, top_k, tokens):
    exact = touched_by_enumeration(experts, top_k, tokens)
    assert expected_experts_touched(experts, top_k, tokens) == pytest.approx(float(exact))


def test_touched_experts_limits():
    """One token touches its k experts; a large batch all of them; none touches none."""
    assert expected_experts_touched(8, 2, 1) == pytest.approx(2.0, rel=1e-12)
    assert expected_experts_touched(256, 8, 1) == pytest.approx(8.0, rel=1e-12)
    assert expected_experts_touched(8, 2, 4096) == pytest.approx(8.0, rel=1e-12)
    assert expected_experts_touched(8, 2, 0) == 0.0
    # Mixtral at batch 4: 8 (1 - 0.75^4) = 5.46875
    assert expected_experts_touched(8, 2, 4) == pytest.approx(5.46875, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.integers(1, 16), st.integers(1, 200))
def test_touched_experts_grow_with_the_batch_and_stay_bounded(experts, top_k, tokens):
    top_k = min(top_k, experts)
    now = expected_experts_touched(experts, top_k, tokens)
    more = expected_experts_touched(experts, top_k, tokens + 1)
    assert top_k - 1e-9 <= now <= min(experts, tokens * top_k) + 1e-9
    assert more >= now - 1e-12


def test_a_mixtral_decode_step_at_batch_1_reads_the_activated_weights():
    """Batch 1: every layer reads its attention, router and norms and 2 of its 8 experts,
    and the last stage the LM head: 12.75B parameters (the card's 12.9B activated less the
    embedding, only looked up, and the experts' biases), in bf16."""
    shape = BatchShape(decode_seqs=1)
    expected = 2 * (32 * (DENSE_PART + 2 * EXPERT_WEIGHTS) + LM_HEAD)
    assert expected == 25_498_878_464
    got = stage_read_bytes(MIXTRAL, 32, shape, last=True)
    assert got == pytest.approx(expected, rel=1e-12)
    assert routed_expert_read_bytes(MIXTRAL, 1) == pytest.approx(2 * 2 * EXPERT_WEIGHTS)


def test_a_large_mixtral_batch_reads_every_expert():
    shape = BatchShape(decode_seqs=4096)
    expected = 2 * (32 * (DENSE_PART + 8 * EXPERT_WEIGHTS) + LM_HEAD)  # 46.57B parameters
    assert stage_read_bytes(MIXTRAL, 32, shape, last=True) == pytest.approx(expected, rel=1e-12)
    # split 8 ways, by tensor or by expert parallelism: each GPU reads an eighth of it
    for expert in (1, 2, 8):
        got = routed_expert_read_bytes(MIXTRAL, 4096, tensor=8, expert=expert)
        assert got == pytest.approx(2 * EXPERT_WEIGHTS, rel=1e-12)


def test_batch_1_expert_gemms_cost_their_weight_reads():
    """One token's two experts: each grouped GEMM (up with the gate, then down) is bound by
    reading its matrices, 2 x 2 x 14336 x 4096 and 2 x 4096 x 14336 bytes."""
    read = ServingCosts().read_bytes_per_s(H100)
    got = routed_experts_ms(MIXTRAL, 1, H100, Efficiency(), read_bytes_per_s=read)
    assert got == pytest.approx(2 * 2 * EXPERT_WEIGHTS / read * 1e3, rel=1e-12)


def test_expert_flops_follow_the_activated_weights():
    """FLOPs count ``top_k`` experts per token whatever the batch: ``2 P_activated``."""
    for tokens in (1, 64):
        _, decode = stage_iteration_flops(
            MIXTRAL, 32, BatchShape(decode_seqs=tokens), last=False, emitting=0
        )
        assert decode == 32 * 2 * layer_parameters(MIXTRAL, activated=True) * tokens


def test_dispatch_bytes_per_layer_by_hand():
    """64 decoding sequences on TP8 x EP8: each GPU dispatches the 2 copies of its 8
    tokens, 4096 bf16 values each, 7 of every 8 to another GPU: 8 x 2 x 4096 x 2 x 7/8 =
    114,688 bytes, and the combine as many back."""
    assert dispatch_bytes(MIXTRAL, 64, tensor=8, expert=8) == 114_688
    assert dispatch_bytes(MIXTRAL, 64, tensor=8, expert=1) == 0
    one = all_to_all_streams_ms(114_688, 0.0, Group(8, NVLINK))
    assert expert_all_to_all_ms(MIXTRAL, 64, NVLINK, tensor=8, expert=8) == pytest.approx(2 * one)
    assert expert_all_to_all_ms(MIXTRAL, 64, NVLINK, tensor=8, expert=1) == 0.0


def test_expert_parallelism_adds_the_all_to_alls_of_every_moe_layer():
    """The same step with the experts split by tensor or by expert parallelism differs by
    the 32 layers' dispatch and combine and the expert GEMMs' shapes, nothing else."""
    shape = BatchShape(decode_seqs=64, decode_context=64 * 1000)
    kwargs = {"first": True, "last": True, "tensor": 8, "tensor_link": NVLINK}
    by_tensor = stage_iteration_ms(MIXTRAL, 32, H100, shape, expert=1, **kwargs)
    by_expert = stage_iteration_ms(MIXTRAL, 32, H100, shape, expert=8, **kwargs)
    read = ServingCosts().read_bytes_per_s(H100)
    experts = {
        ep: routed_experts_ms(
            MIXTRAL, 64, H100, Efficiency(), read_bytes_per_s=read, tensor=8, expert=ep
        )
        for ep in (1, 8)
    }
    all_to_all = expert_all_to_all_ms(MIXTRAL, 64, NVLINK, tensor=8, expert=8)
    expected = 32 * (all_to_all + experts[8] - experts[1])
    assert by_expert - by_tensor == pytest.approx(expected, rel=1e-9)


def test_expert_parallelism_must_divide_the_stage_gpus():
    with pytest.raises(ValueError, match="expert must divide tensor"):
        stage_iteration_ms(
            MIXTRAL,
            32,
            H100,
            BatchShape(decode_seqs=1),
            first=True,
            last=True,
            tensor=2,
            tensor_link=NVLINK,
            expert=4,
        )


def test_mla_kv_cache_is_the_latent():
    """DeepSeek-V3 keeps 512 + 64 elements per token and layer: 61 x 576 x 2 = 70,272
    bytes per token in bf16, on every tensor-parallel GPU alike (the latent has no head to
    split), where 128 heads of keys (192) and values (128) would take 61 x 128 x 320 x 2."""
    assert kv_cache_bytes_per_token(DEEPSEEK_V3) == 61 * (512 + 64) * 2 == 70_272
    assert kv_cache_bytes_per_token(DEEPSEEK_V3, tensor=8) == 70_272
    assert 61 * 128 * (192 + 128) * 2 / 70_272 == pytest.approx(71.1, abs=0.05)


def test_mla_attention_work_per_pair():
    """Prefill up-projects: 2 x 128 x (192 + 128) FLOPs per (query, key) pair; decode
    attends over the latent, absorbed: 2 x 128 x (2 x 512 + 64)."""
    assert prefill_pair_flops(DEEPSEEK_V3) == 81_920
    assert decode_pair_flops(DEEPSEEK_V3) == 278_528
    assert prefill_pair_flops(MIXTRAL) == decode_pair_flops(MIXTRAL) == 4 * 4096


def test_mla_decode_reads_the_latent_of_every_cached_token():
    """The KV reads of a DeepSeek-V3 decode step: every cached token's 1,152 bytes a
    layer, whatever the tensor parallelism."""
    shape = BatchShape(decode_seqs=4, decode_context=4 * 1000)
    base = stage_read_bytes(DEEPSEEK_V3, 61, BatchShape(decode_seqs=4), last=False, tensor=8)
    got = stage_read_bytes(DEEPSEEK_V3, 61, shape, last=False, tensor=8)
    assert got - base == pytest.approx(61 * 1152 * 4000)


def test_dense_layers_stay_dense():
    """DeepSeek-V3's first 3 layers are dense SwiGLU MLPs of width 18432: a stage of them
    reads their weights whole; one from layer 3 on reads, of its 256 routed experts, the 8
    one token touches (beside attention, router and the shared expert); a stage across the
    boundary reads one of each kind."""
    shape = BatchShape(decode_seqs=1)
    dense = stage_read_bytes(DEEPSEEK_V3, 3, shape, last=False, start=0)
    assert dense == pytest.approx(3 * 2 * layer_parameters(DEEPSEEK_V3.dense_layer))
    expert = 3 * 7168 * 2048
    routed = 256 * (expert + 2 * 2048 + 7168)  # matrices and biases
    moe_layer = 2 * (layer_parameters(DEEPSEEK_V3) - routed + 8 * expert)
    moe = stage_read_bytes(DEEPSEEK_V3, 3, shape, last=False, start=3)
    assert moe == pytest.approx(3 * moe_layer, rel=1e-12)
    across = stage_read_bytes(DEEPSEEK_V3, 2, shape, last=False, start=2)
    assert across == pytest.approx(dense / 3 + moe_layer, rel=1e-12)


def test_mla_kv_capacity_follows_the_latent():
    """A replica's KV capacity is its free memory over 576 bf16 elements per token and
    layer: a 4-layer MLA model on one H100 keeps (80 GiB x 0.9 - weights) / (4 x 1152)
    tokens."""
    model = TransformerModel(
        layers=4,
        hidden=1024,
        heads=8,
        seq_len=4096,
        vocab=1000,
        mla=MLA(
            q_lora_rank=256,
            kv_lora_rank=512,
            qk_nope_head_dim=64,
            qk_rope_head_dim=64,
            v_head_dim=64,
        ),
    )
    weights = 2 * (4 * layer_parameters(model) + 2 * 1000 * 1024)
    free = H100.memory_bytes * 0.9 - weights
    got = kv_capacity_tokens(model, H100, tensor=1, pipeline=1, gpu_memory_utilization=0.9)
    assert got == math.floor(free / (4 * 1152))
