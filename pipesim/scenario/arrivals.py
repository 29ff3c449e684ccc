"""The workload: when requests arrive and how long their prompts and answers are.

Arrivals come from a process or from a file:

* ``poisson``: independent arrivals at ``rate`` requests/s, so the gaps between them are
  exponential with mean ``1 / rate`` (the textbook open-loop load of a web service);
* ``gamma``: gaps drawn from a gamma distribution with the same mean ``1 / rate`` and a
  coefficient of variation ``cv`` (shape ``k = 1 / cv**2``, scale ``1 / (k * rate)``).
  ``cv = 1`` is Poisson again; ``cv > 1`` packs arrivals into bursts with long quiet
  spells between them, as real chat traffic does;
* ``trace``: a CSV file with the columns ``arrival_s, prompt_tokens, output_tokens``
  (others are ignored), one request per row in arrival order.

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
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np

from pipesim.scenario.load import read_text_file
from pipesim.scenario.schema import ScenarioError
from pipesim.scenario.serving_schema import Length, LengthSpec, WorkloadSpec
from pipesim.serving.request import Request

MAX_REQUESTS = 10_000_000  # the size guard: a workload of more requests is refused
MAX_TRACE_BYTES = 512 << 20
MAX_ARRIVAL_S = 1e12  # as a trace's arrival_s: beyond it, times lose their precision
TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
_BLOCK = 4096  # arrival gaps drawn at a time when only a duration bounds the workload


def generate_requests(
    spec: WorkloadSpec, source_dir: str | Path = ".", source: str = "scenario"
) -> list[Request]:
    """The requests of a workload, in arrival order (``id`` = position).

    ``source_dir`` is where a relative ``trace_file`` is looked up (the scenario's folder);
    ``source`` names the scenario in error lines. Raises ScenarioError on a workload that
    cannot be built (a bad trace file, too many requests).
    """
    if spec.arrival == "trace":
        return read_trace(Path(source_dir) / str(spec.trace_file), spec.requests, spec.duration_s)
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(spec.seed).spawn(3)]
    arrivals = arrival_times(spec, streams[0], source)
    count = len(arrivals)
    if count == 0:
        raise ScenarioError(
            f"{source}: serving.workload.duration_s: no request arrives within "
            f"{spec.duration_s:g} s at {spec.rate:g} requests/s; allowed: a longer duration"
        )
    prompts = draw_lengths(spec.prompt_tokens, count, streams[1])
    outputs = draw_lengths(spec.output_tokens, count, streams[2])
    return [
        Request(i, float(t), int(p), int(o))
        for i, (t, p, o) in enumerate(zip(arrivals, prompts, outputs, strict=True))
    ]


# ---------------------------------------------------------------------------
# Arrivals


def arrival_times(spec: WorkloadSpec, rng: np.random.Generator, source: str) -> np.ndarray:
    """Arrival times in seconds (the first gap is drawn too: nobody arrives at exactly 0)."""
    rate = float(spec.rate)  # type: ignore[arg-type] - the schema makes it given
    expected = spec.requests if spec.requests is not None else math.inf
    if spec.duration_s is not None:
        # Poisson: about rate * duration, give or take a few standard deviations
        expected = min(expected, rate * spec.duration_s)
    if expected > MAX_REQUESTS:
        raise ScenarioError(
            f"{source}: serving.workload: about {expected:,.0f} requests, over the limit of "
            f"{MAX_REQUESTS:,}; lower workload.requests, duration_s or rate"
        )
    if spec.requests is not None:
        times = np.cumsum(_gaps(spec, rng, spec.requests)) / rate
        if spec.duration_s is not None:
            times = times[times <= spec.duration_s]
    else:
        times = _until(spec, rng, float(spec.duration_s))  # type: ignore[arg-type]
    if len(times) and not times[-1] <= MAX_ARRIVAL_S:
        raise ScenarioError(
            f"{source}: serving.workload.rate: {rate:g} requests/s puts arrivals past "
            f"{MAX_ARRIVAL_S:g} s; allowed: a rate that ends the workload sooner"
        )
    return times


def _until(spec: WorkloadSpec, rng: np.random.Generator, duration_s: float) -> np.ndarray:
    """Arrivals up to ``duration_s``, drawn in fixed blocks (the same seed, the same draws)."""
    rate = float(spec.rate)  # type: ignore[arg-type]
    blocks: list[np.ndarray] = []
    last = 0.0
    while last <= duration_s:
        block = last + np.cumsum(_gaps(spec, rng, _BLOCK)) / rate
        blocks.append(block)
        last = float(block[-1])
        if sum(len(b) for b in blocks) > MAX_REQUESTS + _BLOCK:  # unreachable after the guard
            break
    times = np.concatenate(blocks)
    return times[times <= duration_s]


def _gaps(spec: WorkloadSpec, rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` gaps between arrivals at rate 1: exponential, or gamma with the spec's cv."""
    if spec.arrival == "poisson":
        return rng.standard_exponential(count)
    shape = 1.0 / spec.cv**2
    return rng.standard_gamma(shape, count) / shape


# ---------------------------------------------------------------------------
# Lengths


def draw_lengths(length: Length, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` token counts (int64, each >= 1) from a length spec or a fixed number."""
    if not isinstance(length, LengthSpec):
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


# ---------------------------------------------------------------------------
# Traces


def read_trace(
    path: Path, requests: int | None = None, duration_s: float | None = None
) -> list[Request]:
    """The requests of a trace CSV, the first ``requests`` of them arriving by
    ``duration_s``. Every problem is one ScenarioError naming the file, the row (the file's
    line number) and the column."""
    text = read_text_file(path, MAX_TRACE_BYTES, what="trace file")
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader, None)
        if header is None or not any(cell.strip() for cell in header):
            raise ScenarioError(f"{path}: empty; expected a header {', '.join(TRACE_COLUMNS)}")
        names = [cell.strip() for cell in header]
        missing = [c for c in TRACE_COLUMNS if c not in names]
        if missing:
            raise ScenarioError(
                f"{path}: row 1: missing column {', '.join(missing)}; the header needs "
                f"{', '.join(TRACE_COLUMNS)} (found {', '.join(names)[:80]})"
            )
        where = [names.index(c) for c in TRACE_COLUMNS]
        found = _trace_rows(path, reader, where, requests, duration_s)
    except csv.Error as exc:
        raise ScenarioError(f"{path}: row {reader.line_num}: not valid CSV: {exc}") from None
    if not found:
        raise ScenarioError(f"{path}: no requests (only a header, or none by duration_s)")
    return found


def _trace_rows(path, reader, where, requests, duration_s) -> list[Request]:
    found: list[Request] = []
    previous = 0.0
    for cells in reader:
        row = reader.line_num
        if not any(cell.strip() for cell in cells):
            continue  # a blank line (a trailing newline) holds no request
        if len(cells) <= max(where):
            raise ScenarioError(
                f"{path}: row {row}: {len(cells)} cells; expected a value in every column "
                f"({', '.join(TRACE_COLUMNS)})"
            )
        arrival = _number(path, row, "arrival_s", cells[where[0]])
        if arrival < previous:
            raise ScenarioError(
                f"{path}: row {row}, column arrival_s: {arrival:g} is earlier than the row "
                f"before ({previous:g}); sort the trace by arrival time"
            )
        if duration_s is not None and arrival > duration_s:
            break
        prompt = _tokens(path, row, "prompt_tokens", cells[where[1]])
        output = _tokens(path, row, "output_tokens", cells[where[2]])
        found.append(Request(len(found), arrival, prompt, output))
        if len(found) > MAX_REQUESTS:
            raise ScenarioError(f"{path}: more than {MAX_REQUESTS:,} requests")
        previous = arrival
        if requests is not None and len(found) == requests:
            break
    return found


def _number(path: Path, row: int, column: str, cell: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise ScenarioError(
            f"{path}: row {row}, column {column}: {cell.strip()[:40]!r} is not a number"
        ) from None
    if not math.isfinite(value) or value < 0 or value > MAX_ARRIVAL_S:
        raise ScenarioError(
            f"{path}: row {row}, column {column}: {cell.strip()[:40]}; expected seconds "
            f"from 0 to {MAX_ARRIVAL_S:g}"
        )
    return value


def _tokens(path: Path, row: int, column: str, cell: str) -> int:
    text = cell.strip()
    if not text.isdigit() or int(text) < 1 or int(text) > 2**53:
        raise ScenarioError(
            f"{path}: row {row}, column {column}: {text[:40]!r}; expected a whole number "
            "of tokens, at least 1"
        )
    return int(text)
