"""Options several commands share, described once so every command says the same."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import click

from pipesim.cli.output import error, exits_on_signals, leave_now
from pipesim.cli.signals import StoppedExit, interrupts_pass_click, signals_raise
from pipesim.sim.fast import Evaluator

# Click >= 8.2 shows a bare ``pipesim`` (no command) as a usage error that prints the help;
# it stays what it is. Click 8.1 exits 0 there instead, raising nothing.
_HELP_ERRORS = tuple(
    kind for kind in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if kind is not None
)


class WholeNumber(click.IntRange):
    """click's IntRange over ASCII digits only: Python's int() also reads '٣', '１２' and
    '1_000' as numbers, which a user who typed them did not mean."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not (value.isascii() and "_" not in value):
            self.fail(f"{value!r} is not a whole number in ASCII digits", param, ctx)
        return super().convert(value, param, ctx)


class RealNumber(click.FloatRange):
    """click's FloatRange over ASCII text only, for the same reason as ``WholeNumber``."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not (value.isascii() and "_" not in value):
            self.fail(f"{value!r} is not a number in ASCII digits", param, ctx)
        return super().convert(value, param, ctx)


set_option = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY.PATH=VALUE",
    help="Override a scenario key (value parsed as YAML), e.g. --set pipeline.microbatches=16.",
)
no_progress_option = click.option(
    "--no-progress", is_flag=True, help="No progress bar on stderr (drawn only on a terminal)."
)
evaluator_option = click.option(
    "--evaluator",
    type=click.Choice([evaluator.value for evaluator in Evaluator]),
    default="auto",
    show_default=True,
    help="fast: the NumPy sweep (deterministic scenarios); simpy: the event engine; "
    "auto: fast wherever it is exact. The report says which ran.",
)
runs_option = click.option(
    "--runs",
    type=WholeNumber(min=1),
    default=None,
    help="Monte Carlo: simulate this many random steps under the scenario's variability.",
)
seed_option = click.option(
    "--seed",
    type=WholeNumber(min=0),
    default=0,
    show_default=True,
    help="Seed of the Monte Carlo study (a whole number >= 0).",
)
jobs_option = click.option(
    "--jobs",
    type=WholeNumber(min=1),
    default=None,
    help="Local worker processes (default: one per CPU; never more than the CPUs).",
)
executor_option = click.option(
    "--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True
)
scheduler_option = click.option(
    "--scheduler", metavar="tcp://HOST:PORT", help="Dask scheduler (--executor dask)."
)


def worker_count(jobs: int | None) -> tuple[int, str | None]:
    """The local worker processes for ``--jobs`` (None: one per CPU), at most the CPUs of
    this machine, and the note to print when ``--jobs`` asked for more; the caller prints it
    once its input is known to be good, so a note never comes before an error line."""
    cpus = os.cpu_count() or 1
    if jobs is None:
        return cpus, None
    if jobs > cpus:
        return cpus, f"--jobs {jobs}: capped at {cpus}, the CPUs of this machine"
    return jobs, None


class OptionError(click.UsageError):
    """A usage error shown as pipesim shows every user error: one ``pipesim: error:`` line
    (exit code 2), naming the option and what it allows, with where to find the help."""

    def show(self, file=None) -> None:
        error(self.message)


def one_line(exc: click.UsageError) -> OptionError:
    """``exc`` (a bad option value, a missing or unknown option or argument, an unknown
    command) as an ``OptionError``: its words on one line, then the help to read."""
    text = " ".join(_what_was_wrong(exc).split()).rstrip(".")
    if not text[1:2].isupper():  # "Invalid value" reads "invalid value"; "TRACES" stays
        text = text[:1].lower() + text[1:]
    where = exc.ctx.command_path if exc.ctx is not None else "pipesim"
    return OptionError(f"{text} (see '{where} --help')", ctx=exc.ctx)


def _what_was_wrong(exc: click.UsageError) -> str:
    if isinstance(exc, click.MissingParameter) or not isinstance(exc, click.BadParameter):
        return exc.format_message()
    if exc.param is None:
        return exc.format_message()
    if isinstance(exc.param, click.Option):
        name = max(exc.param.opts, key=len)
    else:
        name = exc.param.human_readable_name
    return f"{name}: {exc.message}"


class PipesimGroup(click.Group):
    """The ``pipesim`` group: every usage error click finds, in the group's own options or
    a command's, is one ``pipesim: error:`` line (``one_line``) instead of click's usage
    block. Help (``-h``, ``--help``, no command at all) is shown as click shows it.

    A signal that stops a command (Ctrl-C, SIGTERM, SIGHUP, ...) lets it clean up, then is
    one line and exit code 128 + its number (``pipesim.cli.signals``), not click's
    ``Aborted!`` and exit code 1; run on the process's own command line (no ``args``), it
    then ends the process at once (``leave_now``).

    So does a command of ``LEAVE_AT_ONCE`` that ends, on the process's own command line:
    its outputs are written and closed when it returns, it starts no other process, and
    the interpreter's teardown (every module and object freed one by one) only adds to
    the time a user waits (about 50 ms after a run of 10^6 actions)."""

    LEAVE_AT_ONCE = frozenset({"run"})
    _invoked: str | None = None

    def main(self, args=None, *rest, **kwargs):
        try:
            with signals_raise(), exits_on_signals():
                return super().main(args, *rest, **kwargs)
        except StoppedExit as stopped:
            if args is not None:  # called with arguments (a test, a script): not our process
                raise
            leave_now(stopped.code)  # the command line itself: no slow teardown
        except SystemExit as done:  # click's end of every command, error or not
            if args is None and self._invoked in self.LEAVE_AT_ONCE:
                if done.code is None or isinstance(done.code, int):
                    leave_now(done.code or 0)
            raise

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name, command, rest = super().resolve_command(ctx, args)
        self._invoked = name
        return name, command, rest

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        with interrupts_pass_click(), _one_line_usage_errors():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context):
        with interrupts_pass_click(), _one_line_usage_errors():
            return super().invoke(ctx)


@contextmanager
def _one_line_usage_errors() -> Iterator[None]:
    try:
        yield
    except (OptionError, *_HELP_ERRORS):
        raise
    except click.UsageError as exc:
        raise one_line(exc) from None
