"""``pipesim schedules``: every schedule a scenario may name, with its constraints."""

from __future__ import annotations

import click

from pipesim.cli.output import write_outputs
from pipesim.cli.render.listing import render_schedules
from pipesim.schedules import list_schedules
from pipesim.search import AUTO_POLICIES, SUMMARIES

SEARCH_LIMIT = "pipeline.memory_limit_bytes per device (default: what 1f1b holds)"
FROM_FILE = ("csv", "a schedule read from pipeline.schedule_file (torch CSV)", "any valid schedule")


@click.command("schedules")
def schedules_command() -> None:
    """List every schedule policy with its constraints."""
    searched = [
        (name, SUMMARIES[name], f"virtual_stages = {chunks}; {SEARCH_LIMIT}")
        for name, chunks in AUTO_POLICIES.items()
    ]
    write_outputs([("-", render_schedules([*list_schedules(), *searched, FROM_FILE]))])
