"""The workload: when requests arrive and how long their prompts and answers are.

Arrivals come from a process (a trace file of recorded arrivals is read at the edge, by
``pipesim.scenario.arrivals``):

* ``poisson``: independent arrivals at ``rate`` requests/s, so the gaps between them are
  exponential with mean ``1 / rate`` (the textbook open-loop load of a web service);
* ``gamma``: gaps drawn from a gamma distribution with the same mean ``1 / rate`` and a
  coefficient of variation ``cv`` (shape ``k = 1 / cv**2``, scale ``1 / (k * rate)``).
  ``cv = 1`` is Poisson again; ``cv > 1`` packs arrivals into bursts with long quiet
  spells between them, as real chat traffic does.

Lengths are a fixed count or drawn per request: ``uniform`` (integers ``low..high``),
``lognormal`` with a ``mean`` and a ``cv`` (``sigma**2 = ln(1 + cv**2)``,
``mu = ln(mean) - sigma**2 / 2``, rounded, clamped to ``min..max``), or ``empirical``
(drawn from ``samples`` with replacement). Every length is at least one token.

A workload ends after ``requests`` requests or at ``duration_s`` seconds, whichever comes
first. Arrivals, prompt lengths and output lengths each draw from their own stream of one
``numpy`` seed, so the same seed gives the same requests, and changing the length
distribution leaves the arrival times as they were. Arrival gaps are drawn at rate 1 and
divided by ``rate``: the same seed at twice the rate gives the same requests, twice as
close together (what ``--max-rate``'s bisection relies on).

The functions take any object with the fields of :class:`Workload` and :class:`Lengths`
(the scenario's ``serving.workload`` section is one) and raise :class:`WorkloadError`
naming the field, ``workload.rate: ...``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from pipesim.serving.request import Request

MAX_REQUESTS = 10_000_000  # the size guard: a workload of more requests is refused
MAX_ARRIVAL_S = 1e12  # beyond it, arrival times lose their precision
_BLOCK = 4096  # arrival gaps drawn at a time when only a duration bounds the workload


class WorkloadError(ValueError):
    """A workload that cannot be drawn (too many requests, none at all); one line that
    starts with the field, ``workload.rate: ...``."""


class Lengths(Protocol):
    """A distribution of token counts: ``fixed`` (``value``), ``uniform`` (``low``,
    ``high``), ``lognormal`` (``mean``, ``cv``) or ``empirical`` (``samples``), clamped to
    ``min..max`` where given."""

    distribution: str
    value: int | None
    low: int | None
    high: int | None
    mean: float | None
    cv: float | None
    min: int | None
    max: int | None
    samples: Sequence[int] | None


class Workload(Protocol):
    """An arrival process (``poisson`` or ``gamma`` at ``rate`` requests/s, gamma with
    inter-arrival ``cv``), how many (``requests``, ``duration_s``: whichever ends first),
    the lengths (a count or a :class:`Lengths`) and the seed."""

    arrival: str
    rate: float | None
    cv: float
    requests: int | None
    duration_s: float | None
    prompt_tokens: int | Lengths
    output_tokens: int | Lengths
    seed: int


def synthetic_requests(workload: Workload) -> list[Request]:
    """The requests of a Poisson or gamma workload, in arrival order (``id`` = position)."""
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(workload.seed).spawn(3)]
    arrivals = arrival_times(workload, streams[0])
    count = len(arrivals)
    if count == 0:
        raise WorkloadError(
            f"workload.duration_s: no request arrives within {workload.duration_s:g} s at "
            f"{workload.rate:g} requests/s; allowed: a longer duration"
        )
    prompts = draw_lengths(workload.prompt_tokens, count, streams[1])
    outputs = draw_lengths(workload.output_tokens, count, streams[2])
    return [
        Request(i, float(t), int(p), int(o))
        for i, (t, p, o) in enumerate(zip(arrivals, prompts, outputs, strict=True))
    ]


# ---------------------------------------------------------------------------
# Arrivals


def arrival_times(workload: Workload, rng: np.random.Generator) -> np.ndarray:
    """Arrival times in seconds (the first gap is drawn too: nobody arrives at exactly 0)."""
    rate = float(workload.rate)  # type: ignore[arg-type] - a process has a rate
    expected = workload.requests if workload.requests is not None else math.inf
    if workload.duration_s is not None:
        # Poisson: about rate * duration, give or take a few standard deviations
        expected = min(expected, rate * workload.duration_s)
    if expected > MAX_REQUESTS:
        raise WorkloadError(
            f"workload: about {expected:,.0f} requests, over the limit of "
            f"{MAX_REQUESTS:,}; lower workload.requests, duration_s or rate"
        )
    if workload.requests is not None:
        times = np.cumsum(_gaps(workload, rng, workload.requests)) / rate
        if workload.duration_s is not None:
            times = times[times <= workload.duration_s]
    else:
        times = _until(workload, rng, float(workload.duration_s))  # type: ignore[arg-type]
    if len(times) and not times[-1] <= MAX_ARRIVAL_S:
        raise WorkloadError(
            f"workload.rate: {rate:g} requests/s puts arrivals past "
            f"{MAX_ARRIVAL_S:g} s; allowed: a rate that ends the workload sooner"
        )
    return times


def _until(workload: Workload, rng: np.random.Generator, duration_s: float) -> np.ndarray:
    """Arrivals up to ``duration_s``, drawn in fixed blocks (the same seed, the same draws)."""
    rate = float(workload.rate)  # type: ignore[arg-type]
    blocks: list[np.ndarray] = []
    last = 0.0
    while last <= duration_s:
        block = last + np.cumsum(_gaps(workload, rng, _BLOCK)) / rate
        blocks.append(block)
        last = float(block[-1])
        if sum(len(b) for b in blocks) > MAX_REQUESTS + _BLOCK:  # unreachable after the guard
            break
    times = np.concatenate(blocks)
    return times[times <= duration_s]


def _gaps(workload: Workload, rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` gaps between arrivals at rate 1: exponential, or gamma with the spec's cv."""
    if workload.arrival == "poisson":
        return rng.standard_exponential(count)
    shape = 1.0 / workload.cv**2
    return rng.standard_gamma(shape, count) / shape


# ---------------------------------------------------------------------------
# Lengths


def draw_lengths(length: int | Lengths, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` token counts (int64, each >= 1) from a length spec or a fixed number."""
    if isinstance(length, int):
        return np.full(count, int(length), dtype=np.int64)
    match length.distribution:
        case "fixed":
            values = np.full(count, length.value, dtype=np.int64)
        case "uniform":
            values = rng.integers(length.low, length.high, size=count, endpoint=True)
        case "lognormal":
            sigma2 = math.log1p(float(length.cv) ** 2)
            mu = math.log(float(length.mean)) - sigma2 / 2
            drawn = rng.lognormal(mu, math.sqrt(sigma2), size=count)
            values = np.rint(np.minimum(drawn, 2.0**53)).astype(np.int64)
        case "empirical":
            values = rng.choice(np.asarray(length.samples, dtype=np.int64), size=count)
    low = max(1, length.min or 1)
    high = length.max if length.max is not None else None
    return np.clip(values, low, high).astype(np.int64)
