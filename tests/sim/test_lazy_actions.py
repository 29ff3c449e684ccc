"""A fast Trace's actions are made on first read, from the schedule's; a step of a bulk
policy, its report and its memory are computed without making one Action, and what is
made when read is what the eager lists give, row for row."""

from __future__ import annotations

import numpy as np
import pytest

from pipesim.schedules import get_schedule
from pipesim.schedules.ir import Schedule
from pipesim.schedules.lists import ActionLists, MadeOnRead
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.fast import EvaluatorCache
from pipesim.sim.fast.evaluator import fast_simulate
from pipesim.sim.links import Link, Topology
from pipesim.sim.memory import memory_timelines
from pipesim.sim.metrics import build_report
from tests.sim.test_fast import assert_same_trace
from tests.sim.test_fast_paths import COLUMNS

BULK = {"1f1b": (1,), "gpipe": (1,), "eager-1f1b": (1,), "interleaved-1f1b": (2, 3), "zbv": (2,)}
CASES = [
    (name, p, m, v)
    for name, chunks in BULK.items()
    for v in chunks
    for p in (1, 2, 3, 4)
    for m in (1, 3, 4, 8)
    if name != "interleaved-1f1b" or m % max(1, m // p) == 0
]


def eager(schedule: Schedule) -> Schedule:
    lists = tuple(tuple(actions) for actions in schedule.device_actions)
    return Schedule(lists, schedule.placement, schedule.chains, schedule.name)


def costs_for(schedule: Schedule):
    stages = schedule.model_stages
    return uniform_costs(
        stages,
        [1.0 + s / 4 for s in range(stages)],
        backward_input_ms=1.5,
        backward_weight_ms=0.5,
        activation_bytes=1e6,
    )


def step(schedule: Schedule, topology: Topology):
    costs = costs_for(schedule)
    trace = fast_simulate(
        schedule, costs, topology, tail_ms=[0.25] * schedule.devices, cache=EvaluatorCache()
    )
    memory = memory_timelines(trace, schedule, costs)
    report = build_report(trace, schedule, costs, 1, memory=memory)
    return trace, report


@pytest.mark.parametrize(("name", "p", "m", "v"), CASES)
def test_a_fast_step_of_a_bulk_policy_makes_no_action_and_reads_as_the_eager_one(name, p, m, v):
    schedule = get_schedule(name, p, m, v)
    topology = Topology(p, default=Link(latency_us=5, bandwidth_gbps=100))
    trace, report = step(schedule, topology)
    assert isinstance(trace.actions, MadeOnRead) and len(trace.actions) == len(trace.end)
    assert not trace.actions.made and not schedule.device_actions.made
    twin_trace, twin_report = step(eager(schedule), topology)
    assert report == twin_report
    for column in COLUMNS:
        assert np.array_equal(getattr(trace, column), getattr(twin_trace, column)), column
    assert trace.actions == twin_trace.actions and trace.names() == twin_trace.names()
    assert trace.actions[-1] is None  # the tail rows have none
    engine = simulate(schedule, costs_for(schedule), topology, tail_ms=[0.25] * p)
    assert_same_trace(engine, trace)


def test_a_trace_of_a_group_schedule_shows_its_groups_and_their_members():
    schedule = get_schedule("dualpipev", 4, 8, 2)
    topology = Topology(4, default=Link(latency_us=5, bandwidth_gbps=100))
    trace, _ = step(schedule, topology)
    engine = simulate(schedule, costs_for(schedule), topology, tail_ms=[0.25] * 4)
    assert_same_trace(engine, trace)
    groups = [a for a in trace.actions if a is not None and a.sub_actions is not None]
    assert groups and all(len(a.atoms) == 2 for a in groups)


def test_a_report_alone_hashes_no_schedule_and_makes_no_message_column(monkeypatch):
    schedule, other, same = (get_schedule("zbv", 4, m, 2) for m in (8, 16, 8))
    hashed = []  # the schedules whose content the cache hashes, from here on
    digest = ActionLists.digest
    monkeypatch.setattr(ActionLists, "digest", lambda lists: hashed.append(lists) or digest(lists))
    costs = uniform_costs(8, 1.0, 2.0)
    topology = Topology(4, default=Link(latency_us=5, bandwidth_gbps=100))
    cache = EvaluatorCache()
    trace = fast_simulate(schedule, costs, topology, cache=cache)
    build_report(trace, schedule, costs)
    index = cache.index(schedule)
    made = {"src", "dst", "kind", "stage", "microbatch", "action"}
    assert hashed == [] and not made & set(vars(index.messages))
    trace.lay_out()  # the transfer rows read every message column
    assert made <= set(vars(index.messages))
    assert cache.index(other) is not index
    assert len(hashed) == 2  # the first schedule is hashed once a second one comes
    assert cache.index(same) is index and cache.index_builds == 2
