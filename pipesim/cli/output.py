"""The command line's edge: user mistakes as one line and exit code 2, and output files.

Output files follow these rules (DESIGN.md, "Errors"):

* every output path is checked before anything runs (a missing folder, a folder given as a
  file, a wrong suffix, two options naming one file, an output that is one of the
  command's input files, by device and inode): one line, exit 2, and nothing written or
  overwritten;
* a command's regular files are written all or nothing: every one to a temporary file in
  its folder first, then all renamed into place, with the mode of the file each replaces
  or, for a new file, the mode the user's umask gives; a failure (a full disk) removes the
  temporaries, leaves the old files and is one line naming the path; a signal
  (``pipesim.cli.signals``) removes them too and never comes between two renames, and
  those of a writer killed outright go at the next write (``pipesim.cli.temporaries``);
* an existing device or FIFO (``-o /dev/null``) is written in place, never replaced, and a
  symlink is followed: its target is written, the link stays.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import click

from pipesim.analysis.errors import CompareError, SweepError
from pipesim.cli.signals import Stopped, StoppedExit, held
from pipesim.cli.temporaries import remove_stale, temporary_prefix
from pipesim.plot.save import save_figure
from pipesim.scenario.build import ScenarioError, apply_overrides, read_mapping
from pipesim.schedules.ir import ScheduleError
from pipesim.sim.engine import DeadlockError

EXIT_USAGE = 2
MAX_LINE = 300  # characters of an error line, "pipesim: error: " included
MAX_PICTURE_LINES = 40  # lines of a step x rank grid under an error line
ERROR_MARK = "<-- ERROR HERE"
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")
FILE_KEYS = ("trace_file", "profile", "schedule_file")  # scenario keys naming a file beside it

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


def nothing_ran(rows: Iterable[tuple[str, object]], noun: str) -> str | None:
    """Where no row of a table ran (each ``(label, error)`` holds an error), what to refuse
    with: the one reason they share, or the first row's; None where some row ran."""
    rows = [(label, error if isinstance(error, str) else "") for label, error in rows]
    if not rows or any(not error for _, error in rows):
        return None
    reasons = {error for _, error in rows}
    if len(reasons) == 1:
        return reasons.pop()
    label, error = rows[0]
    return f"none of the {len(rows)} {noun} ran; the first, {label}: {error}"


def error(text: str) -> None:
    """An error line on stderr, for the caller to exit on (``user_errors`` does it for user
    mistakes)."""
    click.echo(cap_line(f"pipesim: error: {text}"), err=True)


@contextmanager
def exits_on_signals() -> Iterator[None]:
    """A signal that stopped the block (``pipesim.cli.signals``) as one line on stderr and
    exit code 128 + its number."""
    try:
        yield
    except KeyboardInterrupt:
        _exit_stopped(signal.SIGINT)
    except Stopped as stopped:
        _exit_stopped(stopped.signum)


def _exit_stopped(signum: int) -> None:
    name = signal.Signals(signum).name
    text = "interrupted" if signum == signal.SIGINT else f"terminated by {name}"
    with contextlib.suppress(OSError):  # the terminal that would show it is gone (SIGHUP)
        click.echo(f"pipesim: {text}", err=True)
    raise StoppedExit(128 + signum)


def leave_now(code: int) -> None:
    """Flush, then end the process with ``code`` without the interpreter's teardown (a
    stopped command whose clean-up is done, or a ``run`` that ended; only the command
    line's entry calls it)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or terminal
            stream.flush()
    os._exit(code)


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


def check_outputs(*outputs: Output, inputs: Iterable[str | None] = ()) -> None:
    """Raise UserError naming the first output that could not be written, or that is one
    of the command's ``inputs`` (the same file by device and inode); write nothing."""
    seen: dict[str, str] = {}
    read = _file_ids(inputs)
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
        if (info := _stat(target)) is not None and (info.st_dev, info.st_ino) in read:
            source = read[(info.st_dev, info.st_ino)]
            raise UserError(
                f"{output.option} {output.path}: is the input file {source}; writing it "
                "would overwrite the input, name another file"
            )


def scenario_inputs(scenario: str | None, overrides: Iterable[str] = ()) -> tuple[str, ...]:
    """The scenario file and the files it names (a serving ``trace_file``, a ``profile``, a
    ``schedule_file``, relative to its folder), for ``check_outputs(inputs=...)``. A
    scenario that cannot be read names only itself: loading it reports the problem."""
    if scenario is None:
        return ()
    try:
        data = apply_overrides(read_mapping(scenario), list(overrides))
    except (ScenarioError, OSError, ValueError):
        return (scenario,)
    folder, named, stack = Path(scenario).parent, [scenario], [data]
    while stack:
        value = stack.pop()
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if key in FILE_KEYS and isinstance(item, str) and item:
                named.append(str(folder / item))
            elif isinstance(item, dict | list):
                stack.append(item)
    return tuple(named)


def _file_ids(paths: Iterable[str | None]) -> dict[tuple[int, int], str]:
    """(device, inode) of each regular file among ``paths``, symlinks followed."""
    ids = {}
    for path in paths:
        try:
            info = os.stat(path) if path and path != "-" else None
        except (OSError, ValueError):
            continue
        if info is not None and stat.S_ISREG(info.st_mode):
            ids.setdefault((info.st_dev, info.st_ino), str(path))
    return ids


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
    """Write each ``(path, content)`` (path None: skipped; ``-``: standard output), all or
    nothing: every regular file goes to a temporary first, devices and FIFOs are written in
    place, then every temporary is renamed over its file, then standard output is written.
    An OSError is a UserError naming the path; the temporaries are removed, old files kept."""
    staged: list[tuple[str, str]] = []  # (temporary, target)
    try:
        regular = [(p, c) for p, c in files if p not in (None, "-") and not _is_special(p)]
        for path, content in regular:
            staged.append((_write_temporary(path, content), os.path.realpath(path)))
        for path, content in files:
            if path not in (None, "-") and _is_special(path):
                _guarded(path, _write_in_place, path, content)
        with held():  # a signal waits until every file is in place
            while staged:
                temp, target = staged[0]
                _guarded(target, os.replace, temp, target)
                staged.pop(0)
    finally:
        for temp, _ in staged:
            Path(temp).unlink(missing_ok=True)
    for path, content in files:
        if path == "-":
            _guarded("standard output", _echo, content)


def write_file(path: str, content: str | bytes) -> None:
    """Write ``content`` to ``path`` (``-``: standard output) by the rules above."""
    write_outputs([(path, content)])


def _write_temporary(path: str, content: str | bytes) -> str:
    """``content`` in a new temporary file beside ``path``'s target, with the mode the
    target will have; the temporary's path."""
    target = os.path.realpath(path)
    info = _stat(target)
    mode = stat.S_IMODE(info.st_mode) if info is not None else 0o666 & ~_umask()
    folder, name = os.path.split(target)
    remove_stale(folder, name)
    prefix = temporary_prefix(name)
    handle, temp = _guarded(path, tempfile.mkstemp, prefix=prefix, suffix=".tmp", dir=folder)
    try:
        os.fchmod(handle, mode)
        _guarded(path, _write_all, handle, _as_bytes(content))
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    finally:
        os.close(handle)
    return temp


def _write_in_place(path: str, content: str | bytes) -> None:
    """A device or FIFO: written into, never replaced."""
    handle = os.open(os.path.realpath(path), os.O_WRONLY)
    try:
        _write_all(handle, _as_bytes(content))
    finally:
        os.close(handle)


def _write_all(handle: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(handle, view) :]


def _echo(content: str | bytes) -> None:
    text = content if isinstance(content, str) else content.decode("utf-8")
    click.echo(text, nl=not text.endswith("\n"))


def _guarded(where: str, action: Callable, *args, **kwargs):
    """``action(*args, **kwargs)``, an OSError (ENOSPC, EIO) turned into a UserError that
    names ``where``; a closed pipe on standard output is left to the caller."""
    try:
        return action(*args, **kwargs)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise UserError(f"{where}: {exc.strerror or exc}") from None


def _as_bytes(content: str | bytes) -> bytes:
    return content.encode("utf-8") if isinstance(content, str) else content


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
