"""How the planner cuts its candidates into chunks (pipesim.analysis.plan.chunks): every
candidate exactly once; to assess, each chunk holds one schedule's candidates, so the
schedule is built by one worker, and no chunk passes the cap that keeps messages small."""

from __future__ import annotations

from dataclasses import replace

from pipesim.analysis.plan.axes import Candidate
from pipesim.analysis.plan.chunks import (
    ASSESS_CANDIDATES,
    SCORE_CANDIDATES,
    assess_chunks,
    score_chunks,
)

BASE = Candidate(8, 4, 2, "1f1b", 1, 1, 16, False, 0, "even", True, False, False)


def work() -> list[tuple[int, Candidate]]:
    """300 candidates of 1F1B on 4 devices (over the cap), and a few of two others."""
    items = [(i, replace(BASE, zero_stage=i % 4, recompute=bool(i % 2))) for i in range(300)]
    others = [replace(BASE, schedule="gpipe"), replace(BASE, devices=8, microbatches=8)]
    items += [(300 + i, c) for i, c in enumerate(others * 5)]
    return items


def schedule_of(c: Candidate) -> tuple:
    return (c.schedule, c.devices, c.microbatches, c.virtual_stages, c.delay_wgrad)


def test_assess_chunks_hold_one_schedule_each_and_every_candidate_once():
    chunks = assess_chunks(work(), 2)
    flat = [index for chunk in chunks for index, _ in chunk]
    assert sorted(flat) == list(range(310))
    assert all(len({schedule_of(c) for _, c in chunk}) == 1 for chunk in chunks)
    assert max(len(chunk) for chunk in chunks) == ASSESS_CANDIDATES
    # 1F1B's 300 in three chunks (128, 128, 44), then gpipe's 5 and the 8-device ones' 5
    assert [len(chunk) for chunk in chunks] == [128, 128, 44, 5, 5]


def test_score_chunks_keep_every_candidate_once_under_the_cap():
    chunks = score_chunks(work(), 2)
    flat = sorted(index for chunk in chunks for index, _ in chunk)
    assert flat == list(range(310))
    assert max(len(chunk) for chunk in chunks) <= SCORE_CANDIDATES
    assert len(chunks) >= 16  # about eight chunks per worker
