"""Where a batch of independent jobs runs: in this process, in a pool of local processes,
or on a Dask cluster.

Sweeps, serving sweeps and the planner all have the same shape of work: many points,
each computed on its own, results gathered and put back in order by the caller. They cut
the points into chunks (a chunk is what one worker call computes, so per-call costs like
process start-up and pickling stay small), hand each chunk to ``work``, and gather the
lists that come back in whatever order the workers finish.

    rows = run_chunks(partial(run_chunk, base, source), points, split, jobs=2)

``split(items, workers)`` cuts the items for that many workers; ``work(chunk)`` returns
a list; ``progress(n)`` is called as ``n`` more results arrive. dask.distributed is an
optional extra, imported only when asked for.

Local workers never outlive the call: when it ends by an exception (a failed point, a
signal turned into one at the command line, Ctrl-C) they are killed, not waited for; on
Linux the kernel kills them when their parent dies, even by SIGKILL; and they ignore
Ctrl-C, which the terminal sends to every one of them, so only the caller reports it. The
terminating signals are blocked while a worker starts, until it has set its own handlers,
so a Ctrl-C that comes just as the pool forks finds no copy of the caller's handler in a
worker (which would print a traceback of its own). On Dask, an exception while the results
are gathered cancels every future of the call before the client is closed.

``into``: a list the results are appended to as they arrive (the one returned), so a caller
that a signal stops midway still holds every result that had come back.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import re
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager

EXECUTORS = ("local", "dask")
# blocked while a pool's workers start (see the module's docstring); the caller's own mask
# comes back as soon as they are started
STARTING_BLOCKED = frozenset(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM")
    if hasattr(signal, name)
)
PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies
CONNECT_TIMEOUT_S = 3  # an unreachable scheduler is one line after this long, not a hang

# tcp://HOST:PORT, HOST a name, an IPv4 address or a bracketed IPv6 one
_TCP = re.compile(r"tcp://(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):(\d{1,5})")
# the address dask gives an in-process cluster: inproc://IP/PID/N, valid in that process only
_INPROC = re.compile(r"inproc://[^/]+/(\d+)/\d+")

Split = Callable[[list, int], list[list]]


def run_chunks(
    work: Callable[[list], list],
    items: list,
    split: Split,
    *,
    jobs: int = 1,
    executor: str = "local",
    scheduler: str | None = None,
    progress: Callable[[int], None] | None = None,
    error: type[Exception] = ValueError,
    into: list | None = None,
    pool: KeptPool | None = None,
) -> list:
    """Every result of ``work`` over ``split(items, workers)``, in the order they arrive.

    ``jobs``: local processes (1: this process). ``executor="dask"``: the cluster at
    ``scheduler`` (``tcp://host:port``). A bad choice raises ``error`` with one line.
    ``into``: the list the results are appended to as they arrive (default: a new one).
    ``pool``: local workers kept across calls (``KeptPool``, started with this ``work``).
    """
    check_executor(executor, scheduler, error)
    results: list = [] if into is None else into
    if executor == "dask":
        return _on_dask(work, items, split, scheduler, progress, error, results)
    if jobs <= 1 or len(items) <= 1:
        for chunk in split(items, 1):
            done = work(chunk)
            results += done
            if progress is not None:
                progress(len(done))
        return results
    chunks = split(items, jobs)
    if pool is not None:
        return pool.run(chunks, progress, results)
    # no more processes than chunks: a fork-started pool starts all of its workers at once.
    # Each worker receives ``work`` once, when it starts, and keeps it for every chunk it
    # is given, so whatever ``work`` caches (the planner's Scorer) serves all of them; the
    # copy dies with the pool, at the end of this call.
    return _on_pool(work, chunks, min(jobs, len(chunks)), progress, results)


def _on_pool(work, chunks: list[list], workers: int, progress, results: list) -> list:
    """``chunks`` on a pool of ``workers`` local processes; on any exception the pool's
    processes (the children this process did not have before it) are killed."""
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(workers, initializer=_install, initargs=(work,))
    try:
        with _signals_blocked():  # the workers start at the first submit
            futures = [pool.submit(_run_installed, chunk) for chunk in chunks]
        _gather(_completed(futures), progress, results)
        pool.shutdown()
    except BaseException:
        _kill_workers(pool, before)
        raise
    return results


class KeptPool:
    """Local worker processes kept across several ``run_chunks`` calls with one ``work``.

    A caller that runs many small batches of chunks in a row (the planner's waves of
    scoring) would start a pool for each, and each new worker would build again whatever
    ``work`` caches. A kept pool starts its ``workers`` at its first batch, each receiving
    ``work`` once, and keeps them, and what ``work`` caches in them, until the ``with``
    block ends; an exception in a batch or in the block kills them, as ``run_chunks`` does."""

    def __init__(self, work: Callable[[list], list], workers: int) -> None:
        self.work, self.workers = work, workers
        self._pool: ProcessPoolExecutor | None = None
        self._before: set = set()

    def __enter__(self) -> KeptPool:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if kind is None:
            pool.shutdown()
        else:
            _kill_workers(pool, self._before)

    def run(self, chunks: list[list], progress, results: list) -> list:
        """``chunks`` on the kept workers (started at the first call)."""
        if self._pool is None:
            self._before = set(multiprocessing.active_children())
            self._pool = ProcessPoolExecutor(
                self.workers, initializer=_install, initargs=(self.work,)
            )
        try:
            with _signals_blocked():  # the workers start at the first submit
                futures = [self._pool.submit(_run_installed, chunk) for chunk in chunks]
            return _gather(_completed(futures), progress, results)
        except BaseException:
            pool, self._pool = self._pool, None
            _kill_workers(pool, self._before)
            raise


@contextmanager
def _signals_blocked() -> Iterator[None]:
    """``STARTING_BLOCKED`` held back in this thread (and in the processes and threads it
    starts) inside the block; one that came meanwhile is delivered as it ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STARTING_BLOCKED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _kill_workers(pool: ProcessPoolExecutor, before: set) -> None:
    """Kill the pool's workers mid-chunk, then let the pool wind down (its manager sees
    them gone at once, so nothing waits on a chunk)."""
    workers = set(multiprocessing.active_children()) - before
    for process in workers:
        process.kill()
    for process in workers:
        process.join()
    pool.shutdown(wait=True, cancel_futures=True)


def check_executor(executor: str, scheduler: str | None, error: type[Exception]) -> None:
    """Raise ``error`` with one line where the executor is unknown or Dask has no scheduler
    (callers that do work before ``run_chunks`` check first)."""
    if executor not in EXECUTORS:
        raise error(f"--executor {executor!r}: allowed: {', '.join(EXECUTORS)}")
    if executor == "dask" and not scheduler:
        raise error("--executor dask needs --scheduler tcp://HOST:PORT")
    if executor == "dask" and not _reachable_form(scheduler):
        raise error(f"--scheduler {scheduler!r}: allowed: tcp://HOST:PORT (a port from 1 to 65535)")


def _reachable_form(scheduler: str) -> bool:
    """``tcp://HOST:PORT``, or the ``inproc://`` address of a cluster started in this very
    process (a test's ``LocalCluster(processes=False)``); any other scheme or shape could
    only fail, slowly, inside dask."""
    tcp = _TCP.fullmatch(scheduler)
    if tcp is not None:
        return 1 <= int(tcp.group(1)) <= 65535
    inproc = _INPROC.fullmatch(scheduler)
    return inproc is not None and int(inproc.group(1)) == os.getpid()


# A pool worker's own state: the ``work`` its pool was started with. Set only inside the
# worker processes of one ``run_chunks`` call (never in the caller's process), it lives as
# long as that pool.
_worker_work: list[Callable[[list], list]] = []


def _install(work: Callable[[list], list]) -> None:
    """A worker's start: its signals, its tie to the parent, and the ``work`` it keeps."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller reports Ctrl-C and stops us
    for signum in signal.valid_signals():
        if callable(signal.getsignal(signum)) and signum != signal.SIGINT:
            signal.signal(signum, signal.SIG_DFL)  # a handler copied from the caller by fork
    if hasattr(signal, "pthread_sigmask"):  # blocked by the caller while we started
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STARTING_BLOCKED)
    _die_with_parent()
    _worker_work[:] = [work]


def _die_with_parent() -> None:
    """On Linux, ask the kernel to kill this worker when its parent dies, however it dies
    (SIGKILL included), so no worker is left running for nobody; elsewhere, nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    parent = multiprocessing.parent_process()
    if parent is not None and not parent.is_alive():  # it died before we asked
        os.kill(os.getpid(), signal.SIGKILL)


def _run_installed(chunk: list) -> list:
    return _worker_work[0](chunk)


def _completed(futures: list) -> Iterator:
    """The local futures as they finish, each waited for with the terminating signals
    held back: a signal the caller turns into an exception then lands between two
    futures, never inside ``as_completed`` while it holds the futures' locks one by one
    (a lock left held there would hang the pool's shutdown, and with it the caller). A
    signal is answered once the chunk running at that moment has finished."""
    finished = as_completed(futures)
    while True:
        with _signals_blocked():
            future = next(finished, None)
        if future is None:
            return
        yield future


def _gather(finished: Iterable, progress: Callable[[int], None] | None, results: list) -> list:
    for future in finished:
        done = future.result()
        results += done
        if progress is not None:
            progress(len(done))
    return results


def _on_dask(work, items, split, scheduler, progress, error, results: list) -> list:
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError:
        raise error("--executor dask needs dask.distributed: pip install 'pipesim[dask]'") from None
    try:
        client = Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s", set_as_default=False)
    except OSError:  # TimeoutError included: nothing answered there
        raise error(
            f"--scheduler {scheduler}: no Dask scheduler answered within {CONNECT_TIMEOUT_S} s"
        ) from None
    with client:
        workers = max(1, len(client.scheduler_info().get("workers", {})))
        futures = [client.submit(work, chunk, pure=False) for chunk in split(items, workers)]
        try:
            return _gather(dask_completed(futures, loop=client.loop), progress, results)
        except BaseException:
            client.cancel(futures, force=True)  # nothing left queued or held for us
            raise
