"""How the planner cuts its candidates into chunks, the unit a worker takes at a time.

A worker's ``Scorer`` keeps every piece it builds (schedules, stage costs, links) for the
chunks it takes later, but a piece built by one worker is no help to another. So the
chunks follow what the candidates share:

* to assess (``assess_chunks``), every candidate of one schedule (policy, pipeline size,
  microbatches, chunk count) goes to one chunk, cut only past ``ASSESS_CANDIDATES``: the
  schedule, the largest piece, is then built by one worker only, never by both;
* to score (``score_chunks``), candidates that share a schedule, then its costs, sit next
  to each other, cut into about eight chunks per worker of at most ``SCORE_CANDIDATES``:
  a wave of scoring is small, and small chunks keep the workers evenly busy and the
  progress bar moving.

Either way a chunk takes well under a second, so a stop loses little, and what goes to a
worker and back stays a few kilobytes: a worker killed while it sends a large result
leaves half a message in the pool's pipe, which can hang the pool as it shuts down.
"""

from __future__ import annotations

from pipesim.analysis.plan.axes import Candidate

Work = list[tuple[int, Candidate]]  # (space index, candidate)
ASSESS_CANDIDATES = 128  # a schedule's candidates to a chunk, at most (~10 kB of results)
SCORE_CANDIDATES = 64  # at most this many to a chunk: well under a second of scoring


def assess_chunks(work: Work, parts: int) -> list[Work]:
    """The candidates of each schedule together, in order of first appearance (``parts``:
    the workers, which the schedules outnumber)."""
    schedules: dict[tuple, Work] = {}
    for index, c in work:
        schedule = (c.schedule, c.devices, c.microbatches, c.virtual_stages, c.delay_wgrad)
        schedules.setdefault(schedule, []).append((index, c))
    return [
        group[i : i + ASSESS_CANDIDATES]
        for group in schedules.values()
        for i in range(0, len(group), ASSESS_CANDIDATES)
    ]


def score_chunks(work: Work, parts: int) -> list[Work]:
    """Candidates grouped by what they share (a schedule, then its costs), cut into about
    eight chunks per worker, of at most ``SCORE_CANDIDATES``."""
    ordered = sorted(work, key=lambda item: (_share_key(item[1]), item[0]))
    size = max(1, min(SCORE_CANDIDATES, -(-len(ordered) // (parts * 8))))
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def _share_key(c: Candidate) -> tuple:
    return (
        c.schedule,
        c.devices,
        c.microbatches,
        c.virtual_stages,
        c.tensor,
        c.microbatch_size,
        c.recompute,
        c.partition,
        c.expert or 1,
    )


__all__ = ["ASSESS_CANDIDATES", "SCORE_CANDIDATES", "assess_chunks", "score_chunks"]
