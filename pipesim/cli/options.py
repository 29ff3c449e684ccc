"""Options several commands share, described once so every command says the same."""

from __future__ import annotations

import click

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
