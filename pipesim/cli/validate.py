"""``pipesim validate``: check a scenario without simulating it.

Parse, call ``pipesim.analysis.validation.validate_scenario``, render
(``pipesim.cli.render.listing``).
"""

from __future__ import annotations

import click

from pipesim.analysis.validation import validate_scenario
from pipesim.cli.formats import format_option, output_format
from pipesim.cli.options import set_option
from pipesim.cli.output import note, user_errors, write_outputs
from pipesim.cli.render.listing import render_validation, validation_notes

FORMATS = ("table", "json")


@click.command("validate")
@click.argument("scenario")
@set_option
@format_option(FORMATS)
@user_errors
def validate_command(scenario, overrides, fmt) -> None:
    """Check SCENARIO without simulating: everything pipesim run checks (schema, schedule
    constraints, costs) and, with a serving section, everything pipesim serve checks (the
    KV cache the weights leave room for, replicas on one node). Memory is flagged as run
    flags it: OOM where a device's static memory, its peak activations (from the order it
    runs its actions) and the runtime's share (hardware.runtime_bytes, fragmentation) pass
    the GPU's memory less hardware.memory_headroom; that is a flag, not an error (exit 0)."""
    validation = validate_scenario(scenario, overrides)
    for text in validation_notes(validation):
        note(text)
    write_outputs([("-", render_validation(validation, output_format(fmt, None, FORMATS)))])
