"""The highest arrival rate a deployment serves within its SLO.

Capacity planning asks the inverse of a simulation: not "what latency at 5 requests/s?"
but "how many requests/s before the p99 time to first token passes 1 s?". Latency grows
with load (slowly, then without bound once the queue never drains), so the rate that just
meets the SLO is found by bisection:

1. bracket: from a first guess, double the rate while the SLO holds, or halve it while it
   does not, until one rate meets it (``low``) and twice that rate does not (``high``);
2. bisect: try the middle of ``[low, high]``, rounded to ``digits`` significant digits
   (4 at the default tolerance), and keep the half where the change happens, until
   ``high - low <= rel_tolerance * high`` (1% by default: seven more rates from a
   factor-of-two bracket). Every rate tried is a short decimal, so the answer prints as
   exactly the rate that ran (``13.59``, never a ``13.59375`` shown rounded), and serving
   at that printed rate gives the same run again.

A rate meets the SLO only if it does under each of ``seeds`` workloads (the scenario's seed
and the next ones; the first that misses settles the rate). Near the limit, latency is not
monotone in the rate for one seed: a burst of arrivals that tips the queue over at one
rate may drain at a slightly higher one. A bisection over one seed can then land on a rate
that another draw of the same workload misses; the answer here held under every seed
tried. For one seed, arrival gaps are drawn at rate 1 and scaled (see
``pipesim.serving.workload``): runs at different rates see the same requests, only closer
together or further apart (common random numbers), so the search is deterministic unless
its time bound stops it.

Bounds keep the search finite: at most ``max_probes`` rates, no new rate once
``max_search_s`` seconds have passed, and at most ``max_requests`` requests per run (a
workload bounded by ``duration_s`` grows with the rate: each run is cut to its first
``max_requests``). ``MaxRate.stopped`` says what ended the search. The answer holds for
the workload's request count (after the cut): a queue that grows slowly may still meet the
SLO over a short run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from pipesim.analysis.slo_probe import RATE_KEY, REQUESTS_KEY, SeedRun, slo_probe
from pipesim.scenario.serving import ServeRun, ServingScenario

MIN_RATE = 1e-6  # requests/s: below this the search gives up
MAX_RATE = 1e9
REL_TOLERANCE = 0.01
SEEDS = 3
MAX_PROBES = 40
MAX_SEARCH_S = 300.0
MAX_REQUESTS = 10_000


class MaxRateError(ValueError):
    """A search that cannot start or finish (no SLO, no rate meets it); one line."""


@dataclass(frozen=True, slots=True)
class Bounds:
    """What one search may spend: ``max_probes`` rates, ``max_search_s`` seconds of wall
    time (checked before each new rate) and ``max_requests`` requests per run (None: the
    workload's own count)."""

    max_probes: int = MAX_PROBES
    max_search_s: float = MAX_SEARCH_S
    max_requests: int | None = MAX_REQUESTS

    def to_dict(self) -> dict:
        return {
            "max_probes": self.max_probes,
            "max_search_s": self.max_search_s,
            "max_requests": self.max_requests,
        }


@dataclass(frozen=True, slots=True)
class Probe:
    """One rate tried: whether the SLO held under every seed, the worst latencies it was
    judged by (the SLO's percentile, ms, the largest over the seeds run) and each seed's
    run (the first that missed ends the list)."""

    rate_rps: float
    meets_slo: bool
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    runs: tuple[SeedRun, ...] = ()

    @property
    def cut(self) -> bool:
        return any(run.cut for run in self.runs)

    def to_dict(self) -> dict:
        return {
            "rate_rps": self.rate_rps,
            "meets_slo": self.meets_slo,
            "ttft_ms": self.ttft_ms,
            "tpot_ms": self.tpot_ms,
            "runs": [run.to_dict() for run in self.runs],
        }


@dataclass(frozen=True, slots=True)
class MaxRate:
    """The answer: ``rate_rps`` (= ``low_rps``, the highest rate seen to meet the SLO), the
    bracket it lies in (``high_rps`` None where a bound stopped the doubling before any
    rate missed), the tolerance and grid of the bisection, what stopped it (``tolerance``,
    ``grid``: no rate of ``digits`` digits lies between, ``max_probes``,
    ``max_search_s``), the bounds, the seeds and every probe in the order it ran."""

    rate_rps: float
    low_rps: float
    high_rps: float | None
    rel_tolerance: float
    probes: tuple[Probe, ...]
    digits: int = 4
    stopped: str = "tolerance"
    bounds: Bounds = field(default_factory=Bounds)
    seeds: tuple[int, ...] = ()

    @property
    def answer(self) -> Probe:
        """The probe at ``rate_rps`` (the last one that met the SLO)."""
        return next(p for p in reversed(self.probes) if p.meets_slo)

    @property
    def runs(self) -> int:
        return sum(max(len(p.runs), 1) for p in self.probes)

    @property
    def overrides(self) -> tuple[str, ...]:
        """The ``--set`` values that serve the answer's run again (the first seed's)."""
        found = [f"{RATE_KEY}={rate_text(self.rate_rps)}"]
        if self.answer.cut:
            found.append(f"{REQUESTS_KEY}={self.bounds.max_requests}")
        return tuple(found)

    def to_dict(self) -> dict:
        return {
            "max_rate_rps": self.rate_rps,
            "bracket_rps": [self.low_rps, self.high_rps],
            "rel_tolerance": self.rel_tolerance,
            "digits": self.digits,
            "seeds": list(self.seeds),
            "stopped": self.stopped,
            "bounds": self.bounds.to_dict(),
            "runs": self.runs,
            "overrides": list(self.overrides),
            "at_max_rate": self.answer.to_dict(),
            "probes": [p.to_dict() for p in self.probes],
        }


def rate_text(rate_rps: float) -> str:
    """The shortest text that reads back as exactly ``rate_rps``, in a form YAML reads as a
    number (``40``, ``13.59``, ``1.5e-05``; YAML takes ``1e-05`` for a string)."""
    text = repr(float(rate_rps))
    mantissa, e, exponent = text.partition("e")
    if e and "." not in mantissa:
        mantissa += ".0"
    elif not e:
        mantissa = mantissa.removesuffix(".0")
    return mantissa + e + exponent


def grid_digits(rel_tolerance: float) -> int:
    """Significant digits of the bisection's rates: two more than the tolerance needs, so
    the grid is at least ten times finer than the tolerance."""
    return max(3, math.ceil(-math.log10(rel_tolerance)) + 2)


def on_grid(rate_rps: float, digits: int) -> float:
    return float(f"{rate_rps:.{digits}g}")


class _Search:
    """The probes run so far, and the bounds the next one must fit in."""

    def __init__(self, probe: Callable[[float], Probe], bounds: Bounds, clock) -> None:
        self.probe, self.bounds, self.clock = probe, bounds, clock
        self.probes: list[Probe] = []
        self.stopped: str | None = None
        self.started = clock()

    def run(self, rate: float) -> bool | None:
        """Whether ``rate`` meets the SLO; None (and ``stopped`` set) where a bound leaves
        no room for it. The first rate always runs."""
        if self.probes:
            if len(self.probes) >= self.bounds.max_probes:
                self.stopped = "max_probes"
            elif self.clock() - self.started >= self.bounds.max_search_s:
                self.stopped = "max_search_s"
            if self.stopped is not None:
                return None
        found = self.probe(rate)
        self.probes.append(found)
        return found.meets_slo


def bisect_rate(
    probe: Callable[[float], Probe],
    start_rps: float,
    rel_tolerance: float = REL_TOLERANCE,
    bounds: Bounds = Bounds(),
    clock: Callable[[], float] = time.monotonic,
) -> MaxRate:
    """The highest rate at which ``probe(rate).meets_slo``, by doubling or halving from
    ``start_rps`` and then bisection on a grid of short decimals to ``rel_tolerance``,
    within ``bounds`` (see the module's docstring); ``clock`` gives seconds."""
    if not 0 < rel_tolerance < 1:
        raise MaxRateError(f"rel_tolerance must be in (0, 1), got {rel_tolerance}")
    digits = grid_digits(rel_tolerance)
    search = _Search(probe, bounds, clock)
    low, high = _bracket(search, min(max(start_rps, MIN_RATE), MAX_RATE))
    while high is not None and search.stopped is None:
        middle = on_grid((low + high) / 2, digits)
        if high - low <= rel_tolerance * high:
            search.stopped = "tolerance"
        elif not low < middle < high:
            search.stopped = "grid"
        else:
            met = search.run(middle)
            if met is not None:
                low, high = (middle, high) if met else (low, middle)
    stopped = search.stopped or "tolerance"
    return MaxRate(low, low, high, rel_tolerance, tuple(search.probes), digits, stopped, bounds)


def _bracket(search: _Search, rate: float) -> tuple[float, float | None]:
    """``(low, high)``: the SLO holds at ``low`` and fails at ``high = 2 * low``; ``high`` is
    None where a bound stopped the doubling first."""
    if search.run(rate):
        while rate * 2 <= MAX_RATE:
            met = search.run(rate * 2)
            if met is None:
                return rate, None
            if not met:
                return rate, rate * 2
            rate *= 2
        raise MaxRateError(
            f"serving.slo holds at every rate up to {rate:g} requests/s: this workload "
            "never reaches its limits (a TPOT limit alone may hold however many arrive); "
            "set or lower serving.slo.ttft_ms"
        )
    while rate / 2 >= MIN_RATE:
        rate /= 2
        met = search.run(rate)
        if met is None:
            raise MaxRateError(
                f"no rate down to {rate * 2:g} requests/s met serving.slo before the search "
                f"stopped at its bound ({_BOUND_OPTIONS[search.stopped]})"
            )
        if met:
            return rate, rate * 2
    raise MaxRateError(
        f"no rate down to {rate:g} requests/s meets serving.slo: even an idle replica "
        "is too slow for it, or no request completes"
    )


_BOUND_OPTIONS = {"max_probes": "--max-probes", "max_search_s": "--max-search-s"}


# ---------------------------------------------------------------------------
# On a serving scenario


def find_max_rate(
    scenario: ServingScenario,
    rel_tolerance: float = REL_TOLERANCE,
    progress: Callable[[int], None] | None = None,
    *,
    seeds: int = SEEDS,
    bounds: Bounds = Bounds(),
    clock: Callable[[], float] = time.monotonic,
) -> tuple[MaxRate, ServeRun]:
    """The highest rate of the scenario's arrival process (Poisson or gamma, its request
    count) that meets ``serving.slo`` under each of ``seeds`` seeds (the scenario's and
    the next ones), within ``bounds``, and the run at that rate under the scenario's seed;
    ``progress(1)`` follows every run."""
    workload, slo = scenario.spec.serving.workload, scenario.slo
    where = f"{scenario.source}: serving"
    if workload.arrival == "trace":
        raise MaxRateError(
            f"{where}.workload.arrival: --max-rate needs poisson or gamma arrivals (a trace "
            "fixes its own times)"
        )
    if slo.ttft_ms is None and slo.tpot_ms is None:
        raise MaxRateError(f"{where}.slo: --max-rate needs slo.ttft_ms or slo.tpot_ms")
    if seeds < 1:
        raise MaxRateError(f"seeds must be at least 1, got {seeds}")
    tried = tuple(range(workload.seed, workload.seed + seeds))
    # The answer is always the latest rate that met the SLO (the bracket's and every
    # bisection step's ``low``), so only its first seed's run is kept, not one per probe.
    kept: list[ServeRun] = []

    def probe(rate: float) -> Probe:
        runs, first = [], None
        for seed in tried:
            judged, run = slo_probe(scenario, rate, seed, bounds.max_requests)
            runs.append(judged)
            if first is None:
                first = run
            if progress is not None:
                progress(1)
            if not judged.meets_slo:
                break
        meets = len(runs) == len(tried) and runs[-1].meets_slo
        if meets:
            kept[:] = [first]
        return Probe(rate, meets, _worst(runs, "ttft_ms"), _worst(runs, "tpot_ms"), tuple(runs))

    answer = bisect_rate(probe, float(workload.rate), rel_tolerance, bounds, clock)
    return replace(answer, seeds=tried), kept[0]


def _worst(runs: list[SeedRun], name: str) -> float | None:
    values = [getattr(run, name) for run in runs if getattr(run, name) is not None]
    return max(values) if values else None
