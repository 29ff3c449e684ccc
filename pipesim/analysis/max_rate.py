"""The highest arrival rate a deployment serves within its SLO.

Capacity planning asks the inverse of a simulation: not "what latency at 5 requests/s?"
but "how many requests/s before the p99 time to first token passes 1 s?". Latency grows
with load (slowly, then without bound once the queue never drains), so the rate that just
meets the SLO is found by bisection:

1. bracket: from a first guess, double the rate while the SLO holds, or halve it while it
   does not, until one rate meets it (``low``) and twice that rate does not (``high``);
2. bisect: try the middle of ``[low, high]`` and keep the half where the change happens,
   until ``high - low <= rel_tolerance * high`` (1% by default: seven more runs from a
   factor-of-two bracket).

Every run uses the same seed, and arrival gaps are drawn at rate 1 and scaled (see
``pipesim.serving.workload``): runs at different rates see the same requests, only closer
together or further apart. The search is therefore deterministic, and the comparison
between two rates is not blurred by two different random workloads (common random
numbers). The answer holds for the workload's request count: a queue that grows slowly
may still meet the SLO over a short run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pipesim.scenario.arrivals import generate_requests
from pipesim.scenario.build import parse_spec
from pipesim.scenario.serving import ServeRun, ServingScenario, run_serving
from pipesim.scenario.vary import vary

MIN_RATE = 1e-6  # requests/s: below this the search gives up
MAX_RATE = 1e9
REL_TOLERANCE = 0.01


class MaxRateError(ValueError):
    """A search that cannot start or finish (no SLO, no rate meets it); one line."""


@dataclass(frozen=True, slots=True)
class Probe:
    """One simulated rate: whether the SLO held, and the latencies it was judged by
    (the SLO's percentile of TTFT and of TPOT, in ms; None where the SLO sets no limit or
    no request finished)."""

    rate_rps: float
    meets_slo: bool
    ttft_ms: float | None = None
    tpot_ms: float | None = None


@dataclass(frozen=True, slots=True)
class MaxRate:
    """The answer: ``rate_rps`` (= ``low_rps``, the highest rate seen to meet the SLO),
    the bracket it lies in, the tolerance the bisection stopped at, and every probe in the
    order it ran."""

    rate_rps: float
    low_rps: float
    high_rps: float
    rel_tolerance: float
    probes: tuple[Probe, ...]

    def to_dict(self) -> dict:
        return {
            "max_rate_rps": self.rate_rps,
            "bracket_rps": [self.low_rps, self.high_rps],
            "rel_tolerance": self.rel_tolerance,
            "probes": [
                {
                    "rate_rps": p.rate_rps,
                    "meets_slo": p.meets_slo,
                    "ttft_ms": p.ttft_ms,
                    "tpot_ms": p.tpot_ms,
                }
                for p in self.probes
            ],
        }


def bisect_rate(
    probe: Callable[[float], Probe],
    start_rps: float,
    rel_tolerance: float = REL_TOLERANCE,
    progress: Callable[[int], None] | None = None,
) -> MaxRate:
    """The highest rate at which ``probe(rate).meets_slo``, by doubling or halving from
    ``start_rps`` and then bisection to ``rel_tolerance`` (see the module's docstring).
    ``progress(1)`` follows every probe."""
    if not 0 < rel_tolerance < 1:
        raise MaxRateError(f"rel_tolerance must be in (0, 1), got {rel_tolerance}")
    probes: list[Probe] = []

    def run(rate: float) -> bool:
        found = probe(rate)
        probes.append(found)
        if progress is not None:
            progress(1)
        return found.meets_slo

    low, high = _bracket(run, min(max(start_rps, MIN_RATE), MAX_RATE))
    while high - low > rel_tolerance * high:
        middle = (low + high) / 2
        if run(middle):
            low = middle
        else:
            high = middle
    return MaxRate(low, low, high, rel_tolerance, tuple(probes))


def _bracket(run: Callable[[float], bool], rate: float) -> tuple[float, float]:
    """``(low, high)``: the SLO holds at ``low`` and fails at ``high = 2 * low``."""
    if run(rate):
        while rate * 2 <= MAX_RATE:
            if not run(rate * 2):
                return rate, rate * 2
            rate *= 2
        raise MaxRateError(
            f"the SLO holds at every rate up to {rate:g} requests/s; is it set? "
            "(serving.slo.ttft_ms, serving.slo.tpot_ms)"
        )
    while rate / 2 >= MIN_RATE:
        rate /= 2
        if run(rate):
            return rate, rate * 2
    raise MaxRateError(
        f"no rate down to {rate:g} requests/s meets serving.slo: even an idle replica "
        "is too slow for it, or no request completes"
    )


# ---------------------------------------------------------------------------
# On a serving scenario


def slo_probe(scenario: ServingScenario, rate_rps: float) -> tuple[Probe, ServeRun]:
    """Serve the scenario's workload at ``rate_rps`` (same seed) and judge it: the SLO's
    percentile of TTFT and of TPOT over the completed requests within their limits."""
    # the scenario as it was given (the fields its file set), at this rate: vary's recipe
    given = scenario.spec.model_dump(exclude_unset=True)
    data = vary(given, {"serving.workload.rate": rate_rps}, source=scenario.source)
    workload = parse_spec(data, scenario.source).serving.workload
    requests = generate_requests(workload, Path(scenario.source).parent, scenario.source)
    run = run_serving(replace(scenario, requests=tuple(requests)))
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
    return Probe(rate_rps, meets, shown.get("ttft_ms"), shown.get("tpot_ms")), run


def find_max_rate(
    scenario: ServingScenario,
    rel_tolerance: float = REL_TOLERANCE,
    progress: Callable[[int], None] | None = None,
) -> tuple[MaxRate, ServeRun]:
    """The highest rate of the scenario's arrival process (Poisson or gamma, its seed and
    request count) that meets ``serving.slo``, and the run at that rate."""
    workload, slo = scenario.spec.serving.workload, scenario.slo
    where = f"{scenario.source}: serving"
    if workload.arrival == "trace":
        raise MaxRateError(
            f"{where}.workload.arrival: --max-rate needs poisson or gamma arrivals (a trace "
            "fixes its own times)"
        )
    if slo.ttft_ms is None and slo.tpot_ms is None:
        raise MaxRateError(f"{where}.slo: --max-rate needs slo.ttft_ms or slo.tpot_ms")
    # The answer is always the latest rate that met the SLO (the bracket's and every
    # bisection step's ``low``), so only that run is kept, not one per probe.
    kept: list[ServeRun] = []

    def probe(rate: float) -> Probe:
        found, run = slo_probe(scenario, rate)
        if found.meets_slo:
            kept[:] = [run]
        return found

    answer = bisect_rate(probe, float(workload.rate), rel_tolerance, progress)
    return answer, kept[0]
