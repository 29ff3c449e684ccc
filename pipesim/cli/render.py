"""Text, JSON and CSV renderings of Results, comparisons and explanations.

Rendering only: every number shown was computed by the library; nothing here simulates.
Each renderer reads the typed fields of a Result (its Report, its Monte Carlo summary, its
explanation); JSON and CSV use ``Result.to_dict()``, whose keys stay stable for scripts.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict

import pandas as pd

from pipesim.analysis.compare import CompareRow, Comparison
from pipesim.analysis.critical import Explanation, describe_gap, format_ms
from pipesim.analysis.monte_carlo import MonteCarloSummary
from pipesim.analysis.run import Result
from pipesim.search import SearchResult
from pipesim.sim.decode import DecodeMetrics
from pipesim.sim.metrics import Report

TABLE_PATH_STEPS = 40  # critical path steps shown in the run table (all in JSON and explain)


def render_table(result: Result) -> str:
    """The report as a table; Monte Carlo percentiles and the critical path when present."""
    report = result.report
    lines = [f"pipesim - {report.scenario}", ""] + _summary_lines(report)
    if result.decode is not None:
        lines += _decode_lines(result.decode)
    if result.search is not None:
        lines += _search_lines(result.search)
    if result.monte_carlo is not None:
        lines += [""] + _monte_carlo_lines(result.monte_carlo)
    lines += _memory_lines(report)
    lines += [""] + _device_lines(report)
    if result.explanation is not None:
        path = _path_lines(result.explanation, report.makespan_ms, TABLE_PATH_STEPS)
        lines += [""] + [f"  {line}" if line else line for line in path]
    return "\n".join(lines) + "\n"


def _summary_lines(report: Report) -> list[str]:
    analytic = report.analytic
    lines: list[str] = []

    def line(label: str, value: str, predicted: str = "") -> None:
        lines.append(f"  {label:<18}{value}" + (f"   (analytic {predicted})" if predicted else ""))

    line("schedule", report.schedule)
    line("evaluator", report.evaluator)
    line("devices", f"{report.devices}   stages {report.stages}")
    line("microbatches", f"{report.microbatches} x {report.microbatch_size} samples")
    line(
        "makespan",
        f"{report.makespan_ms:.3f} ms",
        f"{analytic.makespan_ms:.3f} ms" if analytic else "",
    )
    line(
        "bubble fraction",
        f"{report.bubble_fraction:.4f}",
        f"{analytic.bubble_fraction:.4f}" if analytic else "",
    )
    line(
        "bubble overhead",
        f"{report.bubble_overhead:.4f}",
        f"{analytic.bubble_overhead:.4f}" if analytic else "",
    )
    line("span bubble rate", f"{report.span_bubble_rate:.4f}")
    line("throughput", f"{report.samples_per_second:,.1f} samples/s")
    if report.tokens_per_second:
        line("", f"{report.tokens_per_second:,.0f} tokens/s")
    return lines


def _decode_lines(decode: DecodeMetrics) -> list[str]:
    """Decode mode: time to first token, time per output token, tokens/s (means over the
    groups), each with its closed form (the steady state for TPOT and tokens/s)."""
    exact = decode.analytic

    def shown(label: str, value: float | None, unit: str, predicted: str) -> str:
        text = "-" if value is None else f"{value:,.3f} {unit}"
        return f"  {label:<18}{text}" + (f"   (analytic {predicted})" if exact else "")

    return [
        f"  {'token steps':<18}{decode.tokens} per group of {decode.group_size}, "
        f"{decode.groups} groups (step 0: the prefill)",
        shown("TTFT (mean)", decode.ttft_ms, "ms", f"{exact.ttft_ms:,.3f} ms" if exact else ""),
        shown(
            "TPOT (mean)",
            decode.tpot_ms,
            "ms",
            f"{exact.tpot_ms:,.3f} ms steady state" if exact else "",
        ),
        shown(
            "output tokens/s",
            decode.tokens_per_second,
            "tokens/s",
            f"{exact.tokens_per_second:,.3f} steady state" if exact else "",
        ),
    ]


def _search_lines(search: SearchResult) -> list[str]:
    """What the schedule search did: under which limit, how close it came, at what cost."""
    return [
        f"  {'memory limit':<18}{format_bytes(search.limit_bytes)} per device (searched)",
        f"  {'peak reached':<18}{format_bytes(search.peak_activation_bytes)}   ({search.source})",
        f"  {'search':<18}{search.candidates} candidates in {search.seconds:.2f} s",
    ]


def _monte_carlo_lines(summary: MonteCarloSummary) -> list[str]:
    runs = f"({summary.runs} runs, seed {summary.seed})"
    lines = [f"  Monte Carlo {runs}        p50        p90        p99"]
    for label, figure, fmt in (
        ("makespan ms", summary.makespan_ms, "{:>10.3f}"),
        ("bubble fraction", summary.bubble_fraction, "{:>10.4f}"),
    ):
        values = " ".join(fmt.format(v) for v in (figure.p50, figure.p90, figure.p99))
        lines.append(f"  {label:<18}{' ' * 10}{values}")
    return lines


def _memory_lines(report: Report) -> list[str]:
    lines = []
    if report.mfu is not None:
        lines.append(f"  {'MFU':<18}{report.mfu:.1%}")
    if any(d.static_memory_bytes for d in report.per_device):
        worst = max(report.per_device, key=lambda d: d.peak_memory_bytes)
        verdict = "OUT OF MEMORY" if report.oom else "fits"
        peak = f"{format_bytes(worst.peak_memory_bytes)} on device {worst.device} ({verdict})"
        lines.append(f"  {'peak memory':<18}{peak}")
    return lines


def _device_lines(report: Report) -> list[str]:
    with_static = any(d.static_memory_bytes for d in report.per_device)
    header = (
        f"  {'device':>6} {'busy ms':>10} {'idle ms':>10} {'span ms':>10} {'bubble':>8} "
        f"{'peak in-flight':>15} {'peak activations':>18} {'at ms':>9}"
    )
    lines = [header + (f" {'static':>12} {'peak total':>12}" if with_static else "")]
    for d in report.per_device:
        static = (
            f" {format_bytes(d.static_memory_bytes):>12} {format_bytes(d.peak_memory_bytes):>12}"
            if with_static
            else ""
        )
        lines.append(
            f"  {d.device:>6} {d.busy_ms:>10.3f} {d.idle_ms:>10.3f} {d.span_ms:>10.3f} "
            f"{d.bubble_fraction:>8.4f} {d.peak_inflight:>15d} "
            f"{format_bytes(d.peak_activation_bytes):>18} {d.peak_activation_time_ms:>9.3f}"
            + static
            + ("  OOM" if d.oom else "")
        )
    return lines


def format_bytes(value: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"


def render_json(result: Result) -> str:
    return json.dumps(result.to_dict(), indent=2) + "\n"


def render_csv(result: Result) -> str:
    """One row per device: the result's scalar fields, then the device's own fields."""
    scalars = {k: v for k, v in result.to_dict().items() if not isinstance(v, list | dict)}
    rows = [
        {
            **scalars,
            **{f"device_{k}" if k == "bubble_fraction" else k: v for k, v in asdict(d).items()},
        }
        for d in result.report.per_device
    ]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


RENDERERS = {"table": render_table, "json": render_json, "csv": render_csv}


COMPARE_FIELDS = (
    "schedule",
    "makespan_ms",
    "bubble_fraction",
    "span_bubble_rate",
    "samples_per_second",
    "peak_activation_bytes",
    "note",
    "error",
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
    if fmt == "json":
        return json.dumps(comparison.to_dicts(), indent=2) + "\n"
    if fmt == "csv":
        return _compare_csv(comparison)
    width = max(len(row.schedule) for row in comparison.rows)
    ranked = comparison.ranked
    lines = [
        ("rank  " if ranked else "")
        + f"{'schedule':<{width}}  {'makespan ms':>12} "
        + (f"{'p50 ms':>10} {'p99 ms':>10} " if ranked else "")
        + f"{'bubble':>8} {'span bubble':>12} {'samples/s':>12}  peak activations per device"
    ]
    lines += [_compare_line(row, width, ranked) for row in comparison.rows]
    return "\n".join(lines) + "\n"


def _compare_line(row: CompareRow, width: int, ranked: bool) -> str:
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
        f"{report.samples_per_second:>12.1f}  {peaks}" + _compare_remarks(row)
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
    at = fields.index("peak_activation_bytes") + 1
    fields[at:at] = [k for k in SEARCH_FIELDS if any(k in r for r in rows)]
    fields[1:1] = [k for k in STUDY_FIELDS if any(k in r for r in rows)]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        peaks = ";".join(f"{v:.0f}" for v in row.get("peak_activation_bytes", []))
        writer.writerow({**row, "peak_activation_bytes": peaks})
    return buffer.getvalue()


# ---------------------------------------------------------------------------
# Sweeps

SWEEP_SUFFIXES = (".csv", ".parquet", ".json")


def frame_bytes(frame: pd.DataFrame, suffix: str) -> bytes:
    """A sweep table as a ``.csv``, ``.json`` (records) or ``.parquet`` file's content."""
    if suffix == ".parquet":
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        return buffer.getvalue()
    if suffix == ".json":
        text = frame.to_json(orient="records", indent=2, double_precision=15) + "\n"
        return text.encode("utf-8")
    return frame.to_csv(index=False).encode("utf-8")


def render_sweep_table(frame: pd.DataFrame) -> str:
    """The sweep for a terminal: grid keys, then makespan, bubble, throughput and peak
    memory in human units, and the reason of any point that did not run (every column is
    in ``-o table.csv``)."""
    columns = list(frame.columns)
    grid = columns[: columns.index("scenario")] if "scenario" in columns else columns[:-1]
    shown = {key: [str(v) for v in frame[key]] for key in grid}
    if "makespan_ms" in frame:
        memory = "peak_memory_bytes_max"
        if not (frame[memory].fillna(0) > frame["peak_activation_bytes_max"].fillna(0)).any():
            memory = "peak_activation_bytes_max"  # no static memory known
        for label, key, fmt in (
            ("makespan ms", "makespan_ms", "{:.3f}"),
            ("bubble", "bubble_fraction", "{:.4f}"),
            ("samples/s", "samples_per_second", "{:,.1f}"),
        ):
            shown[label] = [_cell(v, fmt) for v in frame[key]]
        if "ttft_ms" in frame and frame["ttft_ms"].notna().any():  # decode mode
            for label, key, fmt in (
                ("TTFT ms", "ttft_ms", "{:.3f}"),
                ("TPOT ms", "tpot_ms", "{:.3f}"),
                ("tokens/s", "tokens_per_second", "{:,.1f}"),
            ):
                shown[label] = [_cell(v, fmt) for v in frame[key]]
        label = "peak memory" if memory == "peak_memory_bytes_max" else "peak activations"
        shown[label] = ["-" if pd.isna(v) else format_bytes(float(v)) for v in frame[memory]]
    return sweep_rows(shown, [str(e) for e in frame["error"]])


def sweep_rows(shown: dict[str, list[str]], errors: list[str]) -> str:
    """Columns of cells, right-aligned under their names, and the reason of each row that
    did not run after its cells (an ``error`` heading only when some row has one)."""
    widths = {name: max(len(name), *(len(c) for c in cells)) for name, cells in shown.items()}
    lines = ["  ".join(name.rjust(widths[name]) for name in shown)]
    if any(errors):
        lines[0] += "  error"
    for i, error in enumerate(errors):
        cells = "  ".join(shown[name][i].rjust(widths[name]) for name in shown)
        lines.append((cells + (f"  {error}" if error else "")).rstrip())
    return "\n".join(lines) + "\n"


def _cell(value: object, fmt: str) -> str:
    return "-" if pd.isna(value) else fmt.format(float(value))


# ---------------------------------------------------------------------------
# Explanations


def render_explanation(result: Result, max_gaps: int) -> str:
    """``pipesim explain``: the whole critical path, idle time per cause, and the gaps."""
    report, explanation = result.report, result.explanation
    lines = [
        f"pipesim explain - {report.scenario} ({report.schedule}): "
        f"makespan {format_ms(report.makespan_ms)} ms",
        "",
    ]
    lines += _path_lines(explanation, report.makespan_ms, None)
    lines += ["", "idle gaps:"]
    shown: dict[int, int] = {}
    for gap in explanation.gaps:
        shown[gap.device] = shown.get(gap.device, 0) + 1
        if shown[gap.device] <= max_gaps:
            lines.append(f"  {describe_gap(gap)}")
    hidden = sum(max(0, n - max_gaps) for n in shown.values())
    if hidden:
        lines.append(f"  ... {hidden} more (raise --max-gaps, or use --format json)")
    return "\n".join(lines) + "\n"


def _path_lines(explanation: Explanation, makespan_ms: float, limit: int | None) -> list[str]:
    """The critical path (at most ``limit`` steps), then idle time per device and cause."""
    path = explanation.critical_path
    lines = [
        f"critical path ({len(path)} steps, 0 to {format_ms(makespan_ms)} ms):",
        f"  {'start ms':>10} {'end ms':>10}  device  action",
    ]
    shown = path if limit is None or len(path) <= limit else path[:limit]
    lines += [
        f"  {format_ms(e['start_ms']):>10} {format_ms(e['end_ms']):>10}  {e['device']:>6}  {e['name']}"
        for e in shown
    ]
    if len(shown) < len(path):
        lines.append(
            f"  ... {len(path) - len(shown)} more steps (pipesim explain, or --format json)"
        )
    lines += ["", "idle time per device and cause (ms):"]
    for device, causes in sorted(explanation.idle_by_cause().items()):
        parts = ", ".join(f"{cause} {format_ms(idle_ms)}" for cause, idle_ms in causes.items())
        lines.append(f"  device {device}: {parts}")
    return lines
