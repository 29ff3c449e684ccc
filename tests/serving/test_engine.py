"""The serving engine on cases whose timeline can be written out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from pipesim.serving.engine import simulate_serving
from pipesim.serving.metrics import summarize
from pipesim.serving.records import HandTypedCosts, ReplicaConfig, ServeConfig
from pipesim.serving.request import Request


def serve(costs, requests, **replica):
    return simulate_serving(ServeConfig(ReplicaConfig(costs, **replica)), requests)


def test_one_request_alone_pays_every_stage_and_hop():
    # 3 stages; a 100-token prompt costs 10, 20, 30 ms; a decode step 1, 2, 3 ms;
    # hops 0.5 and 0.25 ms between the stages.
    costs = HandTypedCosts((10.0, 20.0, 30.0), (1.0, 2.0, 3.0), 100, (0.5, 0.25))
    result = serve(costs, [Request(0, 1.0, 100, 4)])
    r = result.requests
    ttft_ms = 10 + 0.5 + 20 + 0.25 + 30
    tpot_ms = 1 + 0.5 + 2 + 0.25 + 3
    assert r.first_scheduled_s[0] == 1.0
    assert r.ttft_s[0] * 1e3 == pytest.approx(ttft_ms)
    assert r.tpot_s[0] * 1e3 == pytest.approx(tpot_ms)
    assert r.e2e_s[0] * 1e3 == pytest.approx(ttft_ms + 3 * tpot_ms)
    log = result.iterations
    assert log.prefill_tokens.tolist() == [100, 0, 0, 0]
    assert log.decode_seqs.tolist() == [0, 1, 1, 1]
    # the second iteration starts on stage 0 when the first has left the last stage
    np.testing.assert_allclose(log.start_s[1, 0], log.end_s[0, -1])
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
