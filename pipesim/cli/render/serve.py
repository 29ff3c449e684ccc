"""``pipesim serve``: the serving report as a table, JSON or one CSV row, and its files.

Rendering only: the report, the per-request records and the max-rate search were computed
by ``pipesim.serving``; the table lays out what ``ServeReport`` holds.
"""

from __future__ import annotations

import csv
import io
import json

from pipesim.analysis.accuracy import AccuracyBand, serving_bands
from pipesim.analysis.max_rate import MaxRate, rate_text
from pipesim.cli.output import Files, figure_bytes, suffix_of
from pipesim.plot.html.serving import serving_report
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
    html: str | None = None,
) -> Files:
    """Every extra output of ``serve`` that was asked for, rendered in memory: one CSV line
    per request, the Perfetto trace (labelled with the loaded ``scenario``'s name), the
    figure (with the SLO's limits and percentile), the interactive report."""
    files: Files = []
    if requests:
        files.append((requests, requests_csv(run.result)))
    if trace:
        files.append((trace, json.dumps(to_chrome_trace(run.result, label=scenario.name))))
    if plot:
        slo = scenario.slo
        figure = serving_figure(run.result, slo.ttft_ms, slo.tpot_ms, slo.percentile)
        files.append((plot, figure_bytes(figure, suffix_of(plot))))
    if html:
        files.append((html, serving_report(run)))
    return files


def render_serve(run: ServeRun, search: MaxRate | None, fmt: str) -> str:
    """The report as ``fmt``: a table, JSON (``ServeReport.to_dict()``, with ``max_rate``
    after a search) or a CSV header and one row of the scalars. An undefined latency is
    ``null`` in JSON, empty in CSV and ``-`` in the table (see :func:`serve_notes`)."""
    if fmt == "json":
        data = run.report.to_dict()
        if search is not None:
            data["max_rate"] = search.to_dict()
        data["accuracy"] = {k: b.to_dict() for k, b in bands(run.scenario).items()}
        return json.dumps(data, indent=2) + "\n"
    if fmt == "csv":
        row = report_scalars(run.report)
        if search is not None:
            found = {
                "max_rate_rps": search.rate_rps,
                "max_rate_high_rps": search.high_rps,
                "max_rate_seeds": len(search.seeds),
                "max_rate_stopped": search.stopped,
            }
            row = {**found, **row}
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
    shown = bands(scenario).values()
    lines += [""] + [
        f"  {'expected error' if n == 0 else '':<20}{b.text}" for n, b in enumerate(shown)
    ]
    lines += ["", f"  {'replica':<10}{'stage':<8}{'busy (ms)':>14}{'bubble':>10}"]
    for device in report.devices:
        lines.append(
            f"  {device.replica:<10}{device.stage:<8}{device.busy_ms:>14.3f}"
            f"{device.bubble_fraction:>10.4f}"
        )
    return "\n".join(lines) + "\n"


def bands(scenario: ServingScenario) -> dict[str, AccuracyBand]:
    """The error to expect on TTFT and TPOT (``pipesim.analysis.accuracy``)."""
    return serving_bands(scenario.spec, scenario.costs_from, scenario.source)


def _stats(stats: LatencyStats) -> str:
    """One row of the latency table; ``-`` where the latency is undefined (no sample)."""
    values = (stats.mean, stats.p50, stats.p90, stats.p99)
    return "".join(f"{'-':>11}" if v is None else f"{v:>11.3f}" for v in values)


def serve_notes(run: ServeRun, search: MaxRate | None = None) -> list[str]:
    """What the report cannot show as numbers, for stderr: no completed request; a rate
    search that a bound stopped, or whose runs were cut to ``--max-requests``."""
    report, notes = run.report, []
    if not report.completed:
        notes.append(
            f"no request completed ({report.rejected} of {report.requests} rejected), so "
            "TTFT, TPOT, inter-token, end-to-end and queueing latencies are undefined "
            "(null in JSON, empty in CSV, '-' in the table)"
        )
    if search is not None and search.stopped in BOUND_OPTIONS:
        notes.append(_bound_note(search))
    if search is not None:
        cut = [p.rate_rps for p in search.probes if p.cut]
        if cut:
            holds = (
                "the answer holds for that many"
                if search.answer.cut
                else "the answer's run was not cut"
            )
            notes.append(
                f"max-rate runs at {rate_text(min(cut))} requests/s and above were cut to "
                f"their first {search.bounds.max_requests:,} requests (--max-requests); {holds}"
            )
    return notes


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


# ---------------------------------------------------------------------------
# The max-rate search

BOUND_OPTIONS = {"max_probes": "--max-probes", "max_search_s": "--max-search-s"}


def _search_lines(search: MaxRate, scenario: ServingScenario) -> list[str]:
    """How the search decided: the rate (exactly as it ran), the latencies under each seed,
    the bracket, the bisection and what stopped it, the bounds, and how to serve the run
    shown below again."""
    slo, rate, bounds = scenario.slo, rate_text(search.rate_rps), search.bounds
    seeds = ", ".join(str(seed) for seed in search.seeds)
    seeds = f"seed{'s' * (len(search.seeds) > 1)} {seeds}"
    per_run = "" if bounds.max_requests is None else f", {bounds.max_requests:,} requests per run"
    return [
        f"  {'max rate':<20}{rate} requests/s meets the p{slo.percentile:g} "
        f"{_slo(scenario).removeprefix('SLO ')} under {seeds}",
        f"  {'at that rate':<20}{_spread(search, slo.percentile)}",
        f"  {'bracket':<20}{_bracket_words(search)}",
        f"  {'search':<20}{len(search.probes)} rates, {search.runs} runs: bisection to "
        f"relative tolerance {search.rel_tolerance:g} on {search.digits}-digit rates, "
        f"{_stopped(search)}",
        f"  {'bounds':<20}{bounds.max_probes} rates, {bounds.max_search_s:g} s{per_run}",
        "",
        f"  the run at {rate} requests/s under seed {search.seeds[0]} (--set "
        f"{' --set '.join(search.overrides)} serves it again):",
    ]


def _spread(search: MaxRate, percentile: float) -> str:
    """The SLO's percentile of TTFT and TPOT at the answer, over its seeds."""
    runs, parts = search.answer.runs, []
    for label, name in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms")):
        values = [getattr(run, name) for run in runs if getattr(run, name) is not None]
        if values:
            low, high = min(values), max(values)
            shown = f"{low:.3f}" if low == high else f"{low:.3f} to {high:.3f}"
            parts.append(f"{label} p{percentile:g} {shown} ms")
    return ", ".join(parts) + f" ({len(runs)} seed{'s' * (len(runs) != 1)})"


def _bracket_words(search: MaxRate) -> str:
    low = rate_text(search.low_rps)
    if search.high_rps is None:
        return f"at least {low} requests/s: no rate tried missed the SLO"
    high = rate_text(search.high_rps)
    missed = next(p for p in reversed(search.probes) if p.rate_rps == search.high_rps)
    seed = next((run.seed for run in missed.runs if not run.meets_slo), None)
    under = "" if seed is None else f" under seed {seed}"
    width = (search.high_rps - search.low_rps) / search.high_rps
    return f"[{low}, {high}] requests/s ({width:.2%} wide): {high} misses the SLO{under}"


def _bound_note(search: MaxRate) -> str:
    low = rate_text(search.low_rps)
    if search.high_rps is None:
        found = f"the max rate is at least {low} requests/s (no rate tried missed the SLO)"
    else:
        found = (
            f"the max rate lies in [{low}, {rate_text(search.high_rps)}] requests/s; "
            f"{low} is reported"
        )
    return f"the max-rate search {_stopped(search)}: {found}"


def _stopped(search: MaxRate) -> str:
    stopped = search.stopped
    if stopped in BOUND_OPTIONS:
        bound = getattr(search.bounds, stopped)
        return f"stopped at {BOUND_OPTIONS[stopped]} {bound:g} before the tolerance"
    if stopped == "grid":
        return f"stopped: no {search.digits}-digit rate inside the bracket"
    return "stopped within it"
