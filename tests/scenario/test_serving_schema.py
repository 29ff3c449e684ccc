"""The serving and decode keys at the file boundary: what each distribution needs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pipesim.scenario.serving_schema import LengthSpec, WorkloadSpec


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"distribution": "fixed"}, "the fixed distribution needs value"),
        ({"distribution": "uniform", "low": 2}, "the uniform distribution needs low, high"),
        ({"distribution": "uniform", "low": 3, "high": 2}, "low (3) must not exceed high (2)"),
        ({"distribution": "lognormal", "mean": 5.0}, "the lognormal distribution needs mean, cv"),
        ({"distribution": "empirical", "samples": []}, "the empirical distribution needs samples"),
        (
            {"distribution": "lognormal", "mean": 5.0, "cv": 1.0, "min": 9, "max": 3},
            "min (9) must not exceed max (3)",
        ),
    ],
)
def test_a_distribution_missing_what_it_needs_says_so(given, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        LengthSpec(**given)


def test_a_constant_lognormal_and_a_single_sample_are_allowed():
    assert LengthSpec(distribution="lognormal", mean=5.0, cv=0.0).cv == 0.0
    assert LengthSpec(distribution="empirical", samples=[7]).samples == [7]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"arrival": "trace"}, "arrival: trace needs trace_file"),
        ({"arrival": "gamma", "requests": 5}, "arrival: gamma needs a rate"),
        ({"rate": 2.0}, "give requests or duration_s"),
    ],
)
def test_a_workload_says_what_it_lacks(given, message):
    with pytest.raises(ValidationError, match=message):
        WorkloadSpec(**given)
