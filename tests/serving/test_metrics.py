"""Serving metrics: percentiles of weighted gaps, goodput under an SLO, KV utilisation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.serving.deployment import ServeConfig
from pipesim.serving.engine import simulate_serving
from pipesim.serving.metrics import latency_stats, summarize
from pipesim.serving.replica import HandTypedCosts, ReplicaConfig
from pipesim.serving.request import Request


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 10, allow_nan=False), st.integers(0, 6)), min_size=1, max_size=30
    )
)
def test_weighted_stats_equal_those_of_the_expanded_sample(pairs):
    values = np.array([v for v, _ in pairs])
    counts = np.array([c for _, c in pairs])
    expanded = np.repeat(values, counts)
    got = latency_stats(values, counts)
    want = latency_stats(expanded)
    if not want.defined:  # every count 0: no sample either way
        assert got == want
        return
    for name in ("mean", "p50", "p90", "p99"):
        assert getattr(got, name) == pytest.approx(getattr(want, name), rel=1e-9, abs=1e-9)


def test_stats_leave_out_undefined_values_and_are_undefined_when_empty():
    stats = latency_stats(np.array([np.nan, 0.001, 0.003]))
    assert (stats.mean, stats.p50) == (pytest.approx(2.0), pytest.approx(2.0))
    assert latency_stats(np.array([np.nan])).p99 is None


def test_one_request_kv_use_batch_size_and_busy_time():
    # one stage; an 8-token prompt (8 ms) in 2 blocks of 4; its first decode step (t=8)
    # reaches context 9 and takes a third block; tokens at 8, 9, 10 ms, then all blocks
    # are freed. KV use: 2 of 10 blocks for 8 ms, 3 for 2 ms over a 10 ms run.
    costs = HandTypedCosts((8.0,), (1.0,), 8)
    replica = ReplicaConfig(costs, max_num_seqs=4, block_size=4, kv_blocks=10)
    report = summarize(simulate_serving(ServeConfig(replica), [Request(0, 0.0, 8, 3)]))
    assert report.duration_s == pytest.approx(0.010)
    assert report.kv_utilization.mean == pytest.approx((2 * 8 + 3 * 2) / (10 * 10))
    assert report.kv_utilization.peak == pytest.approx(0.3)
    assert (report.batch_size.mean, report.batch_size.peak) == (1.0, 1.0)
    assert report.devices[0].busy_ms == pytest.approx(10.0)
    assert report.bubble_fraction == pytest.approx(0.0, abs=1e-12)
    assert report.output_tokens_per_second == pytest.approx(300.0)
    assert report.mean_in_system == pytest.approx(1.0)


def test_goodput_counts_requests_within_the_slo():
    # the preemption case of test_engine: TTFT 4 and 4 ms; TPOT 1 ms and 8/3 ms; 12 ms run
    costs = HandTypedCosts((2.0,), (1.0,), 2)
    replica = ReplicaConfig(costs, max_num_seqs=2, block_size=1, kv_blocks=5)
    result = simulate_serving(ServeConfig(replica), [Request(0, 0.0, 2, 4), Request(1, 0.0, 2, 4)])
    assert summarize(result).goodput_rps == pytest.approx(2 / 0.012)
    assert summarize(result, slo_tpot_ms=2.0).goodput_rps == pytest.approx(1 / 0.012)
    assert summarize(result, slo_ttft_ms=3.9).goodput_rps == 0.0
    report = summarize(result, slo_ttft_ms=4.0, slo_tpot_ms=3.0)
    assert report.goodput_rps == pytest.approx(report.throughput_rps)
    assert report.tpot_ms.mean == pytest.approx((1 + 8 / 3) / 2)


def test_report_keys():
    costs = HandTypedCosts((1.0,), (1.0,), 4)
    report = summarize(simulate_serving(ServeConfig(ReplicaConfig(costs)), [Request(0, 0.0, 4, 2)]))
    plain = report.to_dict()
    for key in (
        "requests",
        "completed",
        "rejected",
        "preemptions",
        "duration_s",
        "throughput_rps",
        "output_tokens_per_second",
        "goodput_rps",
        "mean_in_system",
    ):
        assert isinstance(plain[key], int | float), key
    for key in ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms", "itl_ms"):
        assert set(plain[key]) == {"mean", "p50", "p90", "p99"}
    assert set(plain["kv_utilization"]) == set(plain["batch_size"]) == {"mean", "peak"}
    assert plain["devices"] == [
        {"replica": 0, "stage": 0, "busy_ms": pytest.approx(2.0), "bubble_fraction": 0.0}
    ]
