"""The executor shared by sweeps, serving sweeps and the planner: every result comes back
once, whatever the number of jobs, and a pool never starts more processes than chunks."""

from __future__ import annotations

import os
import re

import pytest

import pipesim.analysis.executor as executor
from pipesim.analysis.executor import check_executor, run_chunks


def squares(chunk: list) -> list:
    return [x * x for x in chunk]


def halves(items: list, workers: int) -> list[list]:
    """Two chunks, whatever the number of workers."""
    middle = len(items) // 2
    return [items[:middle], items[middle:]]


def test_every_result_comes_back_once_in_process_and_in_a_pool(monkeypatch):
    started = []

    class Recording(executor.ProcessPoolExecutor):
        def __init__(self, max_workers: int, **kwargs) -> None:
            started.append(max_workers)
            super().__init__(max_workers=max_workers, **kwargs)

    monkeypatch.setattr(executor, "ProcessPoolExecutor", Recording)
    seen: list[int] = []
    here = run_chunks(squares, list(range(7)), halves, jobs=1, progress=seen.append)
    pooled = run_chunks(squares, list(range(7)), halves, jobs=16)
    assert sorted(here) == sorted(pooled) == [x * x for x in range(7)]
    assert seen == [3, 4]  # one update per chunk, as it arrives
    assert started == [2]  # 16 jobs asked for, two chunks to run


@pytest.mark.parametrize(
    ("name", "scheduler", "message"),
    [
        ("threads", None, "--executor 'threads': allowed: local, dask"),
        ("dask", None, "--executor dask needs --scheduler tcp://HOST:PORT"),
    ],
)
def test_a_bad_executor_is_one_line_of_the_callers_error(name, scheduler, message):
    exact = f"^{re.escape(message)}$"
    with pytest.raises(RuntimeError, match=exact):
        check_executor(name, scheduler, RuntimeError)
    with pytest.raises(LookupError, match=exact):
        run_chunks(squares, [1, 2], halves, executor=name, scheduler=scheduler, error=LookupError)


class Counting:
    """Work that remembers how many chunks this copy of it has computed."""

    def __init__(self) -> None:
        self.chunks = 0

    def __call__(self, chunk: list) -> list:
        self.chunks += 1
        return [(os.getpid(), self.chunks) for _ in chunk]


def singles(items: list, workers: int) -> list[list]:
    return [[x] for x in items]


def test_a_pool_worker_keeps_one_copy_of_the_work_for_all_its_chunks():
    """What work caches (the planner's Scorer) serves every chunk its worker is handed,
    not only the first: 12 chunks on 2 workers, so some copy computes several."""
    results = run_chunks(Counting(), list(range(12)), singles, jobs=2)
    by_process: dict[int, list[int]] = {}
    for pid, count in results:
        by_process.setdefault(pid, []).append(count)
    assert os.getpid() not in by_process  # the pool's copies, not the caller's
    for counts in by_process.values():
        assert sorted(counts) == list(range(1, len(counts) + 1))
    assert sum(len(c) for c in by_process.values()) == 12
    assert max(len(c) for c in by_process.values()) > 1


def test_a_kept_pool_keeps_its_workers_and_their_work_across_calls():
    """Two calls on one KeptPool: the second call's chunks go to the same processes,
    whose copies of the work go on counting from where the first call left them."""
    work = Counting()
    with executor.KeptPool(work, 2) as pool:
        first = run_chunks(work, list(range(6)), singles, jobs=2, pool=pool)
        # the pool's processes, whether or not a busy machine let both take a chunk yet
        before = {child.pid for child in executor.multiprocessing.active_children()}
        second = run_chunks(work, list(range(6)), singles, jobs=2, pool=pool)
    assert {pid for pid, _ in first} <= before
    after: dict[int, list[int]] = {}
    for pid, count in first + second:
        after.setdefault(pid, []).append(count)
    assert {pid for pid, _ in second} <= before  # no new process for the second call
    assert os.getpid() not in after
    for counts in after.values():  # one copy per process, across both calls
        assert sorted(counts) == list(range(1, len(counts) + 1))
    assert sum(len(c) for c in after.values()) == 12


def test_a_kept_pool_ends_its_workers_with_its_block():
    with executor.KeptPool(Counting(), 2) as pool:
        run_chunks(Counting(), list(range(4)), singles, jobs=2, pool=pool)
        workers = set(executor.multiprocessing.active_children())
        assert len(workers) == 2
    assert not workers & set(executor.multiprocessing.active_children())
