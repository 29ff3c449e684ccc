"""``pipesim run``: the report as a table, JSON or CSV, and its extra files.

Rendering only: every number shown was computed by the library; nothing here simulates.
Each renderer reads the typed fields of a Result (its Report, its Monte Carlo summary, its
explanation); JSON and CSV use ``Result.to_dict()``, whose keys stay stable for scripts.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict

from pipesim import plot
from pipesim.analysis.accuracy import AccuracyBand, scenario_bands
from pipesim.analysis.experts import moe_fields
from pipesim.analysis.monte_carlo import MonteCarloSummary
from pipesim.analysis.run import Result
from pipesim.cli.output import Files, figure_bytes, suffix_of
from pipesim.cli.render.explain import path_lines
from pipesim.cli.render.units import format_bytes, format_count
from pipesim.cluster.transformer import ParameterCount
from pipesim.schedules.torch_csv import to_torch_csv
from pipesim.search import SearchResult
from pipesim.sim.decode import DecodeMetrics, row_names
from pipesim.sim.export import chrome_trace_json, gzipped
from pipesim.sim.export import to_csv as trace_to_csv
from pipesim.sim.metrics import Accounting, Report
from pipesim.sim.sublayer_rows import sublayer_rows

TABLE_PATH_STEPS = 40  # critical path steps shown in the run table (all in JSON and explain)


def render_table(result: Result) -> str:
    """The report as a table; Monte Carlo percentiles and the critical path when present."""
    report = result.report
    bands = scenario_bands(result.scenario)
    step = band_lines(bands, ("step_time",)) if result.decode is None else []
    lines = [f"pipesim - {report.scenario}", ""] + _summary_lines(report, step)
    if result.decode is not None:
        lines += _decode_lines(result.decode) + band_lines(bands, ("step_time", "ttft", "tpot"))
    if result.search is not None:
        lines += _search_lines(result.search)
    if result.monte_carlo is not None:
        lines += [""] + _monte_carlo_lines(result.monte_carlo)
    memory = _memory_lines(report, result.scenario.accounting)
    if memory and memory[-1].lstrip().startswith("peak memory"):
        memory += band_lines(bands, ("peak_memory",))
    lines += _parameter_lines(result.scenario.parameters) + _moe_lines(result) + memory
    lines += [""] + _device_lines(report)
    if result.explanation is not None:
        path = path_lines(result.explanation, report.makespan_ms, TABLE_PATH_STEPS)
        lines += [""] + [f"  {line}" if line else line for line in path]
    return "\n".join(lines) + "\n"


def band_lines(bands: dict[str, AccuracyBand], keys: tuple[str, ...]) -> list[str]:
    """The error to expect on the quantities ``keys`` (``pipesim.analysis.accuracy``)."""
    shown = [bands[key] for key in keys if key in bands]
    return [f"  {'expected error' if n == 0 else '':<18}{b.text}" for n, b in enumerate(shown)]


def _summary_lines(report: Report, after_makespan: list[str]) -> list[str]:
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
    lines += after_makespan
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
    lines += _tail_lines(report)
    line("throughput", f"{report.samples_per_second:,.1f} samples/s")
    if report.tokens_per_second:
        line("", f"{report.tokens_per_second:,.0f} tokens/s")
    return lines


def _tail_lines(report: Report) -> list[str]:
    """The longest end-of-step work of a device, by part, and which bubble numbers count it
    (as idle time): the bubble fraction and overhead do, the span bubble rate does not."""
    if report.tail_ms <= 0:
        return []
    device = max(report.per_device, key=lambda d: d.tail_ms)
    parts = [
        f"{label} {ms:.3f} ms"
        for label, ms in (
            ("gradient all-reduce", device.allreduce_ms),
            ("optimizer step", device.optimizer_ms),
        )
        if ms > 0
    ]
    return [
        f"  {'end of step':<18}{report.tail_ms:.3f} ms on device {device.device}: "
        + ", ".join(parts),
        f"  {'':<18}idle time in the bubble fraction and overhead, not in the span bubble rate",
    ]


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
    """What the schedule search did: under which limit, how close it came, at what cost,
    and how far from the best order it can be (no order within the limit beats the
    lower bound); in exact mode, whether the order is proven optimal and how far the
    heuristic's own order was from the bound."""
    lines = [
        f"  {'memory limit':<18}{format_bytes(search.limit_bytes)} per device (searched)",
        f"  {'peak reached':<18}{format_bytes(search.peak_activation_bytes)}   ({search.source})",
        f"  {'search':<18}{search.candidates} candidates in {search.seconds:.2f} s",
        f"  {'lower bound':<18}{search.lower_bound_ms:.3f} ms (the order found is within "
        f"{search.gap:.1%} of it)",
    ]
    if search.mode == "exact":
        proven = "proven optimal" if search.optimal else "not proven optimal in the time limit"
        lines.append(
            f"  {'exact search':<18}{proven}; the heuristic found "
            f"{search.heuristic_makespan_ms:.3f} ms ({search.heuristic_gap:.1%} above the bound)"
        )
    return lines


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


def _moe_lines(result: Result) -> list[str]:
    """A MoE model's expert parallelism: where the group sits, the routing's imbalance and
    drops, and the all-to-alls' time per step on the busiest device."""
    moe = moe_fields(result.scenario, result.report.step_time_ms, result.trace)
    if moe is None:
        return []
    lines = [f"  {'experts':<18}{moe['placement']}, imbalance {moe['imbalance']:.3f}"]
    if moe["dropped_fraction"]:
        lines[-1] += f", {moe['dropped_fraction'] * 100:.2f}% of copies dropped"
    if moe["expert_parallel"] > 1:
        lines.append(
            f"  {'all-to-all':<18}{moe['all_to_all_ms_per_step']:.3f} ms a step "
            f"({moe['all_to_all_share'] * 100:.1f}% of it), {moe['all_to_all_ms']:.3f} ms "
            "a dispatch"
        )
    if "exposed_all_to_all_ms_per_step" in moe:
        lines.append(
            f"  {'':<18}{moe['exposed_all_to_all_ms_per_step']:.3f} ms of it exposed "
            f"({moe['exposed_all_to_all_share'] * 100:.1f}% of the step), the rest under "
            "compute"
        )
    return lines


def _parameter_lines(count: ParameterCount | None) -> list[str]:
    """The model's parameters: total, and where they differ, activated per token (a MoE
    model's) and the MTP modules' own."""
    if count is None:
        return []
    text = format_count(count.total)
    if count.activated != count.total:
        text += f" total, {format_count(count.activated)} activated per token"
    if count.mtp:
        text += f" (+ {format_count(count.mtp)} in MTP modules)"
    return [f"  {'parameters':<18}{text}"]


def _memory_lines(report: Report, accounting: Accounting | None) -> list[str]:
    lines = []
    if report.mfu is not None:
        lines.append(f"  {'MFU':<18}{report.mfu:.1%}")
    if any(d.static_memory_bytes for d in report.per_device):
        worst = max(report.per_device, key=lambda d: d.peak_memory_bytes)
        verdict = "OUT OF MEMORY" if report.oom else "fits"
        if accounting is not None and accounting.memory_headroom:
            verdict += (
                f"; {format_bytes(accounting.usable_bytes)} usable of "
                f"{format_bytes(accounting.memory_capacity_bytes)}, "
                f"{accounting.memory_headroom * 100:.3g}% kept free"
            )
        peak = f"{format_bytes(worst.peak_memory_bytes)} on device {worst.device} ({verdict})"
        lines.append(f"  {'peak memory':<18}{peak}")
    return lines


def _device_lines(report: Report) -> list[str]:
    with_static = any(d.static_memory_bytes for d in report.per_device)
    header = (
        f"  {'device':>6} {'busy ms':>10} {'idle ms':>10} {'span ms':>10} {'bubble':>8} "
        f"{'peak in-flight':>15} {'peak activations':>18} {'at ms':>9}"
    )
    memory = f" {'static':>12} {'runtime':>12} {'peak total':>12}"
    lines = [header + (memory if with_static else "")]
    for d in report.per_device:
        static = (
            f" {format_bytes(d.static_memory_bytes):>12} {format_bytes(d.runtime_memory_bytes):>12}"
            f" {format_bytes(d.peak_memory_bytes):>12}"
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


def render_json(result: Result) -> str:
    """``Result.to_dict()`` and, under ``accuracy``, the error to expect on each quantity."""
    data = result.to_dict()
    data["accuracy"] = {k: b.to_dict() for k, b in scenario_bands(result.scenario).items()}
    return json.dumps(data, indent=2) + "\n"


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


def run_files(
    result: Result,
    gantt: str | None,
    trace: str | None,
    trace_csv: str | None,
    schedule_csv: str | None,
    html: str | None = None,
) -> Files:
    """Every extra output of ``run`` that was asked for, rendered in memory (``html``:
    the interactive report)."""
    files: Files = []
    if gantt:
        path = result.explanation.critical_path if result.explanation is not None else None
        accounting = result.scenario.accounting
        capacity = accounting.memory_capacity_bytes if accounting is not None else 0.0
        scenario = result.scenario
        figure = plot.gantt_figure(
            result.trace,
            result.report,
            result.memory,
            path,
            capacity_bytes=capacity,
            runtime=plot.runtime_for(accounting),
            sublayers=sublayer_rows(result.trace, scenario.schedule, scenario.costs),  # MoE
        )
        files.append((gantt, figure_bytes(figure, suffix_of(gantt))))
    if trace:
        label = result.report.scenario or "pipesim"
        names = row_names(result.trace) if result.decode is not None else None  # t3 g1
        scenario = result.scenario
        parts = sublayer_rows(result.trace, scenario.schedule, scenario.costs)  # MoE only
        text = chrome_trace_json(
            result.trace, label=label, memory=result.memory, names=names, sublayers=parts
        )
        files.append((trace, gzipped(text) if suffix_of(trace) == ".gz" else text))
    if trace_csv:
        files.append((trace_csv, trace_to_csv(result.trace)))
    if schedule_csv:
        # torch's own row ends, so the file is byte for byte what torch writes
        files.append((schedule_csv, to_torch_csv(result.scenario.schedule).encode()))
    if html:
        files.append((html, plot.training_report(result)))
    return files
