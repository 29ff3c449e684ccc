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
runs_option = click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=None,
    help="Monte Carlo: simulate this many random steps under the scenario's variability.",
)
seed_option = click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the Monte Carlo study."
)
jobs_option = click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Local worker processes (default: one per CPU).",
)
executor_option = click.option(
    "--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True
)
scheduler_option = click.option(
    "--scheduler", metavar="tcp://HOST:PORT", help="Dask scheduler (--executor dask)."
)
