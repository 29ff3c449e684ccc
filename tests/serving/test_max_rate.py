"""The max-rate search: bracket, bisection, determinism; on the engine, the capacity a
deterministic queue gives in closed form."""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.analysis.max_rate import MaxRateError, Probe, bisect_rate, find_max_rate, slo_probe
from pipesim.scenario.serving import load_serving


def threshold_probe(limit: float, seen: list[float] | None = None):
    def probe(rate: float) -> Probe:
        if seen is not None:
            seen.append(rate)
        return Probe(rate, rate <= limit)

    return probe


def test_doubling_then_bisection_runs_the_rates_written_out():
    seen: list[float] = []
    found = bisect_rate(threshold_probe(3.0, seen), start_rps=1.0, rel_tolerance=0.1)
    # 1 ok, 2 ok, 4 fails -> [2, 4]; 3 ok -> [3, 4]; 3.5 fails -> [3, 3.5]: 0.5 > 0.35;
    # 3.25 fails -> [3, 3.25]: 0.25 <= 0.325, done
    assert seen == [1.0, 2.0, 4.0, 3.0, 3.5, 3.25]
    assert (found.rate_rps, found.low_rps, found.high_rps) == (3.0, 3.0, 3.25)
    assert [p.meets_slo for p in found.probes] == [True, True, False, True, False, False]


def test_halving_when_the_first_guess_is_too_fast():
    seen: list[float] = []
    found = bisect_rate(threshold_probe(0.3, seen), start_rps=2.0, rel_tolerance=0.5)
    # 2 fails, 1 fails, 0.5 fails, 0.25 ok -> [0.25, 0.5]: 0.25 <= 0.25, done
    assert seen == [2.0, 1.0, 0.5, 0.25]
    assert (found.low_rps, found.high_rps) == (0.25, 0.5)


@settings(max_examples=200, deadline=None)
@given(
    limit=st.floats(1e-3, 1e6),
    start=st.floats(1e-3, 1e6),
    tolerance=st.sampled_from([0.001, 0.01, 0.1]),
)
def test_the_answer_brackets_the_threshold_within_the_tolerance(limit, start, tolerance):
    found = bisect_rate(threshold_probe(limit), start, tolerance)
    assert found.low_rps <= limit < found.high_rps
    assert found.high_rps - found.low_rps <= tolerance * found.high_rps
    # two bracket probes at least, then about log2(1/tolerance) bisections
    bisections = math.ceil(math.log2(1 / tolerance))
    assert len(found.probes) <= 2 + abs(math.log2(limit / start)) + 1 + bisections


def test_the_search_is_deterministic():
    first = bisect_rate(threshold_probe(7.7), 1.0)
    assert first == bisect_rate(threshold_probe(7.7), 1.0)
    assert first.to_dict()["bracket_rps"] == [first.low_rps, first.high_rps]


def test_a_slo_that_always_holds_or_never_holds_is_one_clear_error():
    with pytest.raises(MaxRateError, match="the SLO holds at every rate"):
        bisect_rate(lambda rate: Probe(rate, True), 1.0)
    with pytest.raises(MaxRateError, match=r"no rate down to .* meets serving\.slo"):
        bisect_rate(lambda rate: Probe(rate, False), 1.0)


# ---------------------------------------------------------------------------
# On the engine: a deterministic queue


def test_a_deterministic_queue_serves_up_to_one_request_per_service_time(tmp_path):
    """One stage, one sequence at a time, one-token answers: each request occupies the
    replica for its prefill, S = 20 ms. Arrivals are evenly spaced (gamma with a tiny cv).
    Below 1/S = 50 requests/s nobody waits (TTFT = S); above it request n waits
    n (S - 1/rate), so with N = 200 requests the last one's TTFT passes 1.5 S once
    rate > 1 / (S (1 - 0.5 / 199)). That is the highest rate meeting the SLO."""
    path = tmp_path / "dd1.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "schema_version": 1,
                "name": "dd1",
                "pipeline": {"devices": 1},
                "costs": {"prefill_ms": 20.0, "decode_ms": 1.0},
                "serving": {
                    "workload": {
                        "arrival": "gamma",
                        "rate": 10.0,
                        "cv": 1e-6,
                        "requests": 200,
                        "prompt_tokens": 16,
                        "output_tokens": 1,
                    },
                    "max_num_seqs": 1,
                    "slo": {"ttft_ms": 30.0, "percentile": 100},
                },
            }
        )
    )
    answer, run = find_max_rate(load_serving(str(path)), rel_tolerance=0.005)
    limit = 1 / (0.020 * (1 - 0.5 / 199))
    assert answer.low_rps <= limit < answer.high_rps
    assert answer.high_rps - answer.low_rps <= 0.005 * answer.high_rps
    assert run.report.ttft_ms.p99 <= 30.0 and run.report.completed == 200
    # the run handed back is the one at the answer's rate, not another probe's
    assert run.report == slo_probe(load_serving(str(path)), answer.rate_rps)[1].report
    again, _ = find_max_rate(load_serving(str(path)), rel_tolerance=0.005)
    assert again == answer


def test_max_rate_refuses_a_trace_or_a_missing_slo(tmp_path):
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,4,4\n")
    base = {
        "schema_version": 1,
        "name": "x",
        "pipeline": {"devices": 1},
        "costs": {"prefill_ms": 1.0, "decode_ms": 1.0},
        "decode": {"tokens": 1, "prompt_tokens": 4},
    }
    path = tmp_path / "trace.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                **base,
                "serving": {
                    "workload": {"arrival": "trace", "trace_file": "t.csv"},
                    "slo": {"ttft_ms": 5.0},
                },
            }
        )
    )
    with pytest.raises(MaxRateError, match=r"serving\.workload\.arrival: --max-rate needs poisson"):
        find_max_rate(load_serving(str(path)))
    path = tmp_path / "noslo.yaml"
    path.write_text(yaml.safe_dump({**base, "serving": {"workload": {"rate": 1.0, "requests": 5}}}))
    with pytest.raises(MaxRateError, match=r"serving\.slo: --max-rate needs slo\.ttft_ms or"):
        find_max_rate(load_serving(str(path)))
