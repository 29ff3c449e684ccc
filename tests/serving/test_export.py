"""A serving run as files: the per-request CSV and the Perfetto trace, on a timeline
written out by hand."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.serving.deployment import ServeConfig
from pipesim.serving.engine import simulate_serving
from pipesim.serving.export import report_scalars, requests_csv, to_chrome_trace
from pipesim.serving.metrics import summarize
from pipesim.serving.replica import HandTypedCosts, ReplicaConfig
from pipesim.serving.request import Request


def small_run():
    """One stage: a 100-token prompt costs 10 ms, a decode step 2 ms. Requests 0 and 1
    arrive at 0 and prefill together (150 tokens, 15 ms), then decode together: request 1
    (2 tokens) finishes at 17 ms, request 0 (3 tokens) at 19 ms; together they hold 4 + 7
    of the 16 blocks of 16 tokens. Request 2 needs 500 + 5 - 1 tokens of KV, 32 blocks:
    rejected."""
    costs = HandTypedCosts((10.0,), (2.0,), 100)
    config = ServeConfig(ReplicaConfig(costs, kv_blocks=16, block_size=16))
    requests = [Request(0, 0.0, 50, 3), Request(1, 0.0, 100, 2), Request(2, 0.001, 500, 5)]
    return simulate_serving(config, requests)


def test_the_request_csv_is_written_out():
    assert requests_csv(small_run()) == (
        "id,replica,arrival_s,prompt_tokens,output_tokens,status,ttft_ms,tpot_ms,e2e_ms,"
        "queue_ms,preemptions\n"
        "0,0,0.000000000,50,3,finished,15.000000,2.000000,19.000000,0.000000,0\n"
        "1,0,0.000000000,100,2,finished,15.000000,2.000000,17.000000,0.000000,0\n"
        "2,-1,0.001000000,500,5,rejected,,,,,0\n"
    )


def test_a_one_token_answer_has_no_tpot():
    costs = HandTypedCosts((4.0,), (1.0,), 10)
    result = simulate_serving(ServeConfig(ReplicaConfig(costs)), [Request(0, 0.5, 10, 1)])
    assert requests_csv(result).splitlines()[1] == (
        "0,0,0.500000000,10,1,finished,4.000000,,4.000000,0.000000,0"
    )


def two_stage_run():
    # two stages, hops 0.5 ms; each request its own virtual engine (see test_engine)
    costs = HandTypedCosts((4.0, 6.0), (1.0, 1.0), 8, (0.5,))
    config = ServeConfig(ReplicaConfig(costs))
    return simulate_serving(config, [Request(0, 0.0, 8, 3), Request(1, 0.002, 8, 2)])


def test_the_trace_has_an_event_per_iteration_per_stage():
    result = two_stage_run()
    trace = to_chrome_trace(result, label="t")
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(result.iterations) * 2
    assert Counter(e["tid"] for e in complete) == {
        0: len(result.iterations),
        1: len(result.iterations),
    }
    first_two = [e for e in complete if e["args"]["iteration"] in (0, 1)]
    # request 0's prefill: stage 0 in [0, 4] ms, stage 1 in [4.5, 10.5] ms; request 1's
    # (arrived at 2 ms, on the other virtual engine) waits for stage 0: [4, 8], [10.5, 16.5]
    assert [(e["name"], e["tid"]) for e in first_two] == [("prefill", s) for s in (0, 1, 0, 1)]
    times = [(e["ts"], e["dur"]) for e in first_two]
    expected = [(0.0, 4000.0), (4500.0, 6000.0), (4000.0, 4000.0), (10500.0, 6000.0)]
    assert times == [pytest.approx(t, rel=1e-12) for t in expected]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"stage 0", "stage 1", "requests"}


def test_each_request_life_is_a_span_of_three_phases():
    result = two_stage_run()
    r = result.requests
    spans = [e for e in to_chrome_trace(result)["traceEvents"] if e.get("cat") == "request"]
    for ident in (0, 1):
        mine = [(e["name"], e["ph"], e["ts"]) for e in spans if e["id"] == ident]
        arrival, scheduled = r.arrival_s[ident] * 1e6, r.first_scheduled_s[ident] * 1e6
        first, finish = r.first_token_s[ident] * 1e6, r.finish_s[ident] * 1e6
        assert mine == [
            (f"request {ident}", "b", arrival),
            ("queued", "b", arrival),
            ("queued", "e", scheduled),
            ("prefill", "b", scheduled),
            ("prefill", "e", first),
            ("decoding", "b", first),
            ("decoding", "e", finish),
            (f"request {ident}", "e", finish),
        ]
    assert r.first_token_s[0] * 1e3 == pytest.approx(10.5)


def test_rejections_and_counters_are_in_the_trace():
    result = small_run()
    events = to_chrome_trace(result)["traceEvents"]
    rejected = [e for e in events if e["ph"] == "i"]
    assert [(e["name"], e["pid"], e["ts"]) for e in rejected] == [("request 2 rejected", 1, 1000.0)]
    kv = [e for e in events if e["ph"] == "C" and e["name"] == "KV cache"]
    assert len(kv) == len(result.timeline.time_s)
    assert max(e["args"]["blocks used"] for e in kv) == result.timeline.kv_blocks_used.max()
    batches = [e["args"]["sequences"] for e in events if e["name"] == "batch size"]
    assert batches == result.iterations.batch_size.tolist() == [2, 2, 1]


def test_the_same_run_gives_the_same_bytes():
    assert json.dumps(to_chrome_trace(two_stage_run())) == json.dumps(
        to_chrome_trace(two_stage_run())
    )
    assert requests_csv(small_run()) == requests_csv(small_run())


def test_report_scalars_flatten_the_latency_objects():
    row = report_scalars(summarize(small_run()))
    assert row["requests"] == 3 and row["completed"] == 2 and row["rejected"] == 1
    assert row["ttft_ms_p50"] == pytest.approx(15.0)
    assert row["e2e_ms_mean"] == pytest.approx(18.0)
    assert "devices" not in row and all(not isinstance(v, dict | list) for v in row.values())


@settings(max_examples=40, deadline=None)
@given(
    stages=st.integers(1, 3),
    arrivals=st.lists(st.floats(0, 0.05), min_size=1, max_size=12),
    lengths=st.lists(st.tuples(st.integers(1, 64), st.integers(1, 8)), min_size=12, max_size=12),
    max_num_seqs=st.integers(1, 4),
    kv_blocks=st.integers(3, 20),
)
def test_every_request_is_one_csv_line_and_one_ordered_span(
    stages, arrivals, lengths, max_num_seqs, kv_blocks
):
    costs = HandTypedCosts((2.0,) * stages, (0.5,) * stages, 32, (0.1,) * (stages - 1))
    replica = ReplicaConfig(
        costs,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=64,
        block_size=4,
        kv_blocks=max(kv_blocks, stages),
    )
    requests = [
        Request(i, t, p, o)
        for i, (t, (p, o)) in enumerate(zip(sorted(arrivals), lengths, strict=False))
    ]
    result = simulate_serving(ServeConfig(replica), requests)
    lines = requests_csv(result).splitlines()
    assert len(lines) == len(requests) + 1
    statuses = [line.split(",")[5] for line in lines[1:]]
    assert statuses == ["rejected" if r else "finished" for r in result.requests.rejected]
    events = to_chrome_trace(result)["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == len(result.iterations) * stages
    assert sum(e["ph"] == "i" for e in events) == int(result.requests.rejected.sum())
    for ident in np.flatnonzero(~result.requests.rejected):
        mine = [e for e in events if e.get("cat") == "request" and e.get("id") == ident]
        assert [e["ph"] for e in mine] == ["b", "b", "e", "b", "e", "b", "e", "e"]
        times = [e["ts"] for e in mine]
        assert times == sorted(times) and all(np.isfinite(times))
