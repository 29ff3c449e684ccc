"""One run of a serving scenario at a given arrival rate and seed, judged against its SLO.

The max-rate search (``pipesim.analysis.max_rate``) asks this question at every rate it
tries: serve the scenario's workload at ``rate_rps`` requests/s under one seed, and compare
the SLO's percentile of time to first token and of time per output token with its limits.
The workload is the scenario as its file gave it with the rate, the seed and (for the
request bound) ``requests`` changed, exactly what ``--set serving.workload.rate=R
--set serving.workload.seed=S`` gives on the command line, so any run can be served again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pipesim.scenario.arrivals import generate_requests
from pipesim.scenario.build import parse_spec
from pipesim.scenario.serving import ServeRun, ServingScenario, run_serving
from pipesim.scenario.vary import vary

RATE_KEY = "serving.workload.rate"
SEED_KEY = "serving.workload.seed"
REQUESTS_KEY = "serving.workload.requests"


@dataclass(frozen=True, slots=True)
class SeedRun:
    """One run at one rate under one seed: whether the SLO held, the SLO's percentile of
    TTFT and of TPOT (ms; None where the SLO sets no limit or no request finished), the
    requests it served and whether they were cut to the bound ``max_requests``."""

    seed: int
    meets_slo: bool
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    requests: int = 0
    cut: bool = False

    def to_dict(self) -> dict:
        return {
            "seed": self.seed,
            "meets_slo": self.meets_slo,
            "ttft_ms": self.ttft_ms,
            "tpot_ms": self.tpot_ms,
            "requests": self.requests,
            "cut": self.cut,
        }


def slo_probe(
    scenario: ServingScenario,
    rate_rps: float,
    seed: int | None = None,
    max_requests: int | None = None,
) -> tuple[SeedRun, ServeRun]:
    """Serve the scenario's workload at ``rate_rps`` (under ``seed``, default the
    scenario's; cut to its first ``max_requests``) and judge it: the SLO's percentile of
    TTFT and of TPOT over the completed requests within their limits."""
    workload = scenario.spec.serving.workload
    changes: dict[str, float | int] = {RATE_KEY: rate_rps}
    if seed is not None:
        changes[SEED_KEY] = seed
    cap = max_requests if max_requests is not None else math.inf
    cut_to = cap if (workload.requests or math.inf) > cap else None
    if cut_to is not None:
        changes[REQUESTS_KEY] = cut_to
    # the scenario as it was given (the fields its file set), changed: vary's recipe
    given = scenario.spec.model_dump(exclude_unset=True)
    data = vary(given, changes, source=scenario.source)
    spec = parse_spec(data, scenario.source).serving.workload
    requests = generate_requests(spec, Path(scenario.source).parent, scenario.source)
    run = run_serving(replace(scenario, requests=tuple(requests)))
    meets, ttft_ms, tpot_ms = _judge(scenario, run)
    cut = cut_to is not None and len(requests) == cut_to
    return SeedRun(spec.seed, meets, ttft_ms, tpot_ms, len(requests), cut), run


def _judge(scenario: ServingScenario, run: ServeRun) -> tuple[bool, float | None, float | None]:
    """Whether the run meets the SLO, and its percentile of TTFT and TPOT (ms)."""
    slo, records = scenario.slo, run.result.requests
    served = ~records.rejected
    judged = {}
    for name, limit, values in (
        ("ttft_ms", slo.ttft_ms, records.ttft_s[served]),
        ("tpot_ms", slo.tpot_ms, records.tpot_s[served]),
    ):
        values = values[~np.isnan(values)] * 1e3
        if limit is not None and len(values):
            judged[name] = (float(np.percentile(values, slo.percentile)), limit)
    meets = bool(served.any()) and all(value <= limit for value, limit in judged.values())
    shown = {name: value for name, (value, _) in judged.items()}
    return meets, shown.get("ttft_ms"), shown.get("tpot_ms")
