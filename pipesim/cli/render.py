"""Text, JSON and CSV renderings of Reports, comparisons and explanations.

Rendering only: every number shown was computed by the core; nothing here simulates.
"""

from __future__ import annotations

import csv
import io
import json

from pipesim.analysis.critical import describe_gap, format_ms
from pipesim.sim.metrics import Report


def render_table(report: Report) -> str:
    lines = [f"pipesim - {report.scenario}", ""]
    analytic = report.analytic or {}

    def line(label: str, value: str, key: str | None = None, fmt: str = "{:.4f}") -> None:
        extra = f"   (analytic {fmt.format(analytic[key])})" if key in analytic else ""
        lines.append(f"  {label:<18}{value}{extra}")

    line("schedule", report.schedule)
    line("devices", f"{report.devices}   stages {report.stages}")
    line("microbatches", f"{report.microbatches} x {report.microbatch_size} samples")
    line("makespan", f"{report.makespan_ms:.3f} ms", "makespan_ms", "{:.3f} ms")
    line("bubble fraction", f"{report.bubble_fraction:.4f}", "bubble_fraction")
    line("bubble overhead", f"{report.bubble_overhead:.4f}", "bubble_overhead")
    line("span bubble rate", f"{report.span_bubble_rate:.4f}")
    line("throughput", f"{report.samples_per_second:,.1f} samples/s")
    if report.tokens_per_second:
        line("", f"{report.tokens_per_second:,.0f} tokens/s")
    if "makespan_ms_p50" in report.extra:
        extra = report.extra
        runs = f"({extra['monte_carlo_runs']} runs, seed {extra['monte_carlo_seed']})"
        lines.append("")
        lines.append(f"  Monte Carlo {runs}        p50        p90        p99")
        for label, key, fmt in (("makespan ms", "makespan_ms", "{:>10.3f}"),
                                ("bubble fraction", "bubble_fraction", "{:>10.4f}")):  # fmt: skip
            values = " ".join(fmt.format(extra[f"{key}_p{p}"]) for p in (50, 90, 99))
            lines.append(f"  {label:<18}{' ' * 10}{values}")
    if report.mfu is not None:
        line("MFU", f"{report.mfu:.1%}")
    if any(d.static_memory_bytes for d in report.per_device):
        worst = max(report.per_device, key=lambda d: d.peak_memory_bytes)
        verdict = "OUT OF MEMORY" if report.oom else "fits"
        line(
            "peak memory",
            f"{format_bytes(worst.peak_memory_bytes)} on device {worst.device} ({verdict})",
        )
    lines.append("")
    header = f"  {'device':>6} {'busy ms':>10} {'idle ms':>10} {'span ms':>10} {'bubble':>8} {'peak in-flight':>15} {'peak activations':>18} {'at ms':>9}"
    lines.append(header)
    with_static = any(d.static_memory_bytes for d in report.per_device)
    if with_static:
        lines[-1] += f" {'static':>12} {'peak total':>12}"
    for d in report.per_device:
        static = (
            f" {format_bytes(d.static_memory_bytes):>12} {format_bytes(d.peak_memory_bytes):>12}"
            if with_static
            else ""
        )
        oom = "  OOM" if d.oom else ""
        lines.append(
            f"  {d.device:>6} {d.busy_ms:>10.3f} {d.idle_ms:>10.3f} {d.span_ms:>10.3f} "
            f"{d.bubble_fraction:>8.4f} {d.peak_inflight:>15d} {format_bytes(d.peak_activation_bytes):>18} "
            f"{d.peak_activation_time_ms:>9.3f}" + static + oom
        )
    return "\n".join(lines) + "\n"


def format_bytes(value: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"


def render_csv(report: Report) -> str:
    """One row per device: the report's scalar fields, then the device's own fields."""
    scalars = {k: v for k, v in report.to_dict().items() if not isinstance(v, list | dict)}
    buffer = io.StringIO()
    rows = [
        {
            **scalars,
            **{
                f"device_{k}" if k == "bubble_fraction" else k: v
                for k, v in _device_dict(d).items()
            },
        }
        for d in report.per_device
    ]
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _device_dict(device) -> dict:
    from dataclasses import asdict

    return asdict(device)


RENDERERS = {"table": render_table, "json": render_json, "csv": render_csv}


def compare_row(report: Report, note: str) -> dict:
    return {
        "schedule": report.schedule,
        "makespan_ms": report.makespan_ms,
        "bubble_fraction": report.bubble_fraction,
        "span_bubble_rate": report.span_bubble_rate,
        "samples_per_second": report.samples_per_second,
        "peak_activation_bytes": [d.peak_activation_bytes for d in report.per_device],
        "note": note,
        "error": "",
    }


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


def rank_rows(rows: list[dict]) -> list[dict]:
    """Order by p50 makespan, ties by p99 (error rows last), and number the ranks."""
    ran = sorted(
        (r for r in rows if not r.get("error")),
        key=lambda r: (r["makespan_ms_p50"], r["makespan_ms_p99"]),
    )
    for rank, row in enumerate(ran, start=1):
        row["rank"] = rank
    return ran + [r for r in rows if r.get("error")]


def render_compare(rows: list[dict], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(rows, indent=2) + "\n"
    if fmt == "csv":
        buffer = io.StringIO()
        fields = [
            "schedule",
            "makespan_ms",
            "bubble_fraction",
            "span_bubble_rate",
            "samples_per_second",
            "peak_activation_bytes",
            "note",
            "error",
        ]
        fields[1:1] = [k for k in STUDY_FIELDS if any(k in r for r in rows)]
        writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {
                    **row,
                    "peak_activation_bytes": ";".join(
                        f"{v:.0f}" for v in row.get("peak_activation_bytes", [])
                    ),
                }
            )
        return buffer.getvalue()
    width = max(len(r["schedule"]) for r in rows)
    study = any("rank" in r for r in rows)
    lines = [
        ("rank  " if study else "")
        + f"{'schedule':<{width}}  {'makespan ms':>12} "
        + (f"{'p50 ms':>10} {'p99 ms':>10} " if study else "")
        + f"{'bubble':>8} {'span bubble':>12} {'samples/s':>12}  peak activations per device"
    ]
    for row in rows:
        if row.get("error"):
            lines.append(
                ("-     " if study else "") + f"{row['schedule']:<{width}}  not run: {row['error']}"
            )
            continue
        peaks = " ".join(format_bytes(v) for v in row["peak_activation_bytes"])
        percentiles = (
            f" {row['makespan_ms_p50']:>10.3f} {row['makespan_ms_p99']:>10.3f}" if study else ""
        )
        lines.append(
            (f"{row['rank']:<4}  " if study else "")
            + f"{row['schedule']:<{width}}  {row['makespan_ms']:>12.3f}{percentiles} {row['bubble_fraction']:>8.4f} "
            f"{row['span_bubble_rate']:>12.4f} {row['samples_per_second']:>12.1f}  {peaks}"
            + (f"  ({row['note']})" if row["note"] else "")
        )
    return "\n".join(lines) + "\n"


def render_explanation(report: Report, explanation, max_gaps: int) -> str:

    path = explanation.critical_path
    lines = [
        f"pipesim explain - {report.scenario} ({report.schedule}): "
        f"makespan {format_ms(report.makespan_ms)} ms",
        "",
        f"critical path ({len(path)} steps, 0 to {format_ms(report.makespan_ms)} ms):",
        f"  {'start ms':>10} {'end ms':>10}  device  action",
    ]
    lines += [
        f"  {format_ms(e['start_ms']):>10} {format_ms(e['end_ms']):>10}  {e['device']:>6}  {e['name']}"
        for e in path
    ]
    lines += ["", "idle time per device and cause (ms):"]
    for device, causes in sorted(explanation.idle_by_cause().items()):
        parts = ", ".join(f"{cause} {format_ms(ms)}" for cause, ms in causes.items())
        lines.append(f"  device {device}: {parts}")
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
