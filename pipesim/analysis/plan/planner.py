"""The planner itself: the space enumerated, its survivors scored on workers, ranked and
confirmed (the passes are described in ``pipesim.analysis.plan``).

A caller that may stop a plan midway (the command line, on a signal) hands ``plan`` a
``PlanSoFar``: it holds the space once it is built and every candidate's outcome as it
arrives, and ``PlanSoFar.interrupted`` ranks what finished as a ``Plan`` marked ``stopped``
(which candidates had finished, of how many), never confirmed, so it cannot pass for a
finished plan.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from pipesim.analysis.executor import KeptPool, check_executor, run_chunks
from pipesim.analysis.plan.bounding import Assessed, score_bounded
from pipesim.analysis.plan.chunks import assess_chunks, score_chunks
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
from pipesim.analysis.plan.warm import LOAD_AFTER, load_compiled_loops
from pipesim.analysis.run import Result, run_scenario
from pipesim.cluster.hardware import gpu_profile
from pipesim.scenario.build import build_scenario, parse_spec
from pipesim.scenario.schema import ScenarioSpec

Progress = Callable[[int], None]
AGREEMENT = 1e-9  # relative: the fast evaluator and the engine agree to this


class PlanMismatch(RuntimeError):
    """The planner's number for a candidate differs from ``pipesim run`` on its emitted
    scenario: a bug in pipesim, not a user mistake."""


@dataclass(frozen=True, slots=True)
class Stop:
    """Why a plan is partial: the signal that stopped it, and how many of the space's
    candidates had finished (pruned or scored) by then."""

    signal: str  # its name, e.g. SIGINT
    finished: int
    total: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "complete": False,
            "interrupted": self.signal,
            "candidates_finished": self.finished,
            "candidates_total": self.total,
        }


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
    stopped: Stop | None = None  # a partial plan: the candidates that finished before a signal
    bounded: int = 0  # candidates whose floor shows they can change nothing (``bounding``)

    def to_dict(self) -> dict[str, Any]:
        """What ``--format json`` prints (a partial plan's marker first)."""
        marker = {} if self.stopped is None else self.stopped.to_dict()
        return marker | {
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
    so_far: PlanSoFar | None = None,
    exhaustive: bool = False,
) -> Plan:
    """Plan the job of ``base`` (a scenario mapping read from ``source``) on ``gpus`` GPUs.

    ``space``: ``KEY=V1,V2`` items that replace an axis's values. ``on_size(n)`` is called
    with the space size before any candidate is scored; ``progress(n)`` as ``n`` more are
    done. ``top`` results are kept (the front is over all of them); the first ``confirm``
    are simulated again from their emitted scenarios with the SimPy engine; only those
    whose floor can change the output are simulated (``bounding``), unless ``exhaustive``.
    ``so_far`` receives the space and each outcome as it arrives (see the module's
    docstring).
    """
    so_far = PlanSoFar() if so_far is None else so_far
    check_executor(executor, scheduler, PlanError)  # before the space is built
    spec = parse_spec(base, source)
    searched = build_space(spec, source, gpus, space)
    points = list(enumerate_space(searched))
    if on_size is not None:
        on_size(len(points))
    settings = {"jobs": jobs, "executor": executor, "scheduler": scheduler}
    scorer = ChunkScorer(base, source)
    work = survivors(points, so_far.pruned)
    so_far.space_built(base, source, spec, searched, len(points), len(work))
    local = jobs > 1 and executor == "local"
    if local and len(work) >= LOAD_AFTER:
        load_compiled_loops()  # once here, not in every worker
    with KeptPool(scorer, jobs) if local else nullcontext() as pool:
        settings["pool"] = pool  # one set of workers, and their caches, for every pass
        kept = assessed(scorer, work, so_far.pruned, settings)
        so_far.to_score = len(kept)  # the others are counted in pruned (folded ones too)
        if progress is not None and len(points) > len(kept):
            progress(len(points) - len(kept))
        keep = max(top, confirm, 1)
        settings["into"] = so_far.outcomes  # each outcome kept as it arrives
        _, bounded = score_kept(scorer, kept, keep, exhaustive, settings, progress)
    result, shown = so_far.ranked(top, confirm)
    result = replace(result, bounded=bounded)
    confirmed = confirm_top(result, confirm, shown)
    return replace(result, confirmed=confirmed, wall_s=so_far.elapsed_s())


@dataclass(slots=True, eq=False)
class PlanSoFar:
    """A plan's state as it runs: the space once built, the outcomes as they arrive."""

    started: float = field(default_factory=time.perf_counter)
    pruned: dict[str, int] = field(default_factory=dict)  # before scoring, by reason
    outcomes: list[tuple[int, Outcome]] = field(default_factory=list)
    size: int = 0
    to_score: int = 0
    base: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    spec: ScenarioSpec | None = None
    searched: Space | None = None

    def space_built(self, base, source, spec, searched, size: int, to_score: int) -> None:
        self.base, self.source, self.spec, self.searched = base, source, spec, searched
        self.size, self.to_score = size, to_score

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    def ranked(self, top: int, confirm: int) -> tuple[Plan, list[PlanRow]]:
        """The plan of the outcomes so far (none confirmed yet, no time taken), and its
        first ``max(top, confirm, 1)`` ranked rows."""
        pruned = dict(self.pruned)
        rows, timelines = scored_rows(self.outcomes, pruned)
        ranked = rank(rows)
        shown = ranked[: max(top, confirm, 1)]
        capacity = float(gpu_profile(self.spec.hardware.gpu).memory_bytes)
        result = Plan(
            self.size,
            dict(sorted(pruned.items())),
            len(rows),
            0,
            0.0,
            shown[:top],
            pareto(ranked),
            timelines,
            self.base,
            self.source,
            tuple((row.step_time_ms, row.peak_memory_bytes) for _, row in rows),
            axes_tried(self.searched),
            capacity,
            capacity * (1 - self.spec.hardware.memory_headroom),
        )
        return result, shown

    def interrupted(self, signum: int, top: int) -> Plan | None:
        """What finished before the signal ``signum``, ranked and marked as partial; None
        where the space was not built yet (nothing had finished)."""
        if self.spec is None:
            return None
        result, _ = self.ranked(top, 0)
        finished = self.size - self.to_score + len(self.outcomes)
        stop = Stop(signal.Signals(signum).name, min(finished, self.size), self.size)
        return replace(result, wall_s=self.elapsed_s(), stopped=stop)


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
        return score_all(scorer, chunk, False, progress=progress, **settings)

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
    found = dict(score_all(scorer, work, True, **settings))
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
    assess: bool,
    jobs: int,
    executor: str,
    scheduler: str | None,
    progress: Progress | None = None,
    into: list | None = None,
    pool: KeptPool | None = None,
) -> list[tuple[int, Outcome]]:
    """``[(index, Outcome)]`` of every candidate of ``work``, assessed or scored, on the
    chosen executor (``pool``: on kept local workers), by this run's own ``ChunkScorer``
    (no cache is shared with another run); appended to ``into`` as they arrive, where
    given. Cut as ``pipesim.analysis.plan.chunks`` says."""
    cut = assess_chunks if assess else score_chunks
    return run_chunks(
        scorer,
        work,
        lambda items, parts: [(assess, chunk) for chunk in cut(items, parts)],
        jobs=jobs,
        executor=executor,
        scheduler=scheduler,
        progress=progress,
        error=PlanError,
        into=into,
        pool=pool,
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
    axes = {key: list(values) for key, values in space.axes.items() if values != (None,)}
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


__all__ = [
    "Plan",
    "PlanError",
    "PlanMismatch",
    "PlanSoFar",
    "Stop",
    "confirm_top",
    "plan",
    "run_emitted",
]
