"""The max-rate search: bracket, bisection, determinism; on the engine, the capacity a
deterministic queue gives in closed form."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.serving.max_rate import MaxRateError, Probe, bisect_rate


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
    with pytest.raises(MaxRateError, match="no rate down to .* meets the SLO"):
        bisect_rate(lambda rate: Probe(rate, False), 1.0)
