"""The serving engine on cases whose timeline can be written out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from pipesim.serving.deployment import ServeConfig
from pipesim.serving.engine import simulate_serving
from pipesim.serving.metrics import summarize
from pipesim.serving.replica import HandTypedCosts, ReplicaConfig
from pipesim.serving.request import Request


def serve(costs, requests, **replica):
    return simulate_serving(ServeConfig(ReplicaConfig(costs, **replica)), requests)


def test_one_request_alone_pays_every_stage_and_hop():
    # 3 stages; a 100-token prompt costs 10, 20, 30 ms; a decode step 1, 2, 3 ms;
    # hops 0.5 and 0.25 ms between the stages, and 0.125 ms for the sampled token's way
    # back from stage 2 to stage 0. The first token is out when the prefill leaves stage 2;
    # every later one needs the one before it back on stage 0 first.
    costs = HandTypedCosts((10.0, 20.0, 30.0), (1.0, 2.0, 3.0), 100, (0.5, 0.25, 0.125))
    result = serve(costs, [Request(0, 1.0, 100, 4)])
    r = result.requests
    ttft_ms = 10 + 0.5 + 20 + 0.25 + 30
    tpot_ms = 0.125 + 1 + 0.5 + 2 + 0.25 + 3
    assert r.first_scheduled_s[0] == 1.0
    assert r.ttft_s[0] * 1e3 == pytest.approx(ttft_ms)
    assert r.tpot_s[0] * 1e3 == pytest.approx(tpot_ms)
    assert r.e2e_s[0] * 1e3 == pytest.approx(ttft_ms + 3 * tpot_ms)
    log = result.iterations
    assert log.prefill_tokens.tolist() == [100, 0, 0, 0]
    assert log.decode_seqs.tolist() == [0, 1, 1, 1]
    # the second iteration starts on stage 0 when the first has left the last stage and
    # its token has come back
    np.testing.assert_allclose((log.start_s[1, 0] - log.end_s[0, -1]) * 1e3, 0.125, rtol=1e-9)
    np.testing.assert_allclose((log.start_s[0] - 1.0) * 1e3, [0, 10.5, 10.5 + 20.25], rtol=1e-9)
    report = summarize(result)
    assert report.itl_ms.mean == pytest.approx(tpot_ms)
    assert report.ttft_ms.p99 == pytest.approx(ttft_ms)


def test_a_prompt_scales_its_prefill_cost_and_shares_a_decode_step():
    # one stage; two requests at t=0 prefill together (150 tokens: 15 ms), then decode
    # together (2 ms a step): the batch holds both.
    costs = HandTypedCosts((10.0,), (2.0,), 100)
    result = serve(costs, [Request(0, 0.0, 50, 3), Request(1, 0.0, 100, 2)])
    r = result.requests
    np.testing.assert_allclose(r.first_token_s * 1e3, [15, 15])
    np.testing.assert_allclose(r.finish_s * 1e3, [19, 17])
    assert result.iterations.batch_size.tolist() == [2, 2, 1]


def test_pipeline_keeps_one_batch_per_stage_in_flight():
    # two stages of 1 ms decode, free prefill, two requests: each gets its own virtual
    # engine. Both prefills leave at t=0; engine 0 decodes on stage 0 in [0,1], stage 1 in
    # [1,2]; engine 1 follows one stage behind ([1,2], [2,3]). From then on each engine
    # gets a token every 2 ms: engine 0 at 2, 4, 6, 8; engine 1 at 3, 5, 7, 9.
    costs = HandTypedCosts((0.0, 0.0), (1.0, 1.0), 1)
    result = serve(costs, [Request(0, 0.0, 1, 5), Request(1, 0.0, 1, 5)])
    r = result.requests
    assert r.engine.tolist() == [0, 1]
    np.testing.assert_allclose(r.tpot_s * 1e3, [8 / 4, 9 / 4])
    np.testing.assert_allclose(r.finish_s * 1e3, [8.0, 9.0])
    busy = result.iterations.busy_s(1)[0]
    np.testing.assert_allclose(busy * 1e3, [8.0, 8.0])


def test_chunked_prefill_decodes_first_and_fills_the_budget_with_chunks():
    # one stage, 1 ms per prompt token, 1 ms a decode step, 8 tokens an iteration.
    # t=0: request 0's 4-token prompt (4 ms). Request 1 (20 tokens) arrives at 0.5 ms.
    # t=4: request 0 decodes (1 token), request 1 takes the other 7: 8 ms, out at 12;
    # t=12: the same, out at 20; t=20: decode + the last 6 prompt tokens, out at 27
    # (request 1's first token); t=27: both decode, out at 28, both done.
    costs = HandTypedCosts((4.0,), (1.0,), 4)
    replica = ReplicaConfig(costs, max_num_seqs=4, max_num_batched_tokens=8, chunked_prefill=True)
    result = simulate_serving(
        ServeConfig(replica), [Request(0, 0.0, 4, 5), Request(1, 0.0005, 20, 2)]
    )
    log = result.iterations
    assert log.prefill_tokens.tolist() == [4, 7, 7, 6, 0]
    assert log.decode_seqs.tolist() == [0, 1, 1, 1, 2]
    np.testing.assert_allclose(log.end_s[:, 0] * 1e3, [4, 12, 20, 27, 28])
    r = result.requests
    np.testing.assert_allclose(r.first_scheduled_s * 1e3, [0, 4])
    np.testing.assert_allclose(r.first_token_s * 1e3, [4, 27])
    np.testing.assert_allclose(r.finish_s * 1e3, [28, 28])
    gaps = np.repeat(result.token_gaps.gap_s, result.token_gaps.count) * 1e3
    np.testing.assert_allclose(np.sort(gaps), [1, 1, 7, 8, 8])  # 8, 8, 7, 1 and 1


def test_preemption_by_recomputation_hand_derived():
    # one stage, 1 ms per prompt token, 1 ms a decode step; blocks of one token, 5 blocks.
    # t=0: both 2-token prompts (4 blocks), out at 4: first tokens.
    # step 0 needs a block for each (contexts of 3); one is free: request 0 (older) takes
    # it, request 1 (the newest) is preempted, its 2 blocks back. Request 0 decodes alone
    # (exits 5, 6, 7; a block each time), finishes at 7 and frees its 5 blocks. Request 1
    # prefills again, prompt and its one token (3 tokens, 3 ms, out at 10: its second
    # token, 6 ms after its first), then decodes (11, 12).
    costs = HandTypedCosts((2.0,), (1.0,), 2)
    replica = ReplicaConfig(costs, max_num_seqs=2, block_size=1, kv_blocks=5)
    result = simulate_serving(ServeConfig(replica), [Request(0, 0.0, 2, 4), Request(1, 0.0, 2, 4)])
    log = result.iterations
    assert log.prefill_tokens.tolist() == [4, 0, 0, 0, 3, 0, 0]
    assert log.decode_seqs.tolist() == [0, 1, 1, 1, 0, 1, 1]
    r = result.requests
    assert r.preemptions.tolist() == [0, 1]
    np.testing.assert_allclose(r.first_token_s * 1e3, [4, 4])
    np.testing.assert_allclose(r.finish_s * 1e3, [7, 12])
    gaps = np.repeat(result.token_gaps.gap_s, result.token_gaps.count) * 1e3
    np.testing.assert_allclose(np.sort(gaps), [1, 1, 1, 1, 1, 6])
    np.testing.assert_allclose(r.max_itl_s * 1e3, [1, 6])
    assert result.timeline.kv_blocks_used.max() == 5
    assert summarize(result).preemptions == 1


def test_progress_counts_every_request_once():
    costs = HandTypedCosts((1.0,), (1.0,), 4)
    config = ServeConfig(ReplicaConfig(costs, max_num_seqs=2, max_num_batched_tokens=8))
    requests = [Request(0, 0.0, 4, 3), Request(1, 0.0, 9, 1), Request(2, 0.001, 4, 1)]
    ticks: list[int] = []
    simulate_serving(config, requests, progress=ticks.append)
    assert ticks == [1, 1, 1]  # one finished, one rejected (9 > 8 tokens), one finished


@pytest.mark.parametrize(
    "build, field",
    [
        (
            lambda c: ReplicaConfig(c, max_num_seqs=8, max_num_batched_tokens=4),
            "max_num_batched_tokens",
        ),
        (lambda c: ReplicaConfig(c, block_size=0), "block_size"),
        (lambda c: ReplicaConfig(c, kv_blocks=1), "kv_blocks"),
        (lambda c: ServeConfig(ReplicaConfig(c), replicas=0), "replicas"),
        (lambda c: ServeConfig(ReplicaConfig(c), router="random"), "router"),
        (lambda c: HandTypedCosts((1.0, 1.0), (1.0,), 4), "decode_ms"),
        (lambda c: HandTypedCosts((1.0, -1.0), (1.0, 1.0), 4), "prefill_ms"),
        (lambda c: HandTypedCosts((1.0, 1.0), (1.0, 1.0), 4, (1.0, 2.0, 3.0)), "hops_ms"),
        (lambda c: HandTypedCosts((1.0, 1.0), (1.0, 1.0), 4, (-1.0,)), "hops_ms"),
    ],
)
def test_bad_configurations_name_their_field(build, field):
    costs = HandTypedCosts((1.0, 1.0), (1.0, 1.0), 4)
    with pytest.raises(ValueError, match=f"^{field}"):
        build(costs)


def test_requests_out_of_order_are_refused():
    costs = HandTypedCosts((1.0,), (1.0,), 4)
    with pytest.raises(ValueError, match="request 1: arrival_s"):
        simulate_serving(
            ServeConfig(ReplicaConfig(costs)), [Request(0, 1.0, 4, 2), Request(1, 0.5, 4, 2)]
        )
