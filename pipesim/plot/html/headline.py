"""The headline numbers of a training step, as the report shows them and as it embeds
them for scripts (``<script id="pipesim-data">``).

Every number is read from the Result, as ``pipesim run`` reads it for its table and its
JSON: the simulated value and, where the schedule has one, its closed form
(``Report.analytic``, from ``pipesim.sim.closed_form``). The embedded data is
``Result.to_dict()`` (what ``pipesim run --format json`` prints, less its accuracy bands
and the seconds a schedule search took, which would change the bytes from run to run),
with the headline picked out of it.
"""

from __future__ import annotations

from pipesim.analysis.run import Result

HEADLINE_KEYS = (
    "makespan_ms",
    "bubble_fraction",
    "bubble_overhead",
    "span_bubble_rate",
    "samples_per_second",
    "tokens_per_second",
    "mfu",
    "oom",
    "memory_capacity_bytes",
    "analytic",
)
TIMING_KEYS = ("seconds", "wall_s", "search_seconds")  # how long a search took: varies


def format_bytes(value: float) -> str:
    """``value`` bytes in the largest binary unit it reaches, as pipesim's tables say it."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"


def without_timing(data: dict) -> dict:
    """``data`` (nested dicts too) without how long anything took."""
    return {
        key: without_timing(value) if isinstance(value, dict) else value
        for key, value in data.items()
        if key not in TIMING_KEYS
    }


def training_data(result: Result) -> dict:
    """What the page embeds: the headline and the whole report."""
    data = without_timing(result.to_dict())
    headline = {key: data.get(key) for key in HEADLINE_KEYS}
    worst = max(result.report.per_device, key=lambda d: d.peak_memory_bytes)
    headline["peak_memory_bytes"] = worst.peak_memory_bytes
    headline["peak_memory_device"] = worst.device
    return {"headline": headline, "report": data}


def training_lines(result: Result) -> list[tuple[str, str, str]]:
    """``(quantity, simulated, analytic)`` rows of the headline table."""
    report, analytic = result.report, result.report.analytic
    lines = [
        (
            "makespan",
            f"{report.makespan_ms:.3f} ms",
            f"{analytic.makespan_ms:.3f} ms" if analytic else "",
        ),
        (
            "bubble fraction",
            f"{report.bubble_fraction:.4f}",
            f"{analytic.bubble_fraction:.4f}" if analytic else "",
        ),
        (
            "bubble overhead",
            f"{report.bubble_overhead:.4f}",
            f"{analytic.bubble_overhead:.4f}" if analytic else "",
        ),
        ("span bubble rate", f"{report.span_bubble_rate:.4f}", ""),
        ("throughput", f"{report.samples_per_second:,.1f} samples/s", ""),
    ]
    if report.tokens_per_second:
        lines.append(("", f"{report.tokens_per_second:,.0f} tokens/s", ""))
    if result.decode is not None:
        lines += _decode_lines(result)
    if report.mfu is not None:
        lines.append(("MFU", f"{report.mfu:.1%}", ""))
    lines += _memory_lines(result)
    if result.monte_carlo is not None:
        summary = result.monte_carlo
        figure = summary.makespan_ms
        lines.append(
            (
                f"makespan, {summary.runs} random steps",
                f"p50 {figure.p50:.3f} · p90 {figure.p90:.3f} · p99 {figure.p99:.3f} ms",
                "",
            )
        )
    return lines


def _decode_lines(result: Result) -> list[tuple[str, str, str]]:
    decode, exact = result.decode, result.decode.analytic
    tpot = "-" if decode.tpot_ms is None else f"{decode.tpot_ms:,.3f} ms"
    return [
        ("TTFT (mean)", f"{decode.ttft_ms:,.3f} ms", f"{exact.ttft_ms:,.3f} ms" if exact else ""),
        ("TPOT (mean)", tpot, f"{exact.tpot_ms:,.3f} ms steady state" if exact else ""),
        (
            "output tokens/s",
            f"{decode.tokens_per_second:,.3f}",
            f"{exact.tokens_per_second:,.3f} steady state" if exact else "",
        ),
    ]


def _memory_lines(result: Result) -> list[tuple[str, str, str]]:
    """Peak memory on the fullest device and whether it fits (where a model gives static
    memory), else the peak activations."""
    devices = result.report.per_device
    if not any(d.static_memory_bytes for d in devices):
        worst = max(devices, key=lambda d: d.peak_activation_bytes)
        peak = f"{format_bytes(worst.peak_activation_bytes)} on device {worst.device}"
        return [("peak activations", peak, "")]
    worst = max(devices, key=lambda d: d.peak_memory_bytes)
    verdict = "OUT OF MEMORY" if result.report.oom else "fits"
    accounting = result.scenario.accounting
    if accounting is not None and accounting.memory_capacity_bytes:
        verdict += f" in {format_bytes(accounting.memory_capacity_bytes)}"
    peak = f"{format_bytes(worst.peak_memory_bytes)} on device {worst.device} ({verdict})"
    return [("peak memory", peak, "")]
