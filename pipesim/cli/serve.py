"""``pipesim serve``: live traffic on replicas of a pipeline, and what users would feel.

The command reads a scenario with a ``serving:`` section, simulates every request (or,
with ``--max-rate``, searches for the highest arrival rate that meets the SLO) and renders
the report (``pipesim.cli.render.serve``) as a table, JSON or one CSV row. Extra outputs: one CSV line per request
(``--requests``), a Perfetto trace (``--trace``) and a figure (``--plot``). Every output
path is checked before the run starts, and nothing is written unless the run succeeded.
"""

from __future__ import annotations

import click

from pipesim.analysis.max_rate import MaxRateError, find_max_rate
from pipesim.cli.options import no_progress_option, set_option
from pipesim.cli.output import (
    FIGURE_SUFFIXES,
    Output,
    UserError,
    check_outputs,
    format_option,
    note,
    output_format,
    scenario_inputs,
    user_errors,
    write_outputs,
)
from pipesim.cli.progress import open_ended_bar, progress_bar
from pipesim.cli.render.serve import render_serve, serve_files, serve_notes
from pipesim.scenario.serving import load_serving, run_serving

FORMATS = ("table", "json", "csv")


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
@click.option(
    "--max-rate",
    is_flag=True,
    help="Search for the highest arrival rate that meets serving.slo at its percentile "
    "(bisection over runs with the workload's seed); report the run at that rate.",
)
@no_progress_option
@user_errors
def serve_command(
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
        inputs=scenario_inputs(scenario, overrides),
    )
    fmt = output_format(fmt, output, FORMATS)
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
    for text in serve_notes(run):
        note(text)
    files = serve_files(loaded, run, requests_path, trace_path, plot_path)
    write_outputs([*files, (output, render_serve(run, search, fmt))])
