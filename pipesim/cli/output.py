"""The command line's edge: user mistakes as one line and exit code 2, and output files.

Output files follow three rules (DESIGN.md, "Errors"):

* every output path is checked before any output is written (a missing folder, a folder
  given as a file, a wrong suffix, two options naming one file): one line, exit 2, and
  nothing written or overwritten;
* a regular file is written whole or not at all: a temporary file in the same folder,
  renamed into place, with the mode of the file it replaces or, for a new file, the mode
  the user's umask gives;
* an existing device or FIFO (``-o /dev/null``) is written in place, never replaced, and a
  symlink is followed: its target is written, the link stays.
"""

from __future__ import annotations

import functools
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click

from pipesim.analysis.compare import CompareError
from pipesim.analysis.sweep import SweepError
from pipesim.plot.figures import save_figure
from pipesim.scenario.build import ScenarioError
from pipesim.schedules.ir import ScheduleError
from pipesim.sim.engine import DeadlockError

EXIT_USAGE = 2
MAX_LINE = 300  # characters of an error line, "pipesim: error: " included
MAX_PICTURE_LINES = 40  # lines of a step x rank grid under an error line
ERROR_MARK = "<-- ERROR HERE"
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")

Files = list[tuple[str | None, str | bytes]]  # (path or None: skipped; "-": stdout, content)


class UserError(Exception):
    """Bad input: reported as one line, exit code 2."""


USER_ERRORS: tuple[type[BaseException], ...] = (
    UserError,
    ScenarioError,
    ScheduleError,
    DeadlockError,
    SweepError,
    CompareError,
)


def user_errors(command: Callable, also: tuple[type[BaseException], ...] = ()) -> Callable:
    """Turn every user mistake into one line on stderr and exit code 2.

    The line is capped at ``MAX_LINE`` characters; a step x rank grid picture that follows
    it (invalid schedules, deadlocks) keeps its marked rows, at most ``MAX_PICTURE_LINES``.
    ``also`` adds a command family's own error types (e.g. the calibration commands')."""
    caught = USER_ERRORS + also

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except caught as exc:
            head, _, rest = str(exc).partition("\n")
            error(head)
            if rest.strip():
                click.echo("\n".join(cap_picture(rest.splitlines())), err=True)
            sys.exit(EXIT_USAGE)

    return wrapper


def error(text: str) -> None:
    """An error line on stderr, for the caller to exit on (``user_errors`` does it for user
    mistakes)."""
    click.echo(cap_line(f"pipesim: error: {text}"), err=True)


def note(text: str) -> None:
    """A line the user should read next to the numbers, on stderr."""
    click.echo(cap_line(f"pipesim: note: {text}"), err=True)


def cap_line(line: str, limit: int = MAX_LINE) -> str:
    """``line`` cut to ``limit`` characters, saying how much was left out; a grid row keeps
    its ``<-- ERROR HERE`` note."""
    if len(line) <= limit:
        return line
    mark = line.find(ERROR_MARK)
    tail = line[mark:][: limit // 2] if mark > 0 else ""
    keep = max(limit - len(tail) - 40, 20)
    return f"{line[:keep]} ... ({len(line) - keep - len(tail)} characters left out) {tail}".rstrip()


def cap_picture(lines: list[str]) -> list[str]:
    """The grid's header, its marked rows with two rows around each, and ``...`` between."""
    if len(lines) <= MAX_PICTURE_LINES:
        return [cap_line(line) for line in lines]
    marked = [i for i, line in enumerate(lines) if ERROR_MARK in line]
    wanted = {0} | {j for i in marked for j in range(i - 2, i + 3) if 0 <= j < len(lines)}
    keep = sorted(wanted)[:MAX_PICTURE_LINES] if marked else list(range(MAX_PICTURE_LINES))
    out, previous = [], -1
    for i in keep:
        if i > previous + 1:
            out.append("...")
        out.append(cap_line(lines[i]))
        previous = i
    if previous < len(lines) - 1:
        out.append(f"... ({len(lines) - 1 - previous} more lines)")
    return out


# ---------------------------------------------------------------------------
# Output paths: all checked first


@dataclass(frozen=True, slots=True)
class Output:
    """An output a command may write: the option that names it, the path, the suffixes
    allowed (empty: any), and whether ``-`` means standard output."""

    option: str
    path: str | None
    suffixes: tuple[str, ...] = ()
    stdout: bool = False

    @property
    def is_file(self) -> bool:
        return self.path is not None and not (self.stdout and self.path == "-")


def check_outputs(*outputs: Output) -> None:
    """Raise UserError naming the first output that could not be written; write nothing."""
    seen: dict[str, str] = {}
    for output in outputs:
        if not output.is_file:
            continue
        target = _check_one(output)
        if target in seen and not _is_special(target):
            raise UserError(
                f"{output.option} {output.path}: also named by {seen[target]}; "
                "give each output its own file"
            )
        seen[target] = output.option


def _check_one(output: Output) -> str:
    """The real path ``output`` will write (symlinks followed), after every check."""
    path, where = output.path, f"{output.option} {output.path}"
    if not path:
        raise UserError(f"{output.option}: an empty path; name a file")
    if path.endswith(("/", os.sep)):
        raise UserError(f"{where}: ends with '/', a directory; name a file")
    if output.suffixes and Path(path).suffix.lower() not in output.suffixes:
        raise UserError(f"{where}: unsupported file type; allowed: {', '.join(output.suffixes)}")
    try:
        target = os.path.realpath(path)
        if os.path.isdir(target):
            raise UserError(f"{where}: is a directory; name a file in it")
        folder = os.path.dirname(target)
        if not os.path.isdir(folder):
            shown = Path(path).parent if not Path(path).parent.is_dir() else folder
            raise UserError(f"{where}: directory {shown} does not exist")
        exists = _stat(target) is not None
    except (OSError, ValueError) as exc:
        raise UserError(f"{where}: {getattr(exc, 'strerror', None) or exc}") from None
    if exists and not os.access(target, os.W_OK):
        raise UserError(f"{where}: not writable")
    if not exists and not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"{where}: cannot create a file in {folder}")
    return target


def check_folder(option: str, path: str | None) -> None:
    """A folder an output goes into (created if missing): it must not be a file."""
    if path is not None and os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"{option} {path}: not a directory")


# ---------------------------------------------------------------------------
# Writing


def write_outputs(files: Files) -> None:
    """Write each ``(path, content)`` (path None: skipped; ``-``: standard output), all
    content rendered before the first byte is written."""
    for path, content in files:
        if path is not None:
            write_file(path, content)


def write_file(path: str, content: str | bytes) -> None:
    """Write ``content`` to ``path`` (``-``: standard output) by the rules above."""
    if path == "-":
        text = content if isinstance(content, str) else content.decode("utf-8")
        click.echo(text, nl=not text.endswith("\n"))
        return
    data = content.encode("utf-8") if isinstance(content, str) else content
    target = os.path.realpath(path)
    info = _stat(target)
    if info is not None and not stat.S_ISREG(info.st_mode):
        with open(target, "wb") as out:  # a device or FIFO: into it, never over it
            out.write(data)
        return
    mode = stat.S_IMODE(info.st_mode) if info is not None else 0o666 & ~_umask()
    folder, name = os.path.split(target)
    handle, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), mode)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def figure_bytes(figure, suffix: str) -> bytes:
    """A matplotlib figure rendered as ``suffix`` (``.png``, ``.svg``, ``.pdf``), in memory."""
    with tempfile.TemporaryDirectory(prefix="pipesim-") as folder:
        path = os.path.join(folder, f"figure{suffix.lower()}")
        save_figure(figure, path)
        return Path(path).read_bytes()


def suffix_of(path: str) -> str:
    return Path(path).suffix.lower()


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _is_special(path: str) -> bool:
    info = _stat(path)
    return info is not None and not stat.S_ISREG(info.st_mode)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
