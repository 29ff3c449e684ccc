"""Work stopped midway keeps what finished: the executor's ``into`` list, a plan's
``PlanSoFar`` and a sweep's finished rows hold exactly the results that had come back, a
partial plan is marked and ranks those, and a Dask run stopped midway leaves no task and
no client on the cluster."""

from __future__ import annotations

import signal
import time

import pytest

from pipesim.analysis.executor import run_chunks
from pipesim.analysis.plan import PlanSoFar, plan
from pipesim.analysis.sweep import finished_frame, parse_grid, run_sweep
from tests.analysis.test_plan import SOURCE, small_base

SPACE = (
    "pipeline.schedule=1f1b,zbv",
    "model.recompute=false",
    "parallel.dp_overlap=false",
    "parallel.tp_overlap=false",
    "parallel.zero_stage=0",
)


def squares(chunk: list) -> list:
    return [x * x for x in chunk]


def singles(items: list, workers: int) -> list[list]:
    return [[x] for x in items]


def stop_after(calls: int):
    """A progress callback that is Ctrl-C on its ``calls``-th call."""
    seen = []

    def progress(n: int) -> None:
        seen.append(n)
        if len(seen) == calls:
            raise KeyboardInterrupt

    return progress


@pytest.mark.parametrize("jobs", [1, 2])
def test_into_holds_every_result_that_came_back_before_a_stop(jobs):
    kept: list = []
    with pytest.raises(KeyboardInterrupt):
        run_chunks(squares, list(range(6)), singles, jobs=jobs, progress=stop_after(3), into=kept)
    assert len(kept) == 3  # three chunks reported, three results kept, no more
    assert set(kept) <= {x * x for x in range(6)}


def test_into_is_the_list_returned_when_nothing_stops():
    kept: list = [-1]
    assert run_chunks(squares, [1, 2, 3], singles, into=kept) is kept
    assert kept == [-1, 1, 4, 9]


def test_a_stopped_plan_ranks_exactly_the_candidates_that_finished():
    base, so_far = small_base(), PlanSoFar()
    with pytest.raises(KeyboardInterrupt):
        plan(base, SOURCE, 8, SPACE, confirm=0, top=1000, progress=stop_after(4), so_far=so_far)
    partial = so_far.interrupted(signal.SIGINT, top=1000)
    full = plan(base, SOURCE, 8, SPACE, confirm=0, top=1000)
    stop = partial.stopped
    assert (stop.signal, stop.total) == ("SIGINT", full.space_size)
    assert stop.finished == sum(partial.pruned.values()) + partial.scored
    assert 0 < partial.scored < full.scored and partial.confirmed == 0
    # each finished candidate scored as in the whole plan, ranked among themselves
    whole = {row.candidate: row.step_time_ms for row in full.results}
    assert all(whole[row.candidate] == row.step_time_ms for row in partial.results)
    steps = [row.step_time_ms for row in partial.results]
    assert steps == sorted(steps)
    data = partial.to_dict()
    assert list(data)[:4] == ["complete", "interrupted", "candidates_finished", "candidates_total"]
    assert (data["complete"], data["candidates_finished"]) == (False, stop.finished)
    assert "complete" not in full.to_dict()  # a whole plan's JSON is as it always was


def test_a_plan_stopped_before_its_space_was_built_has_nothing_to_show():
    assert PlanSoFar().interrupted(signal.SIGINT, top=5) is None


def test_a_stopped_sweep_tabulates_the_points_that_finished_in_grid_order(tmp_path):
    axes = parse_grid(["pipeline.microbatches=4,8,12,16", "pipeline.devices=2,4"])
    kept: list = []
    base = {"schema_version": 1, "pipeline": {"schedule": "1f1b"}, "costs": {"forward_ms": 1}}
    with pytest.raises(KeyboardInterrupt):
        run_sweep(base, "grid.yaml", axes, progress=stop_after(1), into=kept)
    frame = finished_frame(axes, kept)
    whole = run_sweep(base, "grid.yaml", axes)
    assert 0 < len(frame) < len(whole)
    assert frame.to_dict("records") == whole.head(len(frame)).to_dict("records")


def test_a_dask_run_stopped_midway_leaves_no_task_and_closes_its_client():
    distributed = pytest.importorskip("distributed")

    def slow(chunk: list) -> list:
        time.sleep(0.2)
        return chunk

    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        kept: list = []
        with pytest.raises(KeyboardInterrupt):
            run_chunks(
                slow,
                list(range(8)),
                singles,
                executor="dask",
                scheduler=cluster.scheduler_address,
                progress=stop_after(1),
                into=kept,
            )
        assert len(kept) == 1
        assert not cluster.scheduler.tasks  # the seven others cancelled, not left queued
        assert set(cluster.scheduler.clients) <= {"fire-and-forget"}  # ours closed
