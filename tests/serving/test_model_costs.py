"""The engine with costs derived from a model: one request alone pays, for its prefill and
for each decode step, the roofline time of every stage and the link time of every hop, with
the KV context growing by one token a step; each decode step also waits for the token the
step before sampled to come back from the last stage to the first."""

from __future__ import annotations

import pytest

from pipesim.cluster.hardware import gpu_profile
from pipesim.cluster.inference import BatchShape, stage_boundary_bytes, stage_iteration_ms
from pipesim.cluster.model import Efficiency
from pipesim.cluster.transformer import TransformerModel
from pipesim.serving.deployment import ServeConfig
from pipesim.serving.engine import simulate_serving
from pipesim.serving.model_costs import ModelIterationCosts
from pipesim.serving.replica import ReplicaConfig
from pipesim.serving.request import Request
from pipesim.sim.links import Link

MODEL = TransformerModel(
    layers=8,
    hidden=1024,
    heads=16,
    seq_len=4096,
    vocab=32000,
    kv_heads=4,
    mlp="gated",
    ffn_hidden=2816,
)
GPU = gpu_profile("h100-sxm")
LINK = Link(latency_us=5.0, bandwidth_gbps=25.0, name="test")
BACK = Link(latency_us=7.0, bandwidth_gbps=0.001, name="slow way back")  # 8 bytes: 8 us
PARTITION = (5, 3)


def stage_ms(stage: int, shape: BatchShape) -> float:
    return stage_iteration_ms(
        MODEL,
        PARTITION[stage],
        GPU,
        shape,
        first=stage == 0,
        last=stage == 1,
        efficiency=Efficiency(),
        emitting=1 if shape.prefill_tokens else 0,
    )


def pass_ms(shape: BatchShape) -> float:
    """Stage 0, the hop to stage 1, stage 1."""
    hop_ms = LINK.transfer_ms(stage_boundary_bytes(MODEL, shape))
    return stage_ms(0, shape) + hop_ms + stage_ms(1, shape)


def test_one_request_alone_with_model_costs():
    costs = ModelIterationCosts(
        model=MODEL,
        partition=PARTITION,
        gpu=GPU,
        tensor=1,
        tensor_link=None,
        efficiency=Efficiency(),
        links=(LINK,),
        back_link=BACK,
    )
    prompt, output = 300, 6
    result = simulate_serving(ServeConfig(ReplicaConfig(costs)), [Request(0, 0.0, prompt, output)])
    r = result.requests
    ttft_ms = pass_ms(BatchShape(prefill_tokens=prompt, prefill_attention=prompt * prompt))
    # decode step g (g = 1 .. output-1) extends a context of prompt + g tokens, once the
    # one token id sampled before it is back: 7 us latency + 8 bytes at 1 MB/s = 0.015 ms
    back_ms = 0.007 + 0.008
    decode_ms = [
        back_ms + pass_ms(BatchShape(decode_seqs=1, decode_context=prompt + g))
        for g in range(1, output)
    ]
    assert r.ttft_s[0] * 1e3 == pytest.approx(ttft_ms, rel=1e-12)
    assert (r.finish_s[0] - r.first_token_s[0]) * 1e3 == pytest.approx(sum(decode_ms), rel=1e-12)
    # a longer context reads more KV cache: each step is a little slower than the one before
    assert decode_ms == sorted(decode_ms) and decode_ms[0] < decode_ms[-1]
    assert ttft_ms > decode_ms[0]
