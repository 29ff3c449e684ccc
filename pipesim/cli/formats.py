"""The report format of a command: ``--format``, or what the ``-o`` file's suffix names."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import click

from pipesim.cli.output import UserError, suffix_of

SUFFIX_FORMATS = {".json": "json", ".csv": "csv"}  # the report format an -o suffix implies


def format_option(choices: Sequence[str]) -> Callable:
    """``--format``, whose default is the first choice or what the ``-o`` suffix implies
    (``output_format``)."""
    implied = [f for f in SUFFIX_FORMATS.values() if f in choices]
    by_suffix = f", or {' / '.join(implied)} for an -o file of that suffix" if implied else ""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(list(choices)),
        default=None,
        help=f"Report format  [default: {choices[0]}{by_suffix}]",
    )


def output_format(fmt: str | None, output: str | None, choices: Sequence[str]) -> str:
    """The report format: ``fmt`` when given, else the one the ``-o`` file's suffix names
    (``.json``, ``.csv`` where the command has it), else the first choice (the table).
    UserError when the suffix contradicts an explicit ``--format``."""
    suffix = suffix_of(output) if output and output != "-" else ""
    implied = SUFFIX_FORMATS.get(suffix)
    implied = implied if implied in choices else None
    if fmt is None:
        return implied or choices[0]
    if implied is not None and implied != fmt:
        raise UserError(
            f"-o {output}: a {suffix} file, but --format {fmt}; "
            f"drop --format or name a file that suits {fmt}"
        )
    return fmt
