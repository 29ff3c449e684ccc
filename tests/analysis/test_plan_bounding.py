"""Folding and bounding against scoring everything: the same winner, top k and front."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.analysis.plan import PlanRow, Scorer, build_space, enumerate_space, plan
from pipesim.analysis.plan.bound import FLOOR_MARGIN, bound_program, step_floor_ms
from pipesim.analysis.plan.bounding import Bar
from pipesim.analysis.plan.score import Outcome
from pipesim.scenario.build import parse_spec
from pipesim.schedules import POLICIES, get_schedule
from pipesim.sim.costs import Costs
from tests.analysis.test_plan import SOURCE, small_base

SCHEDULES = ["1f1b", "gpipe", "zb-h1", "interleaved-1f1b", "zbv", "dualpipe", "v-half"]


def uniform_costs(stages: int, forward: float, backward: float) -> Costs:
    """Every layer group alike: F and B given, I and W each half of B; no memory."""
    zero = (0.0,) * stages
    half = (backward / 2,) * stages
    return Costs((forward,) * stages, (backward,) * stages, half, half, zero, zero, zero)


def test_the_floor_of_1f1b_is_its_whole_step_without_links():
    """1F1B on p devices, m microbatches, F and B alike everywhere: the last device waits
    (p - 1) forwards, works m (F + B) and leaves (p - 1) backwards: (m + p - 1)(F + B)."""
    p, m, forward, backward = 4, 8, 1.0, 2.0
    program = bound_program(get_schedule("1f1b", p, m))
    floor = step_floor_ms(program, uniform_costs(p, forward, backward))
    assert floor == pytest.approx((m + p - 1) * (forward + backward) * (1 - FLOOR_MARGIN), abs=0)
    # the tail after the flush adds its longest; as each device falls free, its own
    tail = (5.0, 0.0, 0.0, 1.0)
    flushed = step_floor_ms(program, uniform_costs(p, forward, backward), tail, True)
    assert flushed == pytest.approx((33.0 + 5.0) * (1 - FLOOR_MARGIN), abs=0)
    overlapped = step_floor_ms(program, uniform_costs(p, forward, backward), tail, False)
    # device 0: no head, 24 busy, 3 backwards to wait for none, + 5 = 29 < device 3's 33
    assert overlapped == pytest.approx(33.0 * (1 - FLOOR_MARGIN), abs=0)


def assessed_and_scored(space: tuple[str, ...], gpus: int = 8):
    """Every candidate that fits: ``(candidate, assessment, scored Outcome)``."""
    base = small_base()
    points = enumerate_space(build_space(parse_spec(base, SOURCE), SOURCE, gpus, space))
    scorer = Scorer(base, SOURCE)
    found = []
    for candidate, _ in points:
        if candidate is not None and (assessed := scorer.assess(candidate)).reason is None:
            found.append((candidate, assessed, scorer.score(candidate)))
    return found


ALL_POLICIES = (
    f"pipeline.schedule={','.join(POLICIES)}",
    "pipeline.virtual_stages=1,2",
    "pipeline.microbatch_size=1,2",
    "parallel.zero_stage=1,2,3",
    "model.recompute=true",
    "parallel.tp_overlap=false",
)


def test_floors_never_pass_the_simulated_step_or_peak():
    """Every policy, with and without overlapped data-parallel communication and ZeRO-3's
    gathers, on real links: the floors are bounds, and tight where there is no bubble."""
    found = assessed_and_scored(ALL_POLICIES)
    rows = [(c, a, o.row) for c, a, o in found if o.row is not None]
    assert len(rows) > 300 and {c.schedule for c, _, _ in rows} >= set(SCHEDULES)
    for c, assessed, row in rows:
        assert assessed.floor_ms <= row.step_time_ms, c
        assert assessed.least_peak_bytes <= row.peak_memory_bytes * (1 + 1e-12), c
    tight = [row for _, a, row in rows if a.floor_ms >= row.step_time_ms * (1 - 2e-9)]
    assert tight  # one stage and no tail to wait for: the floor is the step


def test_folded_candidates_are_their_representatives_step_exactly():
    """Equal digests, equal rows (but for the candidate); and the fold finds the copies
    the issue names: other policies on one stage, other partitions of one stage."""
    by_digest = defaultdict(list)
    for candidate, assessed, outcome in assessed_and_scored(ALL_POLICIES):
        if assessed.same:
            by_digest[assessed.same].append((candidate, outcome))
    differ = set()
    for copies in by_digest.values():
        (first, kept), *others = copies
        for candidate, outcome in others:
            assert outcome.reason == kept.reason
            if kept.row is not None:
                assert replace(outcome.row, candidate=first) == kept.row
            differ |= {k for k, v in candidate.keys().items() if first.keys()[k] != v}
    assert {"pipeline.schedule", "model.partition", "parallel.zero_stage"} <= differ


def same_plan(space: tuple[str, ...], gpus: int, top: int, confirm: int) -> int:
    """Plan ``space`` bounded and exhaustive; assert the same output; the bounded-out."""
    bounded = plan(small_base(), SOURCE, gpus, space, top=top, confirm=confirm)
    every = plan(small_base(), SOURCE, gpus, space, top=top, confirm=confirm, exhaustive=True)
    assert [r.to_dict() for r in bounded.results] == [r.to_dict() for r in every.results]
    assert [r.to_dict() for r in bounded.pareto] == [r.to_dict() for r in every.pareto]
    assert every.bounded == 0 and bounded.scored + bounded.bounded == every.scored
    assert bounded.space_size == sum(bounded.pruned.values()) + bounded.bounded + bounded.scored
    return bounded.bounded


def random_space(seed: int) -> tuple[tuple[str, ...], int, int]:
    rng = random.Random(seed)
    schedules = rng.sample(SCHEDULES, rng.randint(2, 4))
    space = (
        f"pipeline.schedule={','.join(schedules)}",
        f"pipeline.virtual_stages={rng.choice(['1', '1,2'])}",
        f"pipeline.microbatch_size={rng.choice(['1', '1,2', '2,4'])}",
        f"model.recompute={rng.choice(['true', 'false,true'])}",
        f"parallel.zero_stage={rng.choice(['0', '1,3'])}",
        f"parallel.dp_overlap={rng.choice(['false', 'false,true'])}",
        "parallel.tp_overlap=false",
    )
    return space, rng.choice([4, 8]), rng.randint(1, 4)


def test_bounded_plans_equal_exhaustive_ones_on_seeded_spaces():
    bounded = [same_plan(*random_space(seed), confirm=0) for seed in range(3)]
    assert sum(bounded) > 0  # the floors did bound some out


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), confirm=st.integers(0, 2))
def test_bounded_plans_equal_exhaustive_ones_on_random_spaces(seed, confirm):
    space, gpus, top = random_space(seed)
    same_plan(space, gpus, top, confirm)


def test_a_candidate_is_bounded_out_only_when_it_can_neither_rank_nor_be_on_the_front():
    rows = [(10.0, 5.0), (12.0, 4.0), (20.0, 1.0)]  # (step ms, peak bytes), ranked
    outcomes = [(i, _scored(step, peak)) for i, (step, peak) in enumerate(rows)]
    bar = Bar.of(outcomes, keep=2)
    floor = Outcome(floor_ms=15.0, least_peak_bytes=4.5)
    assert bar.out(floor)  # 2 faster, and the 12 ms one holds less
    assert not bar.out(replace(floor, least_peak_bytes=3.0))  # could be on the front
    assert not bar.out(replace(floor, floor_ms=12.0))  # could tie the k-th best
    assert not Bar.of(outcomes, keep=3).out(floor)  # could be in the top 3


def _scored(step: float, peak: float) -> Outcome:
    row = PlanRow(None, step, None, None, peak, 0.0, "fast", (peak,))  # type: ignore[arg-type]
    return Outcome(row=row)


@pytest.mark.slow
def test_a_bounded_plan_on_two_dask_worker_processes_is_the_local_one():
    """Waves of chunks on a LocalCluster of two processes: each worker makes its own
    Scorer, the folds and bounds are taken here; the output is the local run's."""
    distributed = pytest.importorskip("distributed")
    space, gpus, top = random_space(1)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        remote = plan(
            small_base(),
            SOURCE,
            gpus,
            space,
            top=top,
            confirm=1,
            executor="dask",
            scheduler=cluster.scheduler_address,
        ).to_dict()
    local = plan(small_base(), SOURCE, gpus, space, top=top, confirm=1).to_dict()
    remote.pop("wall_s"), local.pop("wall_s")
    assert remote == local and local["bounded"] > 0
