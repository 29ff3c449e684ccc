"""``pipesim run``: simulate one scenario and show its report.

Parse, call ``pipesim.analysis.run.run_scenario``, render (``pipesim.cli.render.run``).
Every output path is checked before anything runs, and nothing is written unless the
whole run succeeded (``pipesim.cli.output``).
"""

from __future__ import annotations

import click

from pipesim.analysis.run import run_scenario
from pipesim.cli.fallback import say_if_uncompiled
from pipesim.cli.formats import format_option, output_format
from pipesim.cli.html import check_html, html_option, html_output
from pipesim.cli.options import (
    evaluator_option,
    no_progress_option,
    runs_option,
    seed_option,
    set_option,
)
from pipesim.cli.output import (
    FIGURE_SUFFIXES,
    Output,
    check_outputs,
    note,
    scenario_inputs,
    user_errors,
    write_outputs,
)
from pipesim.cli.progress import open_ended_bar, progress_bar
from pipesim.cli.render.run import RENDERERS, run_files
from pipesim.scenario.build import load_scenario


@click.command("run")
@click.argument("scenario")
@set_option
@format_option(list(RENDERERS))
@click.option(
    "-o", "--output", default="-", metavar="PATH|-", help="Write the report here (default: stdout)."
)
@click.option(
    "--gantt", metavar="PATH", help="Gantt chart (.png, .svg, .pdf); memory over time under it."
)
@click.option(
    "--trace",
    "trace_path",
    metavar="PATH",
    help="Chrome trace JSON for Perfetto (.json; .json.gz: gzipped).",
)
@click.option("--trace-csv", metavar="PATH", help="Every action and transfer with times, as CSV.")
@click.option(
    "--schedule-csv", metavar="PATH", help="Export the schedule in torch's compute-only CSV format."
)
@html_option
@runs_option
@seed_option
@click.option(
    "--critical-path",
    is_flag=True,
    help="Add the critical path and idle time per cause to the report; outline it on --gantt.",
)
@evaluator_option
@no_progress_option
@user_errors
def run_command(
    scenario,
    overrides,
    fmt,
    output,
    gantt,
    trace_path,
    trace_csv,
    schedule_csv,
    html_path,
    runs,
    seed,
    critical_path,
    evaluator,
    no_progress,
) -> None:
    """Simulate SCENARIO and print its report.

    With --runs N, also run a Monte Carlo study of N random steps under the scenario's
    variability section and report makespan and bubble fraction percentiles (p50, p90,
    p99); the same --seed gives the same output.
    """
    check_outputs(
        Output("-o", output, stdout=True),
        Output("--gantt", gantt, FIGURE_SUFFIXES),
        Output("--trace", trace_path, (".json", ".gz")),
        Output("--trace-csv", trace_csv, (".csv",)),
        Output("--schedule-csv", schedule_csv, (".csv",)),
        html_output(html_path),
        inputs=scenario_inputs(scenario, overrides),
    )
    check_html(html_path)
    fmt = output_format(fmt, output, list(RENDERERS))
    with open_ended_bar("candidate", "schedule search", disabled=no_progress) as searching:
        loaded = load_scenario(scenario, overrides, searching)
    with progress_bar(runs or 0, "run", "Monte Carlo", disabled=no_progress) as progress:
        result = run_scenario(
            loaded,
            runs=runs,
            seed=seed,
            critical_path=critical_path,
            progress=progress,
            evaluator=evaluator,
        )
    for text in result.notes:
        note(text)
    files = run_files(result, gantt, trace_path, trace_csv, schedule_csv, html_path)
    write_outputs([*files, (output, RENDERERS[fmt](result))])
    if evaluator == "fast":
        say_if_uncompiled()
