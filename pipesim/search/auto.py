"""``zb-auto`` and ``v-auto``: the fastest order the search finds under a memory limit.

The fixed zero-bubble recipes (ZB-H1, ZB-H2, ZB-V...) are written for equal F, I and W
and no link latency. These two policies look at the scenario's real costs, links and
``pipeline.memory_limit_bytes`` instead (per device, in the Report's accounting of
``peak_activation_bytes``; default: what 1F1B holds on the same scenario), and return the
fastest schedule they find whose simulated peak stays within the limit on every device.

``zb-auto`` keeps one stage per device (loop placement), ``v-auto`` two, folded in a V
(device d holds stages d and 2D-1-d). What the search produces has the usual three phases:

* warm-up: each device runs as many forwards as its memory allows before its first
  backward arrives (the first device the most, the last one a single one);
* steady state: an ``I`` as soon as its gradient arrives (the critical path), then the next
  ``F`` while memory allows; the ``W`` passes fill the gaps between them, or run where the
  next forward needs the bytes they give back;
* cool-down: the remaining ``I`` passes walk back up the pipeline, and the ``W`` passes
  still owed fill the time the devices would otherwise wait for them.

Search, then verify:

1. starting candidates: the fixed policies of the family (``1f1b``, ``zb-h1``, ``zb-h2``,
   ``eager-1f1b``; ``zbv``, ``v-half``, ``v-min``) that can be built and fit the limit;
2. the constructive heuristic (``pipesim.search.greedy``) under a few rule variants;
3. for ``v-auto``, V-Half and V-Min squeezed greedily with their W placed
   (``pipesim.search.v_patterns``), ZB-V built greedily on the real costs and links
   (``pipesim.search.v_timed``), the controllable-memory family repeated, squeezed and
   reordered under the limit's chunk count where it is at most half of 1F1B's
   (``pipesim.search.v_memory``), under such a limit on cases past a few hundred actions
   the microbatches let in one per period and run by due time (``pipesim.search.v_paced``),
   and the building blocks nearest the limit (``pipesim.search.blocks``);
4. a local improvement pass (``pipesim.search.improve``): a strict hill climb, then one
   that also crosses plateaus, each from the best so far, and both again from the best
   building block where that is another; for ``v-auto`` on small cases (at most
   ``INSERTION_MOST_ACTIONS`` actions) a climb by insertion moves, each pass moved up to a
   few places along its device's list (``pipesim.search.insertion``), from the best, and
   on the smaller of them (``INSERTION_TIGHT_MOST_ACTIONS``) under a tight limit (at most
   ``INSERTION_TIGHT`` of 1F1B's) more: from the fastest candidate of another
   construction too, and by moves repeated for every microbatch; on larger ones under
   a tight limit (up to ``insertion.CHASE_MOST_ACTIONS``) one climb of short moves, each
   taken chased for the next microbatches (``insertion.chase_phase``);
5. for ``v-auto`` up to ``ANNEAL_MOST_ACTIONS`` actions under a tight limit, or any limit
   given where the climbs leave more than ``ANNEAL_GAP`` to the bound: simulated
   annealing from the best on a quick timing of the split passes
   (``pipesim.search.anneal``), whose fastest order goes to the engine too.

Every candidate runs on the engine; its makespan and peak are the engine's, never a
formula's, and the best that fits wins (the earliest found on a tie). The annealing's
random moves come from a generator with a fixed seed, so the same inputs give the same
schedule.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from pipesim.schedules import fit_virtual_stages, get_schedule
from pipesim.schedules.ir import Action, Schedule, ScheduleError, single_chain, v_placement
from pipesim.schedules.validity import validate
from pipesim.search.anneal import anneal_phase
from pipesim.search.blocks import block_schedules
from pipesim.search.bound import lower_bound
from pipesim.search.greedy import Problem, Stalled, construct, make_problem
from pipesim.search.improve import improve
from pipesim.search.insertion import CHASE_MOST_ACTIONS, chase_phase, insertion_phase
from pipesim.search.result import AUTO_POLICIES, FAMILIES, SearchError, SearchResult
from pipesim.search.rules import RULES, v_only
from pipesim.search.tail import Tail, engine_options
from pipesim.search.v_candidates import v_candidates
from pipesim.sim.costs import Costs, uniform_costs
from pipesim.sim.engine import DeadlockError, simulate
from pipesim.sim.links import Topology
from pipesim.sim.memory import memory_timelines
from pipesim.sim.trace import Trace

# Constructions run about this many actions' worth in all (at least the first four).
CONSTRUCT_ACTIONS = 100_000
# The improvement pass runs about this many actions' worth of simulations in all.
IMPROVE_ACTIONS = 600_000
# The V's building blocks: about this many actions' worth of schedules built (at least 4);
# the best one is climbed from too when within this fraction of the best candidate.
BLOCK_ACTIONS = 150_000
NEAR_BLOCK = 0.02
# Small V cases (at most this many actions) then climb by insertion moves (``pipesim.
# search.insertion``, each pass at most INSERTION_REACH places) on the improvement
# pass's budget (at most INSERTION_MOST_CANDIDATES); a quarter of it, one
# climb, unless the limit is tight (at most INSERTION_TIGHT of what 1F1B holds) and the
# case smaller still (at most INSERTION_TIGHT_MOST_ACTIONS actions).
INSERTION_MOST_ACTIONS = 300
INSERTION_TIGHT_MOST_ACTIONS = 250
INSERTION_MOST_CANDIDATES = 4_000
INSERTION_TIGHT = 0.75
INSERTION_REACH = 8
# V cases with at most ANNEAL_MOST_ACTIONS actions, under a tight limit or more than
# ANNEAL_GAP above the bound after the climbs, then anneal from the best
# (``pipesim.search.anneal``), timing ANNEAL_SCALE times as many passes as the
# improvement pass simulates (a pass retimed there costs a thirtieth to a sixtieth of
# one simulated on the engine), in at most ``anneal.MOST_ITERATIONS`` moves.
ANNEAL_MOST_ACTIONS = 1_500
ANNEAL_GAP = 0.02
ANNEAL_SCALE = 100
TOLERANCE = 1e-9


@dataclass(frozen=True, slots=True)
class Evaluated:
    schedule: Schedule
    makespan_ms: float
    peak_bytes: float
    source: str


def placement_of(name: str, devices: int) -> tuple[int, ...]:
    if name not in AUTO_POLICIES:
        raise SearchError(f"unknown search policy {name!r}; allowed: {', '.join(AUTO_POLICIES)}")
    return v_placement(devices) if AUTO_POLICIES[name] == 2 else tuple(range(devices))


def minimum_limit_bytes(name: str, devices: int, microbatches: int, costs: Costs) -> float:
    """The smallest per-device limit any order of the family can keep: one microbatch at a
    time on each device, so a device holds the activations of its stages of one microbatch
    (a V's two chunks together: chunk 0's is still held when chunk 1's forward starts)."""
    placement = placement_of(name, devices)
    _check_costs(name, devices, costs)
    held = [0.0] * devices
    for stage, device in enumerate(placement):
        held[device] += costs.activation_memory_bytes[stage]
    return max(held) if microbatches > 0 else 0.0


def evaluate(
    schedule: Schedule,
    costs: Costs,
    topology: Topology | None,
    source: str,
    tail: Tail | None = None,
) -> Evaluated:
    """Run ``schedule`` on the engine: its makespan (the step's end, with ``tail``'s
    end-of-step work where given) and its largest per-device peak."""
    return run_candidate(schedule, costs, topology, source, tail)[0]


def run_candidate(
    schedule: Schedule,
    costs: Costs,
    topology: Topology | None,
    source: str,
    tail: Tail | None = None,
) -> tuple[Evaluated, Trace]:
    trace = simulate(schedule, costs, topology, **engine_options(tail))
    timelines = memory_timelines(trace, schedule, costs)
    peak = max((float(t.activation_bytes.max()) for t in timelines if len(t.time)), default=0.0)
    return Evaluated(schedule, trace.makespan_ms, max(peak, 0.0), source), trace


def default_limit_bytes(
    name: str, devices: int, microbatches: int, costs: Costs, topology: Topology | None = None
) -> float:
    """What 1F1B holds on the same work: for ``v-auto``, 1F1B on D stages of two chunks each
    (chunks 2k and 2k+1 make 1F1B's stage k)."""
    chunks = AUTO_POLICIES[name]
    schedule = get_schedule("1f1b", devices, microbatches)
    if chunks == 1:
        return evaluate(schedule, costs, topology, "1f1b").peak_bytes
    merged = uniform_costs(
        devices,
        activation_memory_bytes=_merge(costs.activation_memory_bytes, chunks),
        weight_grad_memory_bytes=_merge(costs.weight_grad_memory_bytes, chunks),
    )
    return evaluate(schedule, merged, None, "1f1b").peak_bytes


def _merge(values: tuple[float, ...], chunks: int) -> list[float]:
    return [sum(values[k * chunks : (k + 1) * chunks]) for k in range(len(values) // chunks)]


def _check_costs(name: str, devices: int, costs: Costs) -> None:
    stages = devices * AUTO_POLICIES[name]
    if costs.stages < stages:
        raise SearchError(
            f"{name} needs costs for {stages} stages ({devices} devices x "
            f"{AUTO_POLICIES[name]} chunks), got {costs.stages}"
        )


def search_schedule(
    name: str,
    devices: int,
    microbatches: int,
    costs: Costs,
    topology: Topology | None = None,
    memory_limit_bytes: float | None = None,
    progress: Callable[[int], None] | None = None,
    tail: Tail | None = None,
) -> SearchResult:
    """The fastest schedule of the family ``name`` found within the memory limit.

    ``costs`` has one entry per stage (``devices`` for ``zb-auto``, ``2 * devices`` for
    ``v-auto``); ``memory_limit_bytes`` is per device (None: what 1F1B holds);
    ``progress(1)`` is called after each candidate (n more done, as everywhere in pipesim);
    ``tail``: the end-of-step all-reduce and optimizer step per device, counted in every
    candidate's makespan as the engine counts it (``pipesim.search.tail``).
    """
    began = time.perf_counter()
    if devices < 1 or microbatches < 1:
        raise SearchError(f"devices and microbatches must be >= 1, got {devices=}, {microbatches=}")
    placement = placement_of(name, devices)
    floor = minimum_limit_bytes(name, devices, microbatches, costs)
    if (given := memory_limit_bytes) is None:  # what 1F1B holds: never a tight limit
        usual = default_limit_bytes(name, devices, microbatches, costs, topology)
        memory_limit_bytes = max(usual, floor)
    if memory_limit_bytes < floor * (1 - 1e-12):
        raise SearchError(
            f"memory limit {memory_limit_bytes:.12g} bytes is below the minimum {floor:.12g} "
            f"bytes any {name} order can reach ({devices} devices)"
        )
    search = _Search(costs, topology, memory_limit_bytes, progress, tail)
    search.starting_candidates(FAMILIES[name], devices, microbatches)
    problem = make_problem(placement, microbatches, costs, topology, memory_limit_bytes)
    search.constructed(problem, name)
    if AUTO_POLICIES[name] == 2:
        for schedule, source in v_candidates(problem, name):
            search.offer(schedule, source)
        search.built_from_blocks(problem, name)
    best = search.best
    if best is None:  # nothing fitted: should not happen above the minimum
        raise SearchError(f"no {name} order found within {memory_limit_bytes:.12g} bytes")
    bound = lower_bound(problem, costs.backward_ms, costs.overhead_ms, tail)
    if best.makespan_ms > (floor_ms := bound.makespan_ms * (1 + 1e-8)):  # else none is faster
        search.climbed(problem, name, given, floor_ms)
    best = search.best
    schedule = replace(best.schedule, name=name)
    validate(schedule)
    return SearchResult(
        schedule=schedule,
        makespan_ms=best.makespan_ms,
        peak_activation_bytes=best.peak_bytes,
        limit_bytes=memory_limit_bytes,
        candidates=search.count,
        seconds=time.perf_counter() - began,
        source=best.source,
        lower_bound_ms=bound.makespan_ms,
        lower_bound_part=bound.part,
    )


class _Search:
    """The candidates tried so far and the best one that fits."""

    def __init__(self, costs, topology, limit_bytes, progress, tail=None) -> None:
        self.costs, self.topology, self.limit = costs, topology, limit_bytes
        self.tail = tail
        self.progress = progress
        self.count = 0
        self.best: Evaluated | None = None
        self.best_block: Evaluated | None = None  # the fastest building block that fits
        self.by_source: dict[str, Evaluated] = {}  # the fastest that fits, per construction

    def fits(self, peak_bytes: float) -> bool:
        return peak_bytes <= self.limit * (1 + TOLERANCE) + TOLERANCE

    def offer(self, schedule: Schedule, source: str) -> tuple[Evaluated | None, Trace | None]:
        """Run one candidate; keep it if it fits and beats the best. None if it cannot run."""
        self.count += 1
        try:
            found, trace = run_candidate(schedule, self.costs, self.topology, source, self.tail)
        except (ScheduleError, DeadlockError):
            found, trace = None, None
        if self.progress is not None:
            self.progress(1)  # one more candidate, as sweeps and Monte Carlo count
        if found is None or not self.fits(found.peak_bytes):
            return found, trace
        kept = self.by_source.get(source)
        if " from " not in source and (  # a construction's, not a climb's
            kept is None or found.makespan_ms < kept.makespan_ms * (1 - TOLERANCE)
        ):
            self.by_source[source] = found
        if self.best is None or found.makespan_ms < self.best.makespan_ms * (1 - TOLERANCE):
            self.best = found
        return found, trace

    def starting_candidates(self, family: tuple[str, ...], devices: int, microbatches: int):
        for recipe in family:
            try:
                schedule = get_schedule(
                    recipe, devices, microbatches, fit_virtual_stages(recipe, 1)
                )
            except ScheduleError:
                continue  # its constraints fail at these sizes
            self.offer(schedule, recipe)

    def constructed(self, problem: Problem, name: str) -> None:
        seen: set[tuple[tuple[Action, ...], ...]] = set()
        variants = max(4, CONSTRUCT_ACTIONS // (3 * problem.stages * problem.microbatches))
        looped = len(set(problem.placement)) == problem.stages  # V-only rules are moot
        rules_here = [r for r in RULES if not (looped and v_only(r))]
        for rules in rules_here[:variants]:
            try:
                orders = construct(problem, rules)
            except Stalled:
                continue
            if orders in seen:
                continue
            seen.add(orders)
            self.offer(_schedule(orders, problem, name), "heuristic")

    def built_from_blocks(self, problem: Problem, name: str) -> None:
        """The V's building blocks nearest the limit (``pipesim.search.blocks``)."""
        most = max(4, BLOCK_ACTIONS // (3 * problem.stages * problem.microbatches))
        for schedule in block_schedules(problem, most, name):
            found, _ = self.offer(schedule, "building block")
            if found is None or not self.fits(found.peak_bytes):
                continue
            if self.best_block is None or found.makespan_ms < self.best_block.makespan_ms:
                self.best_block = found

    def improved(self, actions: int, tight=False, floor_ms=0.0, v_shape=False) -> None:
        """Climb from the best candidate, then from the best building block where that is
        another within ``NEAR_BLOCK`` of it (the blocks' steady states are a basin the
        other candidates rarely reach), on half the budget; for a small ``v_shape`` case,
        then by insertion moves (``insertion.insertion_phase``: more where the limit is
        ``tight``), on larger tight ones ``insertion.chase_phase``, until the bound
        ``floor_ms``. ``actions``: per candidate."""
        budget = max(8, min(400, IMPROVE_ACTIONS // actions))
        starts = [(self.best, budget)]
        block = self.best_block
        if block is not None and block is not self.best:
            if block.makespan_ms <= self.best.makespan_ms * (1 + NEAR_BLOCK):
                starts.append((block, max(8, min(400, IMPROVE_ACTIONS // 2 // actions))))
        for start, budget in starts:
            run = self.runner(f"improved from {start.source}")
            improve(start.schedule, budget, run)
            improve(start.schedule, budget, run, settling=True)  # another way up
        if v_shape and actions <= INSERTION_MOST_ACTIONS:
            full = tight and actions <= INSERTION_TIGHT_MOST_ACTIONS
            most = min(INSERTION_MOST_CANDIDATES, IMPROVE_ACTIONS // actions)
            budget = most // (1 if full else 4)
            insertion_phase(self, budget, INSERTION_REACH, full, floor_ms)
        if v_shape and tight and actions > INSERTION_MOST_ACTIONS:
            chase_phase(self, actions, floor_ms)  # larger and tight: moves chased

    def climbed(self, problem: Problem, name: str, given: float | None, floor_ms: float) -> None:
        """The improvement passes (``improved``), then for a V under a ``given`` limit that
        is tight, or whose best order is still more than ``ANNEAL_GAP`` above the bound
        ``floor_ms``, the annealing (``anneal.anneal_phase``)."""
        v_shape, actions = name == "v-auto", 3 * problem.stages * problem.microbatches
        # whether the limit is tight: a 1F1B run, asked once and only where a phase uses it
        asked = given is not None and v_shape
        asked = asked and actions <= max(CHASE_MOST_ACTIONS, ANNEAL_MOST_ACTIONS)
        tight = asked and _tight(problem, self.costs, self.topology, given)
        climb_tight = tight and actions <= CHASE_MOST_ACTIONS
        self.improved(max(self.best.schedule.num_actions, 1), climb_tight, floor_ms, v_shape)
        if given is None or not v_shape or actions > ANNEAL_MOST_ACTIONS:
            return
        if tight or self.best.makespan_ms > floor_ms * (1 + ANNEAL_GAP):
            anneal_phase(self, problem, name, floor_ms, ANNEAL_SCALE * IMPROVE_ACTIONS)

    def runner(self, source: str) -> Callable[[Schedule], tuple[float | None, Trace | None]]:
        """A climb's ``run``: offer the schedule; its makespan where it fits, and its trace."""

        def run(schedule: Schedule) -> tuple[float | None, Trace | None]:
            found, trace = self.offer(schedule, source)
            fits = found is not None and self.fits(found.peak_bytes)
            return (found.makespan_ms if fits else None), trace

        return run


def _tight(problem: Problem, costs: Costs, topology: Topology | None, limit: float) -> bool:
    """Whether a V case's limit is at most ``INSERTION_TIGHT`` of what 1F1B holds."""
    holds = default_limit_bytes("v-auto", problem.devices, problem.microbatches, costs, topology)
    return limit <= INSERTION_TIGHT * holds * (1 + TOLERANCE)


def _schedule(orders: tuple[tuple[Action, ...], ...], problem: Problem, name: str) -> Schedule:
    return Schedule(
        orders, problem.placement, single_chain(problem.stages, problem.microbatches), name
    )
