"""The command line: one module per command, each of which parses its options, calls one
library function and hands the result to ``pipesim.cli.render``; ``pipesim.cli.output``
writes every byte. This module assembles them into the ``pipesim`` group, whose class
(``pipesim.cli.options.PipesimGroup``) shows every usage error as one line.

The process is ours here, so this is where the cyclic garbage collector is paused for the
whole of a command (``pipesim.cli.gc_pause``); the library leaves it alone.
"""

import click

from pipesim.cli.calibrate import COMMANDS as CALIBRATION_COMMANDS
from pipesim.cli.compare import compare_command
from pipesim.cli.explain import explain_command
from pipesim.cli.gc_pause import no_cyclic_gc
from pipesim.cli.options import PipesimGroup
from pipesim.cli.plan import plan_command
from pipesim.cli.run import run_command
from pipesim.cli.schedules import schedules_command
from pipesim.cli.serve import serve_command
from pipesim.cli.sweep import sweep_command
from pipesim.cli.validate import validate_command


@click.group("pipesim", cls=PipesimGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pipesim")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Simulate pipeline-parallel schedules and show where the time goes."""
    ctx.with_resource(no_cyclic_gc())


# Every command, each defined in its own module.
for command in (
    run_command,
    validate_command,
    schedules_command,
    compare_command,
    sweep_command,
    explain_command,
    *CALIBRATION_COMMANDS,  # profile, import-trace, crosscheck, fit: torch only when run
    plan_command,
    serve_command,
):
    main.add_command(command)

__all__ = ["main"]
