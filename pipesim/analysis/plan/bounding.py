"""Lower bounds before timelines: simulate only the candidates that can still matter.

``Scorer.assess`` gives each candidate that fits a floor under its step time
(``bound.step_floor_ms``) and one under its peak memory (the memory walk's, never above
the simulated peak). The planner then scores candidates in waves, lowest floor first,
each wave twice the one before, and after each wave drops (bounds out) every waiting
candidate that can no longer appear in the plan's output:

* **not in the top k**: its floor is strictly above the k-th best step time scored so
  far (k: the results kept, ``max(top, confirm, 1)``), so at least k scored candidates
  are strictly faster than it;
* **not on the Pareto front**: some scored candidate is strictly faster than its floor
  and holds no more memory than its memory floor, so that one dominates it.

A candidate is bounded out only when both hold. Both only get stronger as more
candidates are scored, so a candidate dropped once would be dropped at the end too, and
the plan's winner, its top k (ties included: the ranking breaks ties by memory, then space
order, and a tie is never strictly faster) and its Pareto front are exactly those of
scoring every candidate. A dropped candidate that sits behind a dominated one on the
front changes nothing either: whatever dominates it dominates the later ones it would.

What bounding does change: ``scored``, ``timelines`` and the figure's grey points count
only the candidates simulated; the bounded-out ones are counted in ``bounded``.
``exhaustive`` scores every candidate.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from pipesim.analysis.plan.score import Outcome
from pipesim.analysis.plan.space import Candidate

Assessed = tuple[int, Candidate, Outcome]  # (space index, candidate, its assessment)
Scored = list[tuple[int, Outcome]]
FIRST_WAVE = 2  # times k: the first wave's size


@dataclass(frozen=True, slots=True)
class Bar:
    """What a waiting candidate has to beat: the scored step times in order, the least
    peak memory among the fastest ``n`` of them (``least[n - 1]``), and k."""

    steps: tuple[float, ...]
    least: tuple[float, ...]
    keep: int

    @classmethod
    def of(cls, outcomes: Scored, keep: int) -> Bar:
        rows = sorted((o.row.step_time_ms, o.row.peak_memory_bytes) for _, o in outcomes if o.row)
        steps = tuple(step for step, _ in rows)
        return cls(steps, tuple(accumulate((peak for _, peak in rows), min)), keep)

    def out(self, assessed: Outcome) -> bool:
        """Whether a candidate of that assessment can appear neither in the top k nor on
        the front (see the module's docstring)."""
        if len(self.steps) < self.keep or assessed.floor_ms <= self.steps[self.keep - 1]:
            return False
        faster = bisect_left(self.steps, assessed.floor_ms)  # strictly below the floor
        return faster > 0 and self.least[faster - 1] <= assessed.least_peak_bytes


def score_bounded(
    assessed: Sequence[Assessed],
    keep: int,
    score: Callable[[list[tuple[int, Candidate]]], Scored],
    progress: Callable[[int], None] | None = None,
) -> tuple[Scored, int]:
    """``score`` over the candidates that can still matter, in waves (see above): the
    outcomes and how many candidates were bounded out. ``progress(n)``: ``n`` more
    bounded out (``score`` reports its own)."""
    waiting = sorted(assessed, key=lambda item: (item[2].floor_ms, item[0]))
    outcomes: Scored = []
    bounded, size = 0, max(FIRST_WAVE * keep, 1)
    while waiting:
        wave, waiting = waiting[:size], waiting[size:]
        outcomes += score([(index, candidate) for index, candidate, _ in wave])
        bar = Bar.of(outcomes, keep)
        left = [item for item in waiting if not bar.out(item[2])]
        if progress is not None and len(left) < len(waiting):
            progress(len(waiting) - len(left))
        bounded += len(waiting) - len(left)
        waiting, size = left, size * 2
    return outcomes, bounded


__all__ = ["Bar", "score_bounded"]
