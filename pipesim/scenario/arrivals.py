"""A scenario's ``serving.workload`` as requests: drawn from its arrival process, or read
from a trace file.

Poisson and gamma arrivals and the length distributions are drawn by
``pipesim.serving.workload`` (see there). A ``trace`` is a CSV file with the columns
``arrival_s, prompt_tokens, output_tokens`` (others are ignored), one request per row in
arrival order; it ends after ``requests`` requests or at ``duration_s`` seconds, whichever
comes first. Every problem is one ScenarioError naming the file and the key (for a trace:
the row, as the file's line number, and the column).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from pipesim.scenario.load import read_text_file
from pipesim.scenario.schema import ScenarioError
from pipesim.scenario.serving_schema import WorkloadSpec
from pipesim.serving.request import Request
from pipesim.serving.workload import (
    MAX_ARRIVAL_S,
    MAX_REQUESTS,
    WorkloadError,
    synthetic_requests,
)

MAX_TRACE_BYTES = 512 << 20
TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
MAX_TOKENS = 2**53
MAX_TOKEN_DIGITS = 20  # 2**53 has 16 digits; a few leading zeros are still read


def generate_requests(
    spec: WorkloadSpec, source_dir: str | Path = ".", source: str = "scenario"
) -> list[Request]:
    """The requests of a workload, in arrival order (``id`` = position).

    ``source_dir`` is where a relative ``trace_file`` is looked up (the scenario's folder);
    ``source`` names the scenario in error lines. Raises ScenarioError on a workload that
    cannot be built (a bad trace file, too many requests).
    """
    if spec.arrival == "trace":
        return read_arrival_trace(
            Path(source_dir) / str(spec.trace_file), spec.requests, spec.duration_s
        )
    try:
        return synthetic_requests(spec)
    except WorkloadError as exc:
        raise ScenarioError(f"{source}: serving.{exc}") from None


# ---------------------------------------------------------------------------
# Traces


def read_arrival_trace(
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
    # float() also reads '٣' (3.0), '１２' (12.0) and '1_0' (10.0): a CSV number is ASCII
    # and has no digit separators, as every other CSV reader sees it.
    try:
        if not cell.isascii() or "_" in cell:
            raise ValueError(cell)
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
    # ASCII digits only, and few of them: str.isdigit() also takes '²' and '٣', which int()
    # refuses or reads, and int() of thousands of digits is refused (or slow).
    text = cell.strip()
    digits = 0 < len(text) <= MAX_TOKEN_DIGITS and text.isascii() and text.isdigit()
    if not digits or not 1 <= int(text) <= MAX_TOKENS:
        raise ScenarioError(
            f"{path}: row {row}, column {column}: {text[:40]!r}; expected a whole number "
            f"of tokens, from 1 to {MAX_TOKENS:,}"
        )
    return int(text)
