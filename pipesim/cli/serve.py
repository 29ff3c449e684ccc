"""``pipesim serve``: live traffic on replicas of a pipeline, and what users would feel.

The command reads a scenario with a ``serving:`` section, simulates every request (or,
with ``--max-rate``, searches for the highest arrival rate that meets the SLO under
several seeds, within bounds on rates, time and requests) and renders the report
(``pipesim.cli.render.serve``) as a table, JSON or one CSV row. Extra outputs: one CSV
line per request (``--requests``), a Perfetto trace (``--trace``) and a figure
(``--plot``). Every output path is checked before the run starts, and nothing is written
unless the run succeeded.
"""

from __future__ import annotations

import math

import click

from pipesim.analysis.max_rate import (
    MAX_PROBES,
    MAX_REQUESTS,
    MAX_SEARCH_S,
    SEEDS,
    Bounds,
    MaxRateError,
    find_max_rate,
)
from pipesim.cli.formats import format_option, output_format
from pipesim.cli.html import check_html, html_option, html_output
from pipesim.cli.options import RealNumber, WholeNumber, no_progress_option, set_option
from pipesim.cli.output import (
    FIGURE_SUFFIXES,
    Output,
    UserError,
    check_outputs,
    note,
    scenario_inputs,
    user_errors,
    write_outputs,
)
from pipesim.cli.progress import open_ended_bar, progress_bar
from pipesim.cli.render.serve import render_serve, serve_files, serve_notes
from pipesim.scenario.serving import ServingScenario, load_serving, run_serving

FORMATS = ("table", "json", "csv")
SEARCH_OPTIONS = (
    click.option(
        "--seeds",
        type=WholeNumber(1, 1000),
        metavar="K",
        help="--max-rate: a rate meets the SLO only if it does under each of K seeds, the "
        f"workload's and the next ones (default {SEEDS}).",
    ),
    click.option(
        "--max-probes",
        type=WholeNumber(min=1),
        metavar="N",
        help=f"--max-rate: try at most N rates (default {MAX_PROBES}).",
    ),
    click.option(
        "--max-search-s",
        type=RealNumber(min=0, min_open=True),
        metavar="S",
        help=f"--max-rate: start no new rate after S seconds (default {MAX_SEARCH_S:g}).",
    ),
    click.option(
        "--max-requests",
        type=WholeNumber(min=1),
        metavar="N",
        help="--max-rate: cut every run to its first N requests (default "
        f"{MAX_REQUESTS:,}); a workload ending at duration_s grows with the rate.",
    ),
)


def search_options(command):
    for option in reversed(SEARCH_OPTIONS):
        command = option(command)
    return command


@click.command("serve")
@click.argument("scenario")
@set_option
@format_option(FORMATS)
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
@html_option
@click.option(
    "--max-rate",
    is_flag=True,
    help="Search for the highest arrival rate that meets serving.slo at its percentile "
    "under every seed (--seeds), by bisection on rates of a few significant digits; print "
    "that rate exactly and report its run under the workload's seed.",
)
@search_options
@no_progress_option
@user_errors
def serve_command(
    scenario,
    overrides,
    fmt,
    output,
    requests_path,
    trace_path,
    plot_path,
    html_path,
    max_rate,
    no_progress,
    **search,
) -> None:
    """Serve SCENARIO's workload on its replicas and report latencies and throughput.

    TTFT (time to first token), TPOT (time per output token), end-to-end latency and
    queueing delay per request with their mean, p50, p90 and p99; throughput, goodput
    under serving.slo, KV cache use, batch size, preemptions and per-stage busy time.
    The same scenario and seed give the same bytes in every output.
    """
    seeds, bounds = search_bounds(max_rate, **search)
    check_outputs(
        Output("-o", output, stdout=True),
        Output("--requests", requests_path, (".csv",)),
        Output("--trace", trace_path, (".json",)),
        Output("--plot", plot_path, FIGURE_SUFFIXES),
        html_output(html_path),
        inputs=scenario_inputs(scenario, overrides),
    )
    check_html(html_path)
    fmt = output_format(fmt, output, FORMATS)
    loaded = load_serving(scenario, overrides)
    search = None
    if max_rate:
        search, run = _search(loaded, seeds, bounds, no_progress)
    else:
        total = len(loaded.requests)
        with progress_bar(total, "request", "serving", disabled=no_progress) as progress:
            run = run_serving(loaded, progress)
    for text in serve_notes(run, search):
        note(text)
    files = serve_files(loaded, run, requests_path, trace_path, plot_path, html_path)
    write_outputs([*files, (output, render_serve(run, search, fmt))])


def search_bounds(
    max_rate: bool,
    seeds: int | None,
    max_probes: int | None,
    max_search_s: float | None,
    max_requests: int | None,
) -> tuple[int, Bounds]:
    """The seeds and bounds of a ``--max-rate`` search from its options (defaults where not
    given); UserError for a search option without ``--max-rate``."""
    given = {
        "--seeds": seeds,
        "--max-probes": max_probes,
        "--max-search-s": max_search_s,
        "--max-requests": max_requests,
    }
    if not max_rate:
        for name, value in given.items():
            if value is not None:
                raise UserError(f"{name}: only with --max-rate (it bounds the rate search)")
    if max_search_s is not None and math.isnan(max_search_s):
        raise UserError("--max-search-s: a number of seconds > 0, got nan")
    bounds = Bounds(
        MAX_PROBES if max_probes is None else max_probes,
        MAX_SEARCH_S if max_search_s is None else max_search_s,
        MAX_REQUESTS if max_requests is None else max_requests,
    )
    return SEEDS if seeds is None else seeds, bounds


def _search(loaded: ServingScenario, seeds: int, bounds: Bounds, no_progress: bool):
    with open_ended_bar("run", "max-rate search", disabled=no_progress) as progress:
        try:
            return find_max_rate(loaded, progress=progress, seeds=seeds, bounds=bounds)
        except MaxRateError as exc:
            raise UserError(str(exc)) from None
