"""The max-rate search: bracket, bisection on printable rates, bounds, determinism; on the
engine, the capacity a deterministic queue gives in closed form, several seeds, and the
request bound of a workload that ends at a duration."""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.analysis.max_rate import (
    Bounds,
    MaxRateError,
    Probe,
    bisect_rate,
    find_max_rate,
    on_grid,
    rate_text,
)
from pipesim.analysis.slo_probe import slo_probe
from pipesim.scenario.serving import load_serving

UNBOUNDED = Bounds(max_probes=10_000, max_search_s=math.inf, max_requests=None)


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
    assert (found.digits, found.stopped) == (3, "tolerance")


def test_bisection_rates_are_short_decimals_printed_exactly():
    """10 ok, 20 fails; then each midpoint rounded to 4 digits: 15 fails, 12.5 ok, 13.75
    fails, 13.125 -> 13.12 ok (half to even), (13.12 + 13.75) / 2 = 13.43499... -> 13.43 ok,
    13.59 ok, 13.67 fails: 0.08 <= 1% of 13.67. The unrounded bisection would have run
    13.59375 and 13.671875."""
    seen: list[float] = []
    found = bisect_rate(threshold_probe(13.6, seen), start_rps=10.0)
    assert seen == [10.0, 20.0, 15.0, 12.5, 13.75, 13.12, 13.43, 13.59, 13.67]
    assert (found.rate_rps, found.high_rps, found.digits) == (13.59, 13.67, 4)
    assert all(on_grid(rate, 4) == rate for rate in seen)
    assert rate_text(found.rate_rps) == "13.59"


@pytest.mark.parametrize(
    ("rate", "text"),
    [
        (40.0, "40"),
        (13.59, "13.59"),
        (13.59375, "13.59375"),
        (1e-05, "1.0e-05"),
        (2.5e-7, "2.5e-07"),
    ],
)
def test_a_rate_prints_as_yaml_reads_it_back(rate, text):
    assert rate_text(rate) == text
    assert yaml.safe_load(text) == rate


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
    found = bisect_rate(threshold_probe(limit), start, tolerance, UNBOUNDED)
    assert found.stopped == "tolerance"
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
    with pytest.raises(MaxRateError, match="serving.slo holds at every rate up to 5.36871e"):
        bisect_rate(lambda rate: Probe(rate, True), 1.0)
    with pytest.raises(MaxRateError, match=r"no rate down to .* meets serving\.slo"):
        bisect_rate(lambda rate: Probe(rate, False), 1.0)


# ---------------------------------------------------------------------------
# Bounds


def test_max_probes_stops_the_bisection_and_says_so():
    seen: list[float] = []
    found = bisect_rate(threshold_probe(13.6, seen), 10.0, bounds=Bounds(max_probes=4))
    assert seen == [10.0, 20.0, 15.0, 12.5]
    assert (found.low_rps, found.high_rps, found.stopped) == (12.5, 15.0, "max_probes")


def test_a_bound_during_the_doubling_leaves_a_lower_bound():
    found = bisect_rate(threshold_probe(1e6), 1.0, bounds=Bounds(max_probes=3))
    assert (found.rate_rps, found.high_rps, found.stopped) == (4.0, None, "max_probes")
    assert found.to_dict()["bracket_rps"] == [4.0, None]


def test_a_bound_before_any_rate_met_the_slo_is_an_error():
    with pytest.raises(MaxRateError, match=r"no rate down to 0\.25 .* \(--max-probes\)"):
        bisect_rate(threshold_probe(0.01), 1.0, bounds=Bounds(max_probes=3))


def test_max_search_s_starts_no_rate_after_the_time_is_up():
    """A clock that advances 10 s per reading: read at the start, then before each rate
    after the first; with 25 s the fourth rate (read at 30 s) is not started."""
    ticks = iter(range(0, 1000, 10))
    seen: list[float] = []
    found = bisect_rate(
        threshold_probe(13.6, seen), 10.0, bounds=Bounds(max_search_s=25), clock=lambda: next(ticks)
    )
    assert seen == [10.0, 20.0, 15.0]
    assert (found.low_rps, found.high_rps, found.stopped) == (10.0, 15.0, "max_search_s")


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
    answer, run = find_max_rate(load_serving(str(path)), rel_tolerance=0.005, seeds=1)
    limit = 1 / (0.020 * (1 - 0.5 / 199))
    assert answer.low_rps <= limit < answer.high_rps
    assert answer.high_rps - answer.low_rps <= 0.005 * answer.high_rps
    assert run.report.ttft_ms.p99 <= 30.0 and run.report.completed == 200
    # the run handed back is the one at the answer's rate, not another probe's
    assert run.report == slo_probe(load_serving(str(path)), answer.rate_rps)[1].report
    again, _ = find_max_rate(load_serving(str(path)), rel_tolerance=0.005, seeds=1)
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


# ---------------------------------------------------------------------------
# On the engine: several seeds, and a workload that grows with the rate


def write_poisson(folder, **workload) -> str:
    """One stage, 20 ms a prompt, 1 ms a token, up to 4 sequences; p90 TTFT within 60 ms."""
    path = folder / "poisson.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "schema_version": 1,
                "name": "poisson",
                "pipeline": {"devices": 1},
                "costs": {"prefill_ms": 20.0, "decode_ms": 1.0},
                "serving": {
                    "workload": {
                        "rate": 10.0,
                        "prompt_tokens": 16,
                        "output_tokens": {"distribution": "uniform", "low": 1, "high": 20},
                        "seed": 5,
                        **workload,
                    },
                    "max_num_seqs": 4,
                    "slo": {"ttft_ms": 60.0, "percentile": 90},
                },
            }
        )
    )
    return str(path)


def test_the_answer_meets_the_slo_under_every_seed(tmp_path):
    scenario = load_serving(write_poisson(tmp_path, requests=80))
    answer, run = find_max_rate(scenario)
    assert answer.seeds == (5, 6, 7)
    # the scenario's seed alone meets the SLO at 20 requests/s; seed 6 does not
    assert [(r.seed, r.meets_slo) for r in answer.probes[1].runs] == [(5, True), (6, False)]
    assert answer.probes[1].rate_rps == 20.0 and answer.rate_rps < 20.0
    assert [r.seed for r in answer.answer.runs] == [5, 6, 7]
    for seed in answer.seeds:
        judged, _ = slo_probe(scenario, answer.rate_rps, seed)
        assert judged.meets_slo and judged.ttft_ms <= 60.0
    # the run shown is the first seed's, as serving the printed rate gives it
    again = load_serving(scenario.source, [f"serving.workload.rate={rate_text(answer.rate_rps)}"])
    assert run.report == slo_probe(again, again.spec.serving.workload.rate)[1].report
    # a rate is settled by its first seed that misses the SLO: later seeds do not run
    for probe in answer.probes:
        assert [r.meets_slo for r in probe.runs[:-1]] == [True] * (len(probe.runs) - 1)
        assert probe.meets_slo == (len(probe.runs) == 3 and probe.runs[-1].meets_slo)
    assert answer.runs == sum(len(p.runs) for p in answer.probes)


def test_a_workload_ending_at_a_duration_is_cut_to_max_requests(tmp_path):
    """20 s at r requests/s is about 20 r requests: past 7.5 requests/s, more than 150."""
    scenario = load_serving(write_poisson(tmp_path, duration_s=20.0, rate=5.0))
    answer, run = find_max_rate(scenario, seeds=1, bounds=Bounds(max_requests=150))
    cut = [p for p in answer.probes if p.cut]
    assert cut and all(r.requests == 150 for p in cut for r in p.runs)
    assert all(p.runs[0].requests < 150 for p in answer.probes if not p.cut)
    assert min(p.rate_rps for p in cut) > max(p.rate_rps for p in answer.probes if not p.cut)
    assert len(run.scenario.requests) == answer.answer.runs[0].requests
    if answer.answer.cut:
        assert answer.overrides[-1] == "serving.workload.requests=150"
    again = load_serving(scenario.source, list(answer.overrides))
    assert run.report == slo_probe(again, answer.rate_rps)[1].report
