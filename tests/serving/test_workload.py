"""The workload: arrivals and lengths drawn as their distributions say, traces read
exactly, bad trace files refused in one line.

Statistical checks use tolerances of four standard errors at the sample size drawn, so a
correct generator fails them about once in 15,000 seeds (and the seeds are fixed).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.scenario.arrivals import generate_requests
from pipesim.scenario.schema import ScenarioError
from pipesim.scenario.serving_schema import LengthSpec, WorkloadSpec
from pipesim.serving.request import Request
from pipesim.serving.workload import MAX_REQUESTS, draw_lengths

N = 20_000
SE = 4.0  # standard errors allowed


def workload(**keys) -> WorkloadSpec:
    return WorkloadSpec.model_validate(keys)


def gaps(requests: list[Request]) -> np.ndarray:
    return np.diff([0.0] + [r.arrival_s for r in requests])


# ---------------------------------------------------------------------------
# Arrivals


def test_poisson_gaps_are_exponential_at_the_rate():
    found = generate_requests(workload(arrival="poisson", rate=5.0, requests=N, seed=1))
    assert len(found) == N
    g = gaps(found)
    # exponential: sd = mean = 1/rate. Var(s^2)/sigma^4 = (mu4/sigma^4 - 1)/n = 8/n, so the
    # sample sd's relative error is sqrt(8/n)/2; the sample mean's adds 1/sqrt(n) at most.
    assert abs(g.mean() - 0.2) < SE * 0.2 / math.sqrt(N)
    assert abs(g.std() / g.mean() - 1.0) < SE * math.sqrt(8 / N) / 2 + SE / math.sqrt(N)
    # memorylessness: P(gap > mean) = 1/e
    p = math.exp(-1)
    assert abs((g > 0.2).mean() - p) < SE * math.sqrt(p * (1 - p) / N)


def test_gamma_gaps_have_the_mean_and_the_cv_asked_for():
    cv = 2.0
    found = generate_requests(workload(arrival="gamma", rate=4.0, cv=cv, requests=N, seed=2))
    g = gaps(found)
    assert abs(g.mean() - 0.25) < SE * cv * 0.25 / math.sqrt(N)
    # gamma of shape k: mu4/sigma^4 = 3 + 6/k, k = 1/cv^2 = 0.25 -> 27
    sd_cv = cv * math.sqrt(26 / N) / 2 + cv * cv / math.sqrt(N)
    assert abs(g.std() / g.mean() - cv) < SE * sd_cv


def test_gamma_with_cv_one_is_poisson_in_distribution():
    found = generate_requests(workload(arrival="gamma", rate=2.0, cv=1.0, requests=N, seed=3))
    g = gaps(found)
    p = math.exp(-1)
    assert abs((g > 0.5).mean() - p) < SE * math.sqrt(p * (1 - p) / N)


def test_duration_bounds_the_count_of_a_poisson_process():
    rate, duration = 50.0, 100.0
    found = generate_requests(workload(rate=rate, duration_s=duration, seed=4))
    assert all(r.arrival_s <= duration for r in found)
    # a Poisson count of mean rate*T has sd sqrt(rate*T)
    assert abs(len(found) - rate * duration) < SE * math.sqrt(rate * duration)
    assert [r.id for r in found] == list(range(len(found)))


def test_requests_or_duration_whichever_ends_first():
    few = generate_requests(workload(rate=10.0, requests=7, duration_s=1000.0, seed=0))
    assert len(few) == 7
    short = generate_requests(workload(rate=10.0, requests=10_000, duration_s=2.0, seed=0))
    assert 0 < len(short) < 10_000 and short[-1].arrival_s <= 2.0
    unbounded = generate_requests(workload(rate=10.0, duration_s=2.0, seed=0))
    assert unbounded == short  # the same stream, cut at the same time


def test_same_seed_same_requests_and_another_seed_others():
    spec = dict(
        arrival="gamma",
        rate=3.0,
        cv=3.0,
        requests=500,
        prompt_tokens={"distribution": "lognormal", "mean": 300, "cv": 1.5},
    )
    assert generate_requests(workload(seed=9, **spec)) == generate_requests(
        workload(seed=9, **spec)
    )
    assert generate_requests(workload(seed=9, **spec)) != generate_requests(
        workload(seed=10, **spec)
    )


def test_twice_the_rate_gives_the_same_requests_twice_as_close():
    slow = generate_requests(workload(rate=1.0, requests=200, seed=5))
    fast = generate_requests(workload(rate=2.0, requests=200, seed=5))
    assert [r.arrival_s / 2 for r in slow] == pytest.approx([r.arrival_s for r in fast], rel=1e-12)
    assert [r.prompt_tokens for r in slow] == [r.prompt_tokens for r in fast]


def test_lengths_do_not_move_the_arrivals():
    plain = generate_requests(workload(rate=1.0, requests=100, seed=6))
    other = generate_requests(
        workload(
            rate=1.0,
            requests=100,
            seed=6,
            output_tokens={"distribution": "uniform", "low": 1, "high": 9},
        )
    )
    assert [r.arrival_s for r in plain] == [r.arrival_s for r in other]


def test_the_size_guard_refuses_a_workload_past_the_limit():
    with pytest.raises(ScenarioError, match=r"s\.yaml: serving\.workload: about .* over the limit"):
        generate_requests(workload(rate=1e6, duration_s=1e6), source="s.yaml")
    with pytest.raises(ScenarioError, match="lower workload.requests"):
        generate_requests(workload(rate=1.0, requests=MAX_REQUESTS + 1))
    with pytest.raises(ScenarioError, match=r"duration_s: no request arrives within 1e-06 s"):
        generate_requests(workload(rate=1.0, duration_s=1e-6))
    with pytest.raises(ScenarioError, match=r"serving\.workload\.rate: 1e-300 requests/s puts"):
        generate_requests(workload(rate=1e-300, requests=3))


# ---------------------------------------------------------------------------
# Lengths


def lengths(spec: dict | int, count: int = N, seed: int = 0) -> np.ndarray:
    value = spec if isinstance(spec, int) else LengthSpec.model_validate(spec)
    return draw_lengths(value, count, np.random.default_rng(seed))


def test_fixed_lengths_are_exact():
    assert lengths(37, 5).tolist() == [37] * 5
    assert lengths({"distribution": "fixed", "value": 12}, 4).tolist() == [12] * 4


def test_uniform_lengths_cover_the_inclusive_range_evenly():
    drawn = lengths({"distribution": "uniform", "low": 3, "high": 7})
    assert set(drawn.tolist()) == {3, 4, 5, 6, 7}
    sd = math.sqrt((5**2 - 1) / 12)  # discrete uniform over 5 values
    assert abs(drawn.mean() - 5.0) < SE * sd / math.sqrt(N)


def test_lognormal_lengths_have_the_mean_and_cv_asked_for():
    mean, cv = 256.0, 0.5
    drawn = lengths({"distribution": "lognormal", "mean": mean, "cv": cv})
    assert abs(drawn.mean() - mean) < SE * cv * mean / math.sqrt(N) + 0.5  # + rounding
    logs = np.log(drawn)
    sigma = math.sqrt(math.log1p(cv**2))
    assert abs(logs.std() - sigma) < SE * sigma / math.sqrt(2 * N) + 0.01  # rounding's share
    assert abs(np.median(drawn) - mean / math.sqrt(1 + cv**2)) < 0.05 * mean  # exp(mu)


def test_lognormal_lengths_are_clamped():
    drawn = lengths({"distribution": "lognormal", "mean": 100, "cv": 3, "min": 10, "max": 400})
    assert drawn.min() == 10 and drawn.max() == 400


def test_empirical_lengths_follow_the_sample_frequencies():
    drawn = lengths({"distribution": "empirical", "samples": [12, 80, 80, 400]})
    assert set(drawn.tolist()) == {12, 80, 400}
    for value, p in ((12, 0.25), (80, 0.5), (400, 0.25)):
        assert abs((drawn == value).mean() - p) < SE * math.sqrt(p * (1 - p) / N)


@settings(max_examples=60, deadline=None)
@given(
    mean=st.floats(1, 1e6),
    cv=st.floats(0, 10),
    low=st.integers(1, 100),
    width=st.integers(0, 1000),
    seed=st.integers(0, 2**32),
)
def test_lognormal_lengths_stay_whole_and_inside_their_clamps(mean, cv, low, width, seed):
    spec = {"distribution": "lognormal", "mean": mean, "cv": cv, "min": low, "max": low + width}
    drawn = lengths(spec, 200, seed)
    assert drawn.dtype == np.int64
    assert drawn.min() >= low and drawn.max() <= low + width


# ---------------------------------------------------------------------------
# Traces


def write(tmp_path, text: str, name: str = "trace.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_trace_is_read_exactly(tmp_path):
    write(
        tmp_path,
        "arrival_s,prompt_tokens,output_tokens,user\n0,10,5,a\n0.5,20,1,b\n"
        "0.5,7,3,c\n\n2.25,1,1,d\n",
    )
    found = generate_requests(workload(arrival="trace", trace_file="trace.csv"), tmp_path)
    assert found == [
        Request(0, 0.0, 10, 5),
        Request(1, 0.5, 20, 1),
        Request(2, 0.5, 7, 3),
        Request(3, 2.25, 1, 1),
    ]


def test_a_trace_with_its_columns_in_another_order_and_a_cut(tmp_path):
    write(tmp_path, "output_tokens, arrival_s ,prompt_tokens\n5,0.1,10\n6,0.2,11\n7,3.0,12\n")
    spec = workload(arrival="trace", trace_file="trace.csv", duration_s=1.0)
    assert generate_requests(spec, tmp_path) == [Request(0, 0.1, 10, 5), Request(1, 0.2, 11, 6)]
    spec = workload(arrival="trace", trace_file="trace.csv", requests=1)
    assert generate_requests(spec, tmp_path) == [Request(0, 0.1, 10, 5)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", r"trace\.csv: empty; expected a header arrival_s, prompt_tokens, output_tokens"),
        ("arrival_s,prompt_tokens\n0,5\n", r"trace\.csv: row 1: missing column output_tokens"),
        ("arrival_s,prompt_tokens,output_tokens\n", r"trace\.csv: no requests"),
        (
            "arrival_s,prompt_tokens,output_tokens\n0,5,5\nsoon,5,5\n",
            r"trace\.csv: row 3, column arrival_s: 'soon' is not a number",
        ),
        (
            "arrival_s,prompt_tokens,output_tokens\n-1,5,5\n",
            r"trace\.csv: row 2, column arrival_s: -1; expected seconds from 0",
        ),
        (
            "arrival_s,prompt_tokens,output_tokens\n0,5,5\n2,5,5\n1,5,5\n",
            r"trace\.csv: row 4, column arrival_s: 1 is earlier than the row before \(2\); sort",
        ),
        (
            "arrival_s,prompt_tokens,output_tokens\n0,5,2.5\n",
            r"trace\.csv: row 2, column output_tokens: '2\.5'; expected a whole number",
        ),
        (
            "arrival_s,prompt_tokens,output_tokens\n0,0,5\n",
            r"trace\.csv: row 2, column prompt_tokens: '0'; expected a whole number",
        ),
        ("arrival_s,prompt_tokens,output_tokens\n0,5\n", r"trace\.csv: row 2: 2 cells"),
        ("arrival_s,prompt_tokens,output_tokens\nnan,5,5\n", r"row 2, column arrival_s: nan"),
    ],
)
def test_bad_traces_are_one_line_naming_file_row_and_column(tmp_path, text, expected):
    write(tmp_path, text)
    with pytest.raises(ScenarioError, match=expected) as caught:
        generate_requests(workload(arrival="trace", trace_file="trace.csv"), tmp_path)
    assert "\n" not in str(caught.value)


def test_a_missing_trace_file_is_named(tmp_path):
    with pytest.raises(ScenarioError, match=r"nope\.csv: no such trace file"):
        generate_requests(workload(arrival="trace", trace_file="nope.csv"), tmp_path)
