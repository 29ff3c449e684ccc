"""``pipesim serve``: the serving report as a table, JSON or one CSV row, and its files.

Rendering only: the report, the per-request records and the max-rate search were computed
by ``pipesim.serving``; the table lays out what ``ServeReport`` holds.
"""

from __future__ import annotations

import csv
import io
import json

from pipesim.analysis.max_rate import MaxRate
from pipesim.cli.output import Files, figure_bytes, suffix_of
from pipesim.plot.serving import serving_figure
from pipesim.scenario.serving import ServeRun, ServingScenario
from pipesim.serving.export import report_scalars, requests_csv, to_chrome_trace
from pipesim.serving.report import LatencyStats


def serve_files(
    scenario: ServingScenario,
    run: ServeRun,
    requests: str | None,
    trace: str | None,
    plot: str | None,
) -> Files:
    """Every extra output of ``serve`` that was asked for, rendered in memory: one CSV line
    per request, the Perfetto trace (labelled with the loaded ``scenario``'s name), the
    figure (with the SLO's limits and percentile)."""
    files: Files = []
    if requests:
        files.append((requests, requests_csv(run.result)))
    if trace:
        files.append((trace, json.dumps(to_chrome_trace(run.result, label=scenario.name))))
    if plot:
        slo = scenario.slo
        figure = serving_figure(run.result, slo.ttft_ms, slo.tpot_ms, slo.percentile)
        files.append((plot, figure_bytes(figure, suffix_of(plot))))
    return files


def render_serve(run: ServeRun, search: MaxRate | None, fmt: str) -> str:
    """The report as ``fmt``: a table, JSON (``ServeReport.to_dict()``, with ``max_rate``
    after a search) or a CSV header and one row of the scalars. An undefined latency is
    ``null`` in JSON, empty in CSV and ``-`` in the table (see :func:`serve_notes`)."""
    if fmt == "json":
        data = run.report.to_dict()
        if search is not None:
            data["max_rate"] = search.to_dict()
        return json.dumps(data, indent=2) + "\n"
    if fmt == "csv":
        row = report_scalars(run.report)
        if search is not None:
            row = {"max_rate_rps": search.rate_rps, **row}
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(row), lineterminator="\n")
        writer.writeheader()
        writer.writerow(row)
        return buffer.getvalue()
    return render_serve_table(run, search)


def render_serve_table(run: ServeRun, search: MaxRate | None = None) -> str:
    scenario, report = run.scenario, run.report
    lines = [f"pipesim serve - {scenario.name}", ""]

    def line(label: str, value: str) -> None:
        lines.append(f"  {label:<20}{value}")

    if search is not None:
        lines += _search_lines(search, scenario)
    line("replicas", _replicas(scenario))
    line(
        "requests",
        f"{report.requests} ({report.completed} completed, {report.rejected} "
        f"rejected), {report.preemptions} preemptions",
    )
    line("duration", f"{report.duration_s:.3f} s")
    line(
        "throughput",
        f"{report.throughput_rps:.3f} requests/s, "
        f"{report.output_tokens_per_second:.1f} output tokens/s",
    )
    line("goodput", f"{report.goodput_rps:.3f} requests/s within {_slo(scenario)}")
    line("in system (mean)", f"{report.mean_in_system:.3f} requests")
    line(
        "batch size",
        f"mean {report.batch_size.mean:.2f}, peak {report.batch_size.peak:.0f} sequences",
    )
    line(
        "KV cache in use",
        f"mean {report.kv_utilization.mean:.1%}, peak "
        f"{report.kv_utilization.peak:.1%} of "
        f"{run.result.kv_blocks[0]:,} blocks per replica",
    )
    line("bubble fraction", f"{report.bubble_fraction:.4f}")
    lines += ["", f"  {'latency (ms)':<20}{'mean':>11}{'p50':>11}{'p90':>11}{'p99':>11}"]
    for label, stats in (
        ("TTFT", report.ttft_ms),
        ("TPOT", report.tpot_ms),
        ("inter-token", report.itl_ms),
        ("end to end", report.e2e_ms),
        ("queueing", report.queue_ms),
    ):
        lines.append(f"  {label:<20}" + _stats(stats))
    lines += ["", f"  {'replica':<10}{'stage':<8}{'busy (ms)':>14}{'bubble':>10}"]
    for device in report.devices:
        lines.append(
            f"  {device.replica:<10}{device.stage:<8}{device.busy_ms:>14.3f}"
            f"{device.bubble_fraction:>10.4f}"
        )
    return "\n".join(lines) + "\n"


def _stats(stats: LatencyStats) -> str:
    """One row of the latency table; ``-`` where the latency is undefined (no sample)."""
    values = (stats.mean, stats.p50, stats.p90, stats.p99)
    return "".join(f"{'-':>11}" if v is None else f"{v:>11.3f}" for v in values)


def serve_notes(run: ServeRun) -> list[str]:
    """What the report cannot show as numbers, for stderr: no completed request."""
    report = run.report
    if report.completed:
        return []
    return [
        f"no request completed ({report.rejected} of {report.requests} rejected), so "
        "TTFT, TPOT, inter-token, end-to-end and queueing latencies are undefined "
        "(null in JSON, empty in CSV, '-' in the table)"
    ]


def _replicas(scenario: ServingScenario) -> str:
    spec, config = scenario.spec, scenario.config
    shape = f"{config.replica.stages} pipeline stages x {spec.parallel.tensor} tensor GPUs"
    return f"{config.replicas} x ({shape}), router {config.router}, costs {scenario.costs_from}"


def _slo(scenario: ServingScenario) -> str:
    slo = scenario.slo
    limits = [
        f"{name} <= {value:g} ms"
        for name, value in (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms))
        if value is not None
    ]
    return "SLO " + ", ".join(limits) if limits else "no SLO (every completed request)"


def _search_lines(search: MaxRate, scenario: ServingScenario) -> list[str]:
    slo = scenario.slo
    lines = [
        f"  {'max rate':<20}{search.rate_rps:.4g} requests/s meets the p{slo.percentile:g} "
        f"{_slo(scenario).removeprefix('SLO ')}",
        f"  {'bracket':<20}[{search.low_rps:.4g}, {search.high_rps:.4g}] requests/s "
        f"(relative tolerance {search.rel_tolerance:g}, {len(search.probes)} runs)",
        "",
        f"  the run at {search.rate_rps:.4g} requests/s:",
    ]
    return lines
