"""``pipesim report``: a scenario's interactive report, one self-contained HTML file.

Parse, run the scenario as ``pipesim run`` does (``pipesim.analysis.run.run_scenario``) or,
for a scenario with a ``serving:`` section, as ``pipesim serve`` does
(``pipesim.scenario.serving.run_serving``), and draw the page (``pipesim.plot.html``, through the renderers of run and serve).
The output path is checked, and plotly looked for, before anything runs; the file is
written whole or not at all (``pipesim.cli.output``).
"""

from __future__ import annotations

import click

from pipesim.analysis.run import run_scenario
from pipesim.analysis.serving_sweep import is_serving
from pipesim.cli.html import check_html, html_output
from pipesim.cli.options import evaluator_option, no_progress_option, set_option
from pipesim.cli.output import check_outputs, note, scenario_inputs, user_errors, write_outputs
from pipesim.cli.progress import open_ended_bar, progress_bar
from pipesim.cli.render.run import run_files
from pipesim.cli.render.serve import serve_files, serve_notes
from pipesim.scenario.build import apply_overrides, load_scenario, read_mapping
from pipesim.scenario.serving import load_serving, run_serving


@click.command("report")
@click.argument("scenario")
@set_option
@click.option(
    "-o",
    "--output",
    required=True,
    metavar="PATH|-",
    help="The report (.html; -: standard output).",
)
@evaluator_option
@no_progress_option
@user_errors
def report_command(scenario, overrides, output, evaluator, no_progress) -> None:
    """Write SCENARIO's interactive report: one HTML file that opens offline.

    A training scenario gives its step: the headline numbers beside their closed forms,
    a zoomable Gantt chart (hover over a box for what ran and what released it) with the
    critical path, memory per device against the GPU's capacity, and idle time by cause.
    A scenario with a serving: section gives its serving run: iterations per pipeline
    stage, latency CDFs with the SLO, batch size and KV use over time, and every request.
    """
    check_outputs(
        html_output(output, "-o", stdout=True), inputs=scenario_inputs(scenario, overrides)
    )
    check_html(output, "-o")
    if is_serving(apply_overrides(read_mapping(scenario), list(overrides))):
        loaded = load_serving(scenario, overrides)
        total = len(loaded.requests)
        with progress_bar(total, "request", "serving", disabled=no_progress) as progress:
            run = run_serving(loaded, progress)
        for text in serve_notes(run):
            note(text)
        write_outputs(serve_files(loaded, run, None, None, None, html=output))
        return
    with open_ended_bar("candidate", "schedule search", disabled=no_progress) as searching:
        loaded = load_scenario(scenario, overrides, searching)
    result = run_scenario(loaded, evaluator=evaluator)
    for text in result.notes:
        note(text)
    write_outputs(run_files(result, None, None, None, None, html=output))
