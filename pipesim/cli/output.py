"""The command line's edge: user mistakes as one line and exit code 2, output files
written whole or not at all (a temporary file renamed into place)."""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import click

from pipesim.scenario.build import ScenarioError
from pipesim.schedules.ir import ScheduleError
from pipesim.sim.engine import DeadlockError

EXIT_USAGE = 2


class UserError(Exception):
    """Bad input: reported as one line, exit code 2."""


USER_ERRORS: tuple[type[BaseException], ...] = (
    UserError,
    ScenarioError,
    ScheduleError,
    DeadlockError,
)


def user_errors(command: Callable, also: tuple[type[BaseException], ...] = ()) -> Callable:
    """Turn every user mistake into one line on stderr and exit code 2.

    ``also`` adds a command family's own error types (e.g. the calibration commands')."""
    caught = USER_ERRORS + also

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except caught as exc:
            text = str(exc)
            head, _, rest = text.partition("\n")
            click.echo(f"pipesim: error: {head}", err=True)
            if rest:
                click.echo(rest, err=True)  # the step x rank grid with the bad entry marked
            sys.exit(EXIT_USAGE)

    return wrapper


# ---------------------------------------------------------------------------
# Output files: whole or not at all


def write_atomic(path: str, write: Callable[[str], None]) -> None:
    """Call ``write(tmp_path)``, then move the finished file into place."""
    target = Path(path)
    if target.parent and not target.parent.exists():
        raise UserError(f"{path}: directory {target.parent} does not exist")
    fd, tmp = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=target.suffix, dir=target.parent or "."
    )
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str, text: str) -> None:
    if path == "-":
        click.echo(text, nl=not text.endswith("\n"))
        return
    write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def check_suffix(path: str | None, option: str, allowed: tuple[str, ...]) -> None:
    if path is not None and path != "-" and Path(path).suffix.lower() not in allowed:
        raise UserError(f"{option} {path}: unsupported file type; allowed: {', '.join(allowed)}")
