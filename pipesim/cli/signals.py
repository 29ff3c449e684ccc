"""Signals at the command line's edge: a command stopped by Ctrl-C, ``kill`` or a closed
terminal cleans up as a failed one does, then exits as a stopped program should.

While a command runs, a terminating signal that can be caught (SIGINT, SIGTERM, SIGHUP,
SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM) becomes an exception in the main thread, so every
``finally`` on the way out runs: the temporaries beside the outputs are removed and a pool
of worker processes is stopped with its workers (``pipesim.analysis.executor``). The
command then says so in one line on stderr and exits with 128 + the signal's number:

    pipesim: interrupted                  (Ctrl-C, exit code 130)
    pipesim: terminated by SIGTERM        (exit code 143)

Called as the program itself (``pipesim ...``, ``python -m pipesim``), a stopped command
leaves at once once it has cleaned up and said so (``pipesim.cli.output.leave_now``): the interpreter's own
teardown, which frees every object a large plan or sweep built one by one, took longer
than the work the signal cut short.

A second signal while cleaning up is ignored, so cleaning up is not cut short; a signal
the process started with ignored (``nohup``, a background job) stays ignored. ``held()``
makes a block that must not be cut in two (the renames of an all-or-nothing write) wait:
a signal that comes inside it acts when it ends.

``on_stop(finish)`` lets a command keep what it had finished when a signal stops it
(``pipesim plan`` and ``pipesim sweep`` with ``--partial-on-interrupt``): ``finish`` runs
with the signal's number, then the signal goes on stopping the command. Signals that come
while ``finish`` runs are ignored, as in any clean-up.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

CAUGHT_NAMES = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM")
CAUGHT = tuple(getattr(signal, name) for name in CAUGHT_NAMES if hasattr(signal, name))


class Stopped(BaseException):
    """A signal stopped the command. Not an ``Exception``: nothing that handles errors may
    catch it by accident; only the command line's edge (``exits_on_signals``) does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class StoppedExit(SystemExit):
    """The exit of a command a signal stopped, once it has cleaned up (code 128 + the
    signal's number)."""


class _Receiver:
    """The one record of the signals this process has received while a command runs:
    the first one is raised (``KeyboardInterrupt`` for SIGINT, as Python does, else
    ``Stopped``); the rest are ignored. Inside ``held()`` the first waits for its end."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.holding = 0
        self.deferred = False

    def handle(self, signum: int, frame) -> None:
        if self.received is not None:
            return  # cleaning up after the first one already
        self.received = signum
        if self.holding:
            self.deferred = True
            return
        raise_for(signum)

    def release(self) -> None:
        self.holding -= 1
        if self.holding == 0 and self.deferred:
            self.deferred = False
            raise_for(self.received)


_receiver = _Receiver()


def raise_for(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Stopped(signum)


@contextmanager
def signals_raise() -> Iterator[None]:
    """Inside the block, each signal of ``CAUGHT`` is raised in the main thread (see the
    module's docstring); the handlers the process had come back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _receiver.received, _receiver.deferred = None, False
    previous = {}
    for signum in CAUGHT:
        handler = signal.getsignal(signum)
        if handler is not signal.SIG_IGN and handler is not None:
            previous[signum] = signal.signal(signum, _receiver.handle)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def held() -> Iterator[None]:
    """A block no signal cuts in two: one that comes inside it is raised when it ends."""
    _receiver.holding += 1
    try:
        yield
    finally:
        _receiver.release()


@contextmanager
def interrupts_pass_click() -> Iterator[None]:
    """Ctrl-C inside the block as ``Stopped``, which click lets through (it would print
    ``Aborted!`` and exit 1 for a ``KeyboardInterrupt``)."""
    try:
        yield
    except KeyboardInterrupt:
        raise Stopped(signal.SIGINT) from None


@contextmanager
def on_stop(finish: Callable[[int], None] | None) -> Iterator[None]:
    """Where a signal stops the block, ``finish(signum)`` (if given) before it goes on."""
    try:
        yield
    except KeyboardInterrupt:
        if finish is not None:
            finish(signal.SIGINT)
        raise
    except Stopped as stopped:
        if finish is not None:
            finish(stopped.signum)
        raise
