"""The planner itself: the space enumerated, its survivors scored on workers, ranked and
confirmed (the passes are described in ``pipesim.analysis.plan``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pipesim.analysis.executor import check_executor, run_chunks
from pipesim.analysis.plan.bounding import Assessed, score_bounded
from pipesim.analysis.plan.fold import fold
from pipesim.analysis.plan.rank import emit_mapping, pareto, rank
from pipesim.analysis.plan.row import PlanRow
from pipesim.analysis.plan.score import ChunkScorer, Outcome
from pipesim.analysis.plan.space import (
    Candidate,
    PlanError,
    Space,
    build_space,
    enumerate_space,
    pipeline_sizes,
)
from pipesim.analysis.run import Result, run_scenario
from pipesim.cluster.hardware import gpu_profile
from pipesim.scenario.build import build_scenario, parse_spec

Progress = Callable[[int], None]
AGREEMENT = 1e-9  # relative: the fast evaluator and the engine agree to this


class PlanMismatch(RuntimeError):
    """The planner's number for a candidate differs from ``pipesim run`` on its emitted
    scenario: a bug in pipesim, not a user mistake."""


@dataclass(frozen=True, slots=True)
class Plan:
    """A finished plan: the counts, the ranked results (``top`` of them) and the front."""

    space_size: int
    pruned: dict[str, int]
    scored: int
    confirmed: int
    wall_s: float
    results: list[PlanRow]
    pareto: list[PlanRow]
    timelines: int  # distinct timelines scored (candidates with equal inputs share one)
    base: dict[str, Any] = field(repr=False, default_factory=dict)
    source: str = ""
    # (step_time_ms, peak_memory_bytes) of every scored candidate, in space order
    points: tuple[tuple[float, float], ...] = field(repr=False, default=())
    axes: dict[str, list[Any]] = field(default_factory=dict)  # the values each axis took
    capacity_bytes: float = 0.0  # one GPU's memory
    usable_bytes: float = 0.0  # what the candidates were pruned against: less the headroom
    bounded: int = 0  # candidates whose floor shows they can change nothing (``bounding``)

    def to_dict(self) -> dict[str, Any]:
        """What ``--format json`` prints."""
        return {
            "space": self.axes,
            "space_size": self.space_size,
            "pruned": dict(self.pruned),
            "scored": self.scored,
            "bounded": self.bounded,
            "confirmed": self.confirmed,
            "wall_s": self.wall_s,
            "timelines": self.timelines,
            "results": [row.to_dict() for row in self.results],
            "pareto": [row.to_dict() for row in self.pareto],
        }

    def winner_mapping(self, rank_index: int = 0) -> dict[str, Any]:
        """The scenario of a ranked result (0: the winner), ready for ``pipesim run``."""
        row = self.results[rank_index]
        note = f"planned by pipesim plan: rank {rank_index + 1}, {row.step_time_ms:.6g} ms"
        return emit_mapping(self.base, row.candidate, note, self.source)


def plan(
    base: dict[str, Any],
    source: str,
    gpus: int,
    space: Sequence[str] = (),
    *,
    confirm: int = 10,
    top: int = 20,
    jobs: int = 1,
    executor: str = "local",
    scheduler: str | None = None,
    progress: Progress | None = None,
    on_size: Callable[[int], None] | None = None,
    exhaustive: bool = False,
) -> Plan:
    """Plan the job of ``base`` (a scenario mapping read from ``source``) on ``gpus`` GPUs.

    ``space``: ``KEY=V1,V2`` items that replace an axis's values. ``on_size(n)`` is called
    with the space size before any candidate is scored; ``progress(n)`` as ``n`` more are
    done. ``top`` results are kept (the front is over all of them); the first ``confirm``
    are simulated again from their emitted scenarios with the SimPy engine; only those
    whose floor can change the output are simulated (``bounding``), unless ``exhaustive``.
    """
    started = time.perf_counter()
    check_executor(executor, scheduler, PlanError)  # before the space is built
    spec = parse_spec(base, source)
    searched = build_space(spec, source, gpus, space)
    points = list(enumerate_space(searched))
    if on_size is not None:
        on_size(len(points))
    pruned: dict[str, int] = {}
    settings = {"jobs": jobs, "executor": executor, "scheduler": scheduler}
    scorer = ChunkScorer(base, source, assess=True)
    kept = assessed(scorer, survivors(points, pruned), pruned, settings)
    if progress is not None and len(points) > len(kept):
        progress(len(points) - len(kept))
    keep = max(top, confirm, 1)
    outcomes, bounded = score_kept(scorer, kept, keep, exhaustive, settings, progress)
    rows, timelines = scored_rows(outcomes, pruned)
    ranked = rank(rows)
    shown = ranked[:keep]
    result = Plan(
        len(points),
        dict(sorted(pruned.items())),
        len(rows),
        0,
        0.0,
        shown[:top],
        pareto(ranked),
        timelines,
        base,
        source,
        tuple((row.step_time_ms, row.peak_memory_bytes) for _, row in rows),
        axes_tried(searched),
        float(gpu_profile(spec.hardware.gpu).memory_bytes),
        float(gpu_profile(spec.hardware.gpu).memory_bytes) * (1 - spec.hardware.memory_headroom),
        bounded,
    )
    confirmed = confirm_top(result, confirm, shown)
    return replace(result, confirmed=confirmed, wall_s=time.perf_counter() - started)


def survivors(
    points: Iterable[tuple[Candidate | None, str | None]], pruned: dict[str, int]
) -> list[tuple[int, Candidate]]:
    """The ``(space index, candidate)`` of every point that forms a job; each other one is
    counted in ``pruned`` under its reason."""
    work = []
    for index, (candidate, reason) in enumerate(points):
        if candidate is None:
            pruned[reason] = pruned.get(reason, 0) + 1
        else:
            work.append((index, candidate))
    return work


def score_kept(
    scorer: ChunkScorer,
    kept: list[Assessed],
    keep: int,
    exhaustive: bool,
    settings: dict[str, Any],
    progress: Progress | None,
) -> tuple[list[tuple[int, Outcome]], int]:
    """The Outcomes of the assessed candidates that can still change the ``keep`` best or
    the front (``exhaustive``: of all), and how many were bounded out."""

    def score(chunk: list[tuple[int, Candidate]]) -> list[tuple[int, Outcome]]:
        return score_all(scorer.scoring(), chunk, progress=progress, **settings)

    if exhaustive:
        return score([(index, c) for index, c, _ in kept]), 0
    return score_bounded(kept, keep, score, progress)


def assessed(
    scorer: ChunkScorer,
    work: list[tuple[int, Candidate]],
    pruned: dict[str, int],
    settings: dict[str, Any],
) -> list[Assessed]:
    """Every candidate of ``work`` that fits and is not another one's step under another
    name, with its assessment (``Scorer.assess``), in space order; each other one is
    counted in ``pruned``."""
    found = dict(score_all(scorer, work, **settings))
    fits = []
    for index, candidate in work:
        outcome = found[index]
        if outcome.reason is not None:
            pruned[outcome.reason] = pruned.get(outcome.reason, 0) + 1
        else:
            fits.append((index, candidate, outcome))
    return fold(fits, pruned)


def score_all(
    scorer: ChunkScorer,
    work: list[tuple[int, Candidate]],
    jobs: int,
    executor: str,
    scheduler: str | None,
    progress: Progress | None = None,
) -> list[tuple[int, Outcome]]:
    """``[(index, Outcome)]`` of every candidate of ``work``, on the chosen executor, by
    this run's own ``ChunkScorer`` (no cache is shared with another run)."""
    return run_chunks(
        scorer,
        work,
        _chunks,
        jobs=jobs,
        executor=executor,
        scheduler=scheduler,
        progress=progress,
        error=PlanError,
    )


def scored_rows(
    outcomes: Iterable[tuple[int, Outcome]], pruned: dict[str, int]
) -> tuple[list[tuple[int, PlanRow]], int]:
    """The ``(space index, row)`` of every scored candidate in space order, and how many
    distinct timelines they took; each pruned one is counted in ``pruned``."""
    rows, shared = [], set()
    for index, outcome in sorted(outcomes, key=lambda item: item[0]):
        if outcome.row is None:
            pruned[outcome.reason] = pruned.get(outcome.reason, 0) + 1
        else:
            rows.append((index, outcome.row))
            shared.add(outcome.timeline)
    return rows, len(shared)


def axes_tried(space: Space) -> dict[str, list[Any]]:
    """Each axis's values as searched (the default pipeline sizes spelt out)."""
    axes = {key: list(values) for key, values in space.axes.items()}
    tensors = space.axes["parallel.tensor"]
    axes["pipeline.devices"] = sorted({p for t in tensors for p in pipeline_sizes(space, t)})
    axes |= {key: list(values) for key, values in space.derived.items() if values is not None}
    return axes


def confirm_top(result: Plan, count: int, ranked: Sequence[PlanRow]) -> int:
    """Build the first ``count`` ranked candidates from their emitted scenarios and run
    them on the SimPy engine; PlanMismatch where a number differs."""
    done = 0
    for rank_index, row in enumerate(ranked[:count]):
        mapping = emit_mapping(result.base, row.candidate, source=result.source)
        engine = run_emitted(mapping, result.source, "simpy")
        for key, expected, found in (
            ("step_time_ms", row.step_time_ms, engine.report.step_time_ms),
            ("peak_memory_bytes", row.peak_memory_bytes, _peak(engine)),
        ):
            if abs(found - expected) > AGREEMENT * max(abs(expected), 1e-300):
                raise PlanMismatch(
                    f"rank {rank_index + 1}: {key} {expected!r} by the planner, {found!r} by "
                    f"the SimPy engine on its emitted scenario (relative difference "
                    f"{abs(found - expected) / abs(expected):.2e} > {AGREEMENT})"
                )
        done += 1
    return done


def run_emitted(
    mapping: dict[str, Any], source: str, evaluator: str = "auto", *, critical_path: bool = False
) -> Result:
    """What ``pipesim run --evaluator EVALUATOR`` does with an emitted scenario (with
    ``critical_path``: ``pipesim run --explain``)."""
    scenario = build_scenario(parse_spec(mapping, source), source)
    return run_scenario(scenario, evaluator=evaluator, critical_path=critical_path)


def _peak(result: Result) -> float:
    return max(d.peak_memory_bytes for d in result.report.per_device)


# ---------------------------------------------------------------------------
# Chunks of candidates that share a schedule go to one worker


def _chunks(work: list[tuple[int, Candidate]], parts: int) -> list[list[tuple[int, Candidate]]]:
    """Candidates grouped by what they share (a schedule, then its costs), cut into about
    eight chunks per worker: a chunk's Scorer serves the whole chunk."""
    ordered = sorted(work, key=lambda item: (_share_key(item[1]), item[0]))
    size = max(1, -(-len(ordered) // (parts * 8)))
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
    )


__all__ = ["Plan", "PlanError", "PlanMismatch", "confirm_top", "plan", "run_emitted"]
