"""``pipesim compare``: schedules side by side as a table, JSON or CSV, and their Gantt charts.

Rendering only: the comparison (its rows, ranks and rescaling notes) was computed by
``pipesim.analysis.compare``.
"""

from __future__ import annotations

import csv
import io
import json

from pipesim.analysis.compare import CompareRow, Comparison
from pipesim.analysis.run import (
    Result,
    backward_split_in_half,
    memory_capacity_bytes,
    split_note,
)
from pipesim.cli.output import Files, figure_bytes, suffix_of
from pipesim.cli.render.units import format_bytes
from pipesim.plot.figures import stacked_gantt_figure
from pipesim.plot.html.compare import compare_report

COMPARE_FIELDS = (
    "schedule",
    "makespan_ms",
    "bubble_fraction",
    "span_bubble_rate",
    "samples_per_second",
    "peak_activation_bytes",
    "static_memory_bytes",
    "runtime_memory_bytes",
    "peak_memory_bytes",
    "oom",
    "memory_capacity_bytes",
    "note",
    "error",
)
PER_DEVICE_FIELDS = (
    "peak_activation_bytes",
    "static_memory_bytes",
    "runtime_memory_bytes",
    "peak_memory_bytes",
)
SEARCH_FIELDS = ("memory_limit_bytes", "search_candidates", "search_seconds")
STUDY_FIELDS = (
    "rank",
    "makespan_ms_p50",
    "makespan_ms_p90",
    "makespan_ms_p99",
    "bubble_fraction_p50",
    "bubble_fraction_p90",
    "bubble_fraction_p99",
    "monte_carlo_runs",
    "monte_carlo_seed",
)


def render_compare(comparison: Comparison, fmt: str) -> str:
    """The comparison as ``fmt``. The table shows, where a model gives static memory, the
    peak memory of the device that needs the most (static, activations and runtime, as ``pipesim
    run``'s "peak memory" line), that device's static memory and whether every device fits
    the GPU (``OOM`` where one does not); then the peak activations of every device."""
    if fmt == "json":
        return json.dumps(comparison.to_dicts(), indent=2) + "\n"
    if fmt == "csv":
        return _compare_csv(comparison)
    width = max(len("schedule"), *(len(row.schedule) for row in comparison.rows))
    ranked = comparison.ranked
    static = any(
        d.static_memory_bytes for result in comparison.results for d in result.report.per_device
    )
    lines = [
        ("rank  " if ranked else "")
        + f"{'schedule':<{width}}  {'makespan ms':>12} "
        + (f"{'p50 ms':>10} {'p99 ms':>10} " if ranked else "")
        + f"{'bubble':>8} {'span bubble':>12} {'samples/s':>12}  "
        + (f"{'peak memory':>11} {'static':>11} {'on GPU':>6}  " if static else "")
        + "peak activations per device"
    ]
    lines += [_compare_line(row, width, ranked, static) for row in comparison.rows]
    return "\n".join(lines) + "\n"


def _compare_line(row: CompareRow, width: int, ranked: bool, static: bool) -> str:
    if row.result is None:
        return ("-     " if ranked else "") + f"{row.schedule:<{width}}  not run: {row.error}"
    report, summary = row.result.report, row.result.monte_carlo
    peaks = " ".join(format_bytes(d.peak_activation_bytes) for d in report.per_device)
    percentiles = (
        f" {summary.makespan_ms.p50:>10.3f} {summary.makespan_ms.p99:>10.3f}"
        if ranked and summary is not None
        else ""
    )
    return (
        (f"{row.rank:<4}  " if ranked else "")
        + f"{row.schedule:<{width}}  {report.makespan_ms:>12.3f}{percentiles} "
        f"{report.bubble_fraction:>8.4f} {report.span_bubble_rate:>12.4f} "
        f"{report.samples_per_second:>12.1f}  "
        + (_memory_cells(row.result) if static else "")
        + peaks
        + _compare_remarks(row)
    )


def _memory_cells(result: Result) -> str:
    """The device with the largest peak memory: that peak, its static part, the verdict
    (``-`` where the GPU's memory is unknown)."""
    worst = max(result.report.per_device, key=lambda d: d.peak_memory_bytes)
    verdict = "-" if memory_capacity_bytes(result.scenario) is None else "fits"
    verdict = "OOM" if result.report.oom else verdict
    return (
        f"{format_bytes(worst.peak_memory_bytes):>11} "
        f"{format_bytes(worst.static_memory_bytes):>11} {verdict:>6}  "
    )


def _compare_remarks(row: CompareRow) -> str:
    """The end of a compare line, in brackets: what a search did (the limit it searched
    under, the peak it reached, its candidates and time), then the row's note."""
    parts = []
    search = row.result.search if row.result is not None else None
    if search is not None:
        parts.append(
            f"limit {format_bytes(search.limit_bytes)}, peak "
            f"{format_bytes(search.peak_activation_bytes)}, {search.candidates} candidates "
            f"in {search.seconds:.2f} s"
        )
    if row.note:
        parts.append(row.note)
    return f"  ({'; '.join(parts)})" if parts else ""


def _compare_csv(comparison: Comparison) -> str:
    rows = comparison.to_dicts()
    fields = list(COMPARE_FIELDS)
    at = fields.index("memory_capacity_bytes") + 1
    fields[at:at] = [k for k in SEARCH_FIELDS if any(k in r for r in rows)]
    fields[1:1] = [k for k in STUDY_FIELDS if any(k in r for r in rows)]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:  # per-device values joined by ";", device 0 first
        lists = {k: ";".join(f"{v:.0f}" for v in row[k]) for k in PER_DEVICE_FIELDS if k in row}
        writer.writerow({**row, **lists})
    return buffer.getvalue()


def compare_notes(comparison: Comparison, gantt: str | None) -> list[str]:
    """The notes to read next to the table: one per rescaling (which schedules ran their
    hand-typed costs scaled), one naming the schedules that split a lone backward_ms in
    half for I and W, and a --gantt that had nothing to draw."""
    by_note: dict[str, list[str]] = {}
    for row in comparison.rescaled:
        by_note.setdefault(row.note, []).append(row.schedule)
    notes = [
        f"{', '.join(schedules)}: {text}: hand-typed costs are per chunk, so they were "
        "scaled to keep the work the same"
        for text, schedules in by_note.items()
    ]
    split = [
        row.schedule
        for row in comparison.rows
        if row.result is not None and backward_split_in_half(row.result.scenario)
    ]
    if split:
        notes.append(split_note(", ".join(split)))
    if gantt and not comparison.results:
        notes.append(f"--gantt {gantt}: not written, no schedule ran")
    return notes


def compare_files(comparison: Comparison, gantt: str | None, html: str | None = None) -> Files:
    """The stacked Gantt charts of every schedule that ran, if asked for and any ran; the
    interactive report (``html``), if asked for."""
    files: Files = []
    if html:
        files.append((html, compare_report(comparison)))
    if not gantt or not comparison.results:
        return files
    pairs = [(r.trace, r.report) for r in comparison.results]
    return [*files, (gantt, figure_bytes(stacked_gantt_figure(pairs), suffix_of(gantt)))]
