"""Options several commands share, described once so every command says the same."""

from __future__ import annotations

import click

from pipesim.sim.fast import Evaluator

set_option = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY.PATH=VALUE",
    help="Override a scenario key (value parsed as YAML), e.g. --set pipeline.microbatches=16.",
)
no_progress_option = click.option(
    "--no-progress", is_flag=True, help="No progress bar on stderr (drawn only on a terminal)."
)
evaluator_option = click.option(
    "--evaluator",
    type=click.Choice([evaluator.value for evaluator in Evaluator]),
    default="auto",
    show_default=True,
    help="fast: the NumPy sweep (deterministic scenarios); simpy: the event engine; "
    "auto: fast wherever it is exact. The report says which ran.",
)
