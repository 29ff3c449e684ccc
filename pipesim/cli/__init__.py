"""The command line: one module per command, each of which parses its options, calls one
library function and hands the result to ``pipesim.cli.render``; ``pipesim.cli.output``
writes every byte. This module assembles them into the ``pipesim`` group, whose class
(``pipesim.cli.options.PipesimGroup``) shows every usage error as one line.

A command's module is imported when that command runs (or when help lists them all), so
``pipesim run`` pays for what a run needs and not for the planner, the serving simulator
or the calibration harness.

The process is ours here, so this is where the cyclic garbage collector is paused for the
whole of a command (``pipesim.cli.gc_pause``); the library leaves it alone.
"""

import importlib

import click

from pipesim.cli.gc_pause import no_cyclic_gc
from pipesim.cli.options import PipesimGroup

# Every command, in the order help lists them: its name, and the module and attribute
# that define it.
COMMANDS = {
    "run": ("pipesim.cli.run", "run_command"),
    "report": ("pipesim.cli.report", "report_command"),
    "validate": ("pipesim.cli.validate", "validate_command"),
    "schedules": ("pipesim.cli.schedules", "schedules_command"),
    "compare": ("pipesim.cli.compare", "compare_command"),
    "sweep": ("pipesim.cli.sweep", "sweep_command"),
    "explain": ("pipesim.cli.explain", "explain_command"),
    # profile, import-trace, crosscheck, fit: torch only when run
    "profile": ("pipesim.cli.calibrate", "profile_command"),
    "import-trace": ("pipesim.cli.calibrate", "import_trace_command"),
    "crosscheck": ("pipesim.cli.calibrate", "crosscheck_command"),
    "fit": ("pipesim.cli.calibrate", "fit_command"),
    "plan": ("pipesim.cli.plan", "plan_command"),
    "serve": ("pipesim.cli.serve", "serve_command"),
}


class LazyGroup(PipesimGroup):
    """The ``pipesim`` group, whose commands are imported by name when first looked up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, attribute = COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return self.commands.get(cmd_name)


@click.group("pipesim", cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pipesim")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Simulate pipeline-parallel schedules and show where the time goes."""
    ctx.with_resource(no_cyclic_gc())


__all__ = ["COMMANDS", "main"]
