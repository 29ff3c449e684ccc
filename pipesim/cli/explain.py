"""``pipesim explain``: the critical path of one scenario, and why each device idles.

Parse, call ``pipesim.analysis.run.explain_scenario``, render
(``pipesim.cli.render.explain``).
"""

from __future__ import annotations

import click

from pipesim.analysis.run import explain_scenario
from pipesim.cli.formats import format_option, output_format
from pipesim.cli.options import WholeNumber, set_option
from pipesim.cli.output import (
    Output,
    check_outputs,
    scenario_inputs,
    user_errors,
    write_outputs,
)
from pipesim.cli.render.explain import render_explain
from pipesim.scenario.build import load_scenario

FORMATS = ("text", "json")


@click.command("explain")
@click.argument("scenario")
@set_option
@format_option(FORMATS)
@click.option(
    "--max-gaps",
    type=WholeNumber(min=0),
    default=40,
    show_default=True,
    help="Sentences to print per device at most (text format).",
)
@click.option("-o", "--output", default="-", metavar="PATH|-")
@user_errors
def explain_command(scenario, overrides, fmt, max_gaps, output) -> None:
    """Say where SCENARIO's time goes: the critical path, and why each device idles."""
    check_outputs(Output("-o", output, stdout=True), inputs=scenario_inputs(scenario, overrides))
    fmt = output_format(fmt, output, FORMATS)
    result = explain_scenario(load_scenario(scenario, overrides))
    write_outputs([(output, render_explain(result, fmt, max_gaps))])
