"""Scoring candidates: the same step ``pipesim run`` would simulate, built without the detour.

``pipesim run`` reads a file, validates it with pydantic, builds the schedule, derives the
stage costs from the model and simulates. For one scenario that costs nothing worth
noticing; for ten thousand candidates the repeated parts dominate. Most of them repeat
exactly: a schedule depends only on (policy, pipeline size, microbatches, chunks); stage
costs on the candidate's other keys and where the stages sit; the timeline only on the
schedule, the costs, the end-of-step tail and the links, so candidates that differ in
nothing else (often ZeRO stages 0 to 2, which change static memory and at most the
optimizer step) share one. The ``Scorer`` validates the base scenario once, derives each
candidate's pieces with the same functions ``pipesim.scenario.build`` calls
(``derive.model_costs``, ``derive.topology``, ``get_schedule``) from the scenario
``rank.emit_mapping`` writes for it (validated only where a piece is not cached yet),
keeps each piece in a cache under the key it depends on, and simulates each distinct
timeline once, keyed by its inputs' values, with ``pipesim.analysis.run.simulate_step``,
as ``pipesim run`` does. A candidate's Report is then exactly the one ``pipesim run``
gives for its emitted scenario; the planner confirms that on its top candidates with the
SimPy engine.

A candidate ends one of two ways: pruned (with its reason: a schedule constraint, or
memory, found by the walk of ``prune`` before any simulation) or scored (a ``PlanRow``).
The searched policies (zb-auto, v-auto) search inside each candidate and go through
``build_scenario`` whole: slow, so they are in the space only on request.

The caches belong to the ``Scorer`` and live as long as it does: a planner run makes its
own (``ChunkScorer``), so two runs never share one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pipesim.analysis.plan.bound import BoundProgram, bound_program, step_floor_ms
from pipesim.analysis.plan.digests import Digests, digest
from pipesim.analysis.plan.prune import (
    MemoryWalks,
    capacity_reason,
    exceeds,
    memory_program,
    peak_activation_bytes,
)
from pipesim.analysis.plan.rank import emit_mapping
from pipesim.analysis.plan.row import PlanRow
from pipesim.analysis.plan.space import Candidate
from pipesim.analysis.run import simulate_step
from pipesim.cluster.hardware import gpu_profile
from pipesim.cluster.job import BatchSizes, Job, communicating_pairs
from pipesim.cluster.job_costs import ModelCosts
from pipesim.scenario import derive
from pipesim.scenario.build import Scenario, build_scenario, parse_spec
from pipesim.scenario.schema import Mode, ScenarioError, ScenarioSpec
from pipesim.schedules import POLICIES, get_schedule
from pipesim.schedules.ir import Schedule, ScheduleError
from pipesim.search import AUTO_POLICIES
from pipesim.sim.fast import EvaluatorCache
from pipesim.sim.links import Topology
from pipesim.sim.metrics import Accounting, Report


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one candidate: pruned with a reason, or scored (``row``)."""

    reason: str | None = None
    row: PlanRow | None = None
    timeline: str = ""  # a digest of the timeline's inputs: equal digests, one timeline
    # what ``Scorer.assess`` finds before any simulation (``row`` None, ``reason`` None):
    floor_ms: float = 0.0  # a lower bound on the step time (``bound.step_floor_ms``)
    least_peak_bytes: float = 0.0  # a lower bound on the peak memory (the walk's)
    same: str = ""  # a digest of every input of the step: equal digests, one step ("": none)


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A candidate that fits, with the pieces its step is made of."""

    key: tuple  # (policy, devices, microbatches, chunks)
    schedule: Schedule
    derived: ModelCosts
    topology: Topology
    where: tuple  # the topology's cache key
    peaks: np.ndarray  # the walk's peak activation bytes per device


class Scorer:
    """Scores candidates of one base scenario, caching every piece it can share."""

    def __init__(self, spec_data: Mapping[str, Any], source: str) -> None:
        self.base = spec_data
        self.spec = parse_spec(dict(spec_data), source)
        self.source = source
        hw = self.spec.hardware
        self.capacity = float(gpu_profile(hw.gpu).memory_bytes)
        # the memory terms every candidate shares: the OOM check's words
        self.accounting = Accounting(
            (),
            memory_capacity_bytes=self.capacity,
            runtime_memory_bytes=hw.runtime_bytes,
            fragmentation=hw.fragmentation,
            memory_headroom=hw.memory_headroom,
        )
        self._schedules: dict[tuple, Schedule | str] = {}
        self._walks = MemoryWalks()
        self._derived: dict[tuple, ModelCosts] = {}
        self._jobs: dict[tuple, Job | ScenarioError] = {}
        self._stages: dict[tuple, tuple] = {}  # schedule key -> where its stages sit
        self._topologies: dict[tuple, Topology] = {}
        self._timelines: dict[tuple, tuple[Report, str]] = {}
        self._bounds: dict[tuple, BoundProgram] = {}
        self._digests = Digests()
        self._evaluator_cache = EvaluatorCache()  # schedule indexes, sweep buffers
        self._last: tuple[Candidate, ScenarioSpec, Job] | None = None  # the latest candidate

    def candidate_spec(self, c: Candidate) -> ScenarioSpec:
        """The candidate's scenario, validated: the one ``--emit`` writes for it."""
        return self._candidate(c)[1]

    def candidate_job(self, c: Candidate) -> Job:
        """The candidate's job, as ``pipesim run`` builds it from that scenario. A job
        reads neither the policy, the pipeline size nor the chunk count, and whether the
        scenario validates does not depend on them either, so candidates that differ only
        in those share one job (or one error)."""
        key = _job_key(c)
        if key not in self._jobs:
            try:
                self._jobs[key] = self._candidate(c)[2]
            except ScenarioError as exc:
                self._jobs[key] = exc
        job = self._jobs[key]
        if isinstance(job, ScenarioError):
            raise job
        return job

    def _candidate(self, c: Candidate) -> tuple[Candidate, ScenarioSpec, Job]:
        if self._last is None or self._last[0] != c:
            spec = parse_spec(emit_mapping(self.base, c, source=self.source), self.source)
            job = derive.build_job(spec, self.source, BatchSizes(c.microbatches, c.microbatch_size))
            self._last = (c, spec, job)
        return self._last

    def score(self, c: Candidate) -> Outcome:
        """Prune or score one candidate."""
        if c.schedule in AUTO_POLICIES:
            return self._score_searched(c)
        prepared = self._prepare(c)
        if isinstance(prepared, Outcome):
            return prepared
        derived = prepared.derived
        # the timeline's inputs, by value: candidates that differ only in what leaves them
        # alone (the ZeRO stage where the optimizer step does not change) share one
        shared = (
            prepared.key,
            derived.costs,
            derived.tail_ms,
            derived.optimizer_ms,
            prepared.where,
            not c.dp_overlap,
        )
        if shared not in self._timelines:
            scenario = self._scenario(c, prepared.schedule, derived, prepared.topology)
            step = simulate_step(scenario, cache=self._evaluator_cache)
            self._timelines[shared] = (step.report, digest(shared))
        report, named = self._timelines[shared]
        return _outcome(c, restated(report, derived.accounting), named, self.accounting)

    def assess(self, c: Candidate) -> Outcome:
        """Prune one candidate, or say what is known of its step before simulating it: a
        floor under its step time, one under its peak memory, and a digest of every input
        of its step (equal digests: the same step under another name). A searched policy
        gets floors of zero and no digest (its schedule is known only once searched)."""
        if c.schedule in AUTO_POLICIES:
            return Outcome()
        prepared = self._prepare(c)
        if isinstance(prepared, Outcome):
            return prepared
        derived, accounting = prepared.derived, prepared.derived.accounting
        if prepared.key not in self._bounds:
            self._bounds[prepared.key] = bound_program(prepared.schedule)
        floor = step_floor_ms(
            self._bounds[prepared.key], derived.costs, derived.tail_ms, not c.dp_overlap
        )
        least = max(accounting.device_memory(d, float(p))[1] for d, p in enumerate(prepared.peaks))
        inputs = (
            self._digests.schedule(prepared.key, prepared.schedule),
            self._digests.costs(derived),
            (prepared.where[0], sorted(prepared.where[1]), *prepared.where[2:]),
            not c.dp_overlap,
            c.microbatch_size,
        )
        return Outcome(floor_ms=floor, least_peak_bytes=least, same=digest(inputs))

    def _prepare(self, c: Candidate) -> _Prepared | Outcome:
        """The candidate's schedule, costs and topology, or the Outcome that prunes it (a
        schedule constraint, a layout ``pipesim run`` refuses, memory by the walk)."""
        key = (c.schedule, c.devices, c.microbatches, c.virtual_stages, bool(c.delay_wgrad))
        schedule = self._schedule(key)
        if isinstance(schedule, str):
            return Outcome(reason=schedule)
        try:  # what pipesim run would refuse (a data-parallel group across nodes, ...)
            derived = self._model_costs(key, schedule, c)
            topology, where = self._topology(key, schedule, c)
        except ScenarioError as exc:
            return Outcome(reason=self._refused(exc))
        peaks = self._walks.peaks(key, derived.costs)
        if exceeds(peaks, derived.accounting):  # what the Report checks
            return Outcome(reason=capacity_reason(derived.accounting))
        return _Prepared(key, schedule, derived, topology, where, peaks)

    def _scenario(
        self, c: Candidate, schedule: Schedule, derived: ModelCosts, topology: Topology
    ) -> Scenario:
        """The Scenario ``build_scenario`` makes of the candidate, from the cached pieces."""
        spec = self.candidate_spec(c)
        return Scenario(
            name=spec.name,
            description=spec.description,
            schedule=schedule,
            costs=derived.costs,
            topology=topology,
            microbatch_size=c.microbatch_size,
            mode=Mode(spec.pipeline.mode),
            seq_len=spec.model.seq_len,
            spec=spec,
            accounting=derived.accounting,
            tail_ms=derived.tail_ms,
            tail_after_flush=not c.dp_overlap,
            optimizer_ms=derived.optimizer_ms,
            costs_per_chunk=False,
            expert_parallel=derived.expert_parallel,
        )

    def _refused(self, exc: ScenarioError) -> str:
        text = str(exc).splitlines()[0].removeprefix(f"{self.source}: ")
        return f"cannot be laid out: {text}"

    def _schedule(self, key: tuple) -> Schedule | str:
        """The schedule of (policy, devices, microbatches, chunks, delay_wgrad), or why not."""
        if key not in self._schedules:
            name, devices, microbatches, chunks, delay = key
            options = {"delay_wgrad": True} if delay else {}
            try:
                schedule = get_schedule(name, devices, microbatches, chunks, **options)
                self._walks.add(key, schedule)
                self._stages[key] = (
                    schedule.placement,
                    tuple(map(schedule.model_stage, range(schedule.stages))),
                    schedule.has_reduce_grad_posts,
                    frozenset(communicating_pairs(schedule)),  # what the links depend on
                )
                self._schedules[key] = schedule
            except ScheduleError:
                self._schedules[key] = f"{name} needs {POLICIES[name].constraints}"
        return self._schedules[key]

    def _model_costs(self, key: tuple, schedule: Schedule, c: Candidate) -> ModelCosts:
        """The costs of schedule ``key`` for the candidate: every key of the candidate but
        the policy's name and chunk count, which reach the costs only through where the
        stages sit (``_stages``), picks them."""
        costs_key = (self._stages[key][:3], schedule.microbatches, _job_key(c), c.devices)
        if costs_key not in self._derived:
            job = self.candidate_job(c)
            self._derived[costs_key] = derive.model_costs(job, schedule, self.source)
        return self._derived[costs_key]

    def _topology(self, key: tuple, schedule: Schedule, c: Candidate) -> tuple[Topology, tuple]:
        """The topology and the key it is cached under."""
        where = (schedule.devices, self._stages[key][3], c.tensor, c.data)
        if where not in self._topologies:
            job = self.candidate_job(c)
            self._topologies[where] = derive.topology(job, schedule, self.source)
        return self._topologies[where], where

    def _score_searched(self, c: Candidate) -> Outcome:
        """zb-auto / v-auto: the whole build, search included, then the step."""
        try:
            scenario = build_scenario(self.candidate_spec(c), self.source)
        except (ScenarioError, ScheduleError) as exc:
            text = str(exc).splitlines()[0].removeprefix(f"{self.source}: ")
            return Outcome(reason=f"{c.schedule}: {text}")
        if _exceeds_before(scenario):
            return Outcome(reason=capacity_reason(scenario.accounting))
        report = simulate_step(scenario, cache=self._evaluator_cache).report
        return _outcome(c, report, f"search:{c}", self.accounting)


def _outcome(c: Candidate, report: Report, timeline: str, accounting: Accounting) -> Outcome:
    """The candidate scored from its Report, or pruned where the simulation found it over
    the memory that ``accounting`` allows."""
    if report.oom:  # the walk is a lower bound: a tie the other way round found it
        return Outcome(reason=capacity_reason(accounting) + " (found by simulation)")
    peaks = tuple(d.peak_memory_bytes for d in report.per_device)
    row = PlanRow(
        c,
        step_time_ms=report.step_time_ms,
        tokens_per_second=report.tokens_per_second,
        mfu=report.mfu,
        peak_memory_bytes=max(peaks),
        bubble_fraction=report.bubble_fraction,
        evaluator=report.evaluator,
        peak_memory_bytes_per_device=peaks,
    )
    return Outcome(row=row, timeline=timeline)


def _job_key(c: Candidate) -> tuple:
    """The keys of a candidate that reach its job: all but the policy, the pipeline size
    and the chunk count."""
    return (
        c.tensor,
        c.data,
        c.microbatch_size,
        c.microbatches,
        c.recompute,
        c.zero_stage,
        c.partition,
        c.sequence_parallel,
        c.dp_overlap,
        c.tp_overlap,
        c.expert,
        c.delay_wgrad,
    )


def restated(report: Report, accounting: Accounting) -> Report:
    """The Report of the same timeline under another static memory (another ZeRO stage):
    each device's static and peak memory and its OOM flag, as ``build_report`` sets them."""
    per_device = []
    for d in report.per_device:
        runtime, total = accounting.device_memory(d.device, d.peak_activation_bytes)
        per_device.append(
            replace(
                d,
                static_memory_bytes=float(accounting.static_memory_bytes[d.device]),
                peak_memory_bytes=total,
                oom=accounting.over_capacity(total),
                runtime_memory_bytes=runtime,
            )
        )
    return replace(report, per_device=tuple(per_device), oom=any(d.oom for d in per_device))


def _exceeds_before(scenario: Scenario) -> bool:
    accounting: Accounting = scenario.accounting
    peaks = peak_activation_bytes(memory_program(scenario.schedule), scenario.costs)
    return exceeds(peaks, accounting)


# ---------------------------------------------------------------------------
# Workers: plain data in, plain data out (picklable, for processes and Dask)


class ChunkScorer:
    """Assesses or scores chunks of one base scenario with one ``Scorer``, made at the
    first chunk and kept for every later one this object takes: a chunk is ``(assess,
    [(index, candidate), ...])``, assessed (``Scorer.assess``) or scored
    (``Scorer.score``). The planner makes one per run; a copy sent to a worker process or
    a Dask worker is pickled without the Scorer and makes its own there, which serves
    every chunk that worker takes (a chunk holds candidates that share their pieces)."""

    def __init__(self, spec_data: Mapping[str, Any], source: str) -> None:
        self.spec_data, self.source = spec_data, source
        self.scorer: Scorer | None = None

    def __call__(
        self, chunk: tuple[bool, Sequence[tuple[int, Candidate]]]
    ) -> list[tuple[int, Outcome]]:
        if self.scorer is None:
            self.scorer = Scorer(self.spec_data, self.source)
        assess, items = chunk
        done = self.scorer.assess if assess else self.scorer.score
        return [(index, done(c)) for index, c in items]

    def __reduce__(self) -> tuple:
        return (ChunkScorer, (self.spec_data, self.source))


__all__ = ["ChunkScorer", "Outcome", "Scorer", "restated"]
