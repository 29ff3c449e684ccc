"""The ``--html`` option several commands share: the interactive report, one file.

The report is drawn with plotly, an optional extra: where it is missing, a command that
was asked for a report says so in one line before anything runs (exit code 2).
"""

from __future__ import annotations

import click

from pipesim.cli.output import Output, UserError
from pipesim.plot.html.page import INSTALL_HINT, plotly_missing

HTML_SUFFIXES = (".html", ".htm")

html_option = click.option(
    "--html",
    "html_path",
    metavar="PATH",
    help="The interactive report (.html): one self-contained file that opens offline, "
    f"zooms and hovers (needs plotly: {INSTALL_HINT}).",
)


def html_output(path: str | None, option: str = "--html", stdout: bool = False) -> Output:
    """The report's output, for ``check_outputs``."""
    return Output(option, path, HTML_SUFFIXES, stdout=stdout)


def check_html(path: str | None, option: str = "--html") -> None:
    """UserError where a report is asked for and plotly cannot be imported."""
    if path is not None and plotly_missing():
        raise UserError(f"{option} {path}: the interactive report needs plotly: {INSTALL_HINT}")
