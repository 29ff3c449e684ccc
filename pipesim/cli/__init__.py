"""The command line: click commands that parse, call one library function and render."""

from pipesim.cli.commands import main

__all__ = ["main"]
