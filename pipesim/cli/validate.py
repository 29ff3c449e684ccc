"""``pipesim validate``: check a scenario (schema, schedule constraints, costs) without
simulating it."""

from __future__ import annotations

import click

from pipesim.cli.options import set_option
from pipesim.cli.output import user_errors, write_outputs
from pipesim.cli.render.listing import render_validation
from pipesim.scenario.build import load_scenario


@click.command("validate")
@click.argument("scenario")
@set_option
@user_errors
def validate_command(scenario, overrides) -> None:
    """Check SCENARIO (schema, schedule constraints, costs) without simulating."""
    loaded = load_scenario(scenario, overrides)
    write_outputs([("-", render_validation(scenario, loaded.schedule))])
