"""``pipesim serve``: live traffic on replicas of a pipeline, and what users would feel.

The command reads a scenario with a ``serving:`` section, simulates every request (or,
with ``--max-rate``, searches for the highest arrival rate that meets the SLO) and renders
the report as a table, JSON or one CSV row. Extra outputs: one CSV line per request
(``--requests``), a Perfetto trace (``--trace``) and a figure (``--plot``). Every output
path is checked before the run starts, and nothing is written unless the run succeeded.
"""

from __future__ import annotations

import csv
import io
import json

import click
import pandas as pd

from pipesim.analysis.max_rate import MaxRate, MaxRateError, find_max_rate
from pipesim.analysis.serving_sweep import is_serving, run_serving_sweep
from pipesim.cli.options import no_progress_option, set_option
from pipesim.cli.output import (
    FIGURE_SUFFIXES,
    Output,
    UserError,
    check_outputs,
    figure_bytes,
    suffix_of,
    user_errors,
    write_outputs,
)
from pipesim.cli.progress import open_ended_bar, progress_bar
from pipesim.cli.render import sweep_rows
from pipesim.plot.serving import serving_figure, serving_sweep_figure
from pipesim.scenario.serving import ServeRun, ServingScenario, load_serving, run_serving
from pipesim.serving.export import report_scalars, requests_csv, to_chrome_trace
from pipesim.serving.report import LatencyStats

FORMATS = ("table", "json", "csv")


@click.command()
@click.argument("scenario")
@set_option
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option(
    "-o", "--output", default="-", metavar="PATH|-", help="Write the report here (default: stdout)."
)
@click.option(
    "--requests", "requests_path", metavar="PATH", help="One CSV line per request (.csv)."
)
@click.option(
    "--trace", "trace_path", metavar="PATH", help="Chrome trace JSON for Perfetto (.json)."
)
@click.option(
    "--plot",
    "plot_path",
    metavar="PATH",
    help="Latency CDFs, batch size and KV use (.png, .svg, .pdf).",
)
@click.option(
    "--max-rate",
    is_flag=True,
    help="Search for the highest arrival rate that meets serving.slo at its percentile "
    "(bisection over runs with the workload's seed); report the run at that rate.",
)
@no_progress_option
@user_errors
def serve(
    scenario, overrides, fmt, output, requests_path, trace_path, plot_path, max_rate, no_progress
) -> None:
    """Serve SCENARIO's workload on its replicas and report latencies and throughput.

    TTFT (time to first token), TPOT (time per output token), end-to-end latency and
    queueing delay per request with their mean, p50, p90 and p99; throughput, goodput
    under serving.slo, KV cache use, batch size, preemptions and per-stage busy time.
    The same scenario and seed give the same bytes in every output.
    """
    check_outputs(
        Output("-o", output, stdout=True),
        Output("--requests", requests_path, (".csv",)),
        Output("--trace", trace_path, (".json",)),
        Output("--plot", plot_path, FIGURE_SUFFIXES),
    )
    loaded = load_serving(scenario, overrides)
    search = None
    if max_rate:
        with open_ended_bar("run", "max-rate search", disabled=no_progress) as progress:
            try:
                search, run = find_max_rate(loaded, progress=progress)
            except MaxRateError as exc:
                raise UserError(str(exc)) from None
    else:
        total = len(loaded.requests)
        with progress_bar(total, "request", "serving", disabled=no_progress) as progress:
            run = run_serving(loaded, progress)
    files: list[tuple[str | None, str | bytes]] = []
    if requests_path:
        files.append((requests_path, requests_csv(run.result)))
    if trace_path:
        chrome = to_chrome_trace(run.result, label=loaded.name)
        files.append((trace_path, json.dumps(chrome)))
    if plot_path:
        figure = serving_figure(run.result, loaded.slo.ttft_ms, loaded.slo.tpot_ms)
        files.append((plot_path, figure_bytes(figure, suffix_of(plot_path))))
    write_outputs([*files, (output, render(run, search, fmt))])


# ---------------------------------------------------------------------------
# Rendering


def render(run: ServeRun, search: MaxRate | None, fmt: str) -> str:
    """The report as ``fmt``: a table, JSON (``ServeReport.to_dict()``, with ``max_rate``
    after a search) or a CSV header and one row of the scalars."""
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
    return render_table(run, search)


def render_table(run: ServeRun, search: MaxRate | None = None) -> str:
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
    return "".join(f"{v:>11.3f}" for v in (stats.mean, stats.p50, stats.p90, stats.p99))


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


# ---------------------------------------------------------------------------
# Sweeps of serving scenarios (``pipesim sweep`` picks these for a serving section)

SWEEP_COLUMNS = (
    ("requests/s", "throughput_rps", "{:.3f}"),
    ("tokens/s", "output_tokens_per_second", "{:,.1f}"),
    ("goodput/s", "goodput_rps", "{:.3f}"),
    ("TTFT p99 ms", "ttft_ms_p99", "{:.2f}"),
    ("TPOT p99 ms", "tpot_ms_p99", "{:.2f}"),
    ("e2e p99 ms", "e2e_ms_p99", "{:.1f}"),
    ("preempted", "preemptions", "{:.0f}"),
)


def render_serving_sweep_table(frame: pd.DataFrame) -> str:
    """A serving sweep for a terminal: the grid keys, throughput, goodput and p99
    latencies, and the reason of any point that did not run (every column is in ``-o``)."""
    shown = {key: [str(v) for v in frame[key]] for key in frame.columns if "." in str(key)}
    for label, key, fmt in SWEEP_COLUMNS:
        if key in frame:
            shown[label] = ["-" if pd.isna(v) else fmt.format(float(v)) for v in frame[key]]
    return sweep_rows(shown, [str(e) for e in frame["error"]])


def sweep_functions(base: dict, run_sweep, sweep_figure, render_sweep_table) -> tuple:
    """``(run, figure, table)`` for ``pipesim sweep``: the serving ones when ``base`` has a
    ``serving`` section, else the three given."""
    if is_serving(base):
        return run_serving_sweep, serving_sweep_figure, render_serving_sweep_table
    return run_sweep, sweep_figure, render_sweep_table
