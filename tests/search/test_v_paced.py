"""The paced V orders (``pipesim.search.v_paced``): the due times of an empty pipeline by
hand, a case where they beat what v-auto found without them, and valid orders within the
limit for any small case."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.schedules.ir import v_placement
from pipesim.schedules.validity import validate
from pipesim.search import v_candidates
from pipesim.search.greedy import make_problem
from pipesim.search.v_paced import offsets, paced_schedules
from pipesim.sim.engine import simulate
from pipesim.sim.links import Link, Topology
from pipesim.sim.memory import memory_timelines
from tests.search.orders import split_costs


def engine_run(schedule, costs, topology=None):
    trace = simulate(schedule, costs, topology)
    timelines = memory_timelines(trace, schedule, costs)
    return trace.makespan_ms, max(float(t.activation_bytes.max()) for t in timelines)


def test_due_times_follow_the_empty_pipelines_chains():
    """Two devices, four stages (device 0: 0 and 3, device 1: 1 and 2), F = 0.5, I = 0.6,
    0.1 ms a hop between devices and none from stage 1 to 2 (one device). Forwards start
    at 0, 0.5 + 0.1, 0.6 + 0.5, 1.1 + 0.5 + 0.1; the last stage's I right after its F ends
    (2.2), then each earlier one an I (and a hop where the device changes) later: 2.9,
    3.5, 4.2."""
    costs = split_costs(4, 0.5, 0.6, 0.3)
    problem = make_problem(v_placement(2), 1, costs, Topology(2, Link(latency_us=100.0)), 2.0)
    forward, backward = offsets(problem)
    assert forward == pytest.approx([0.0, 0.6, 1.1, 1.7])
    assert backward == pytest.approx([4.2, 3.5, 2.9, 2.2])


def test_paced_orders_beat_the_search_without_them():
    """Five devices, ten microbatches, F = 0.5, I = 0.6, W = 0.3 per chunk, 0.1 ms links,
    room for five chunk activations per device (a V-Min's: half of 1F1B's ten). v-auto
    without the paced orders found 49.4 ms (its best: the heuristic, climbed); the fastest
    paced order alone takes 46.5 ms, within the limit."""
    devices, microbatches = 5, 10
    costs = split_costs(2 * devices, 0.5, 0.6, 0.3)
    topology = Topology(devices, Link(latency_us=100.0))
    limit = float(devices)
    problem = make_problem(v_placement(devices), microbatches, costs, topology, limit)
    runs = [engine_run(s, costs, topology) for s in paced_schedules(problem, "v-auto")]
    assert min(makespan for makespan, _ in runs) == pytest.approx(46.5)
    assert max(peak for _, peak in runs) <= limit + 1e-9
    sources = [source for _, source in v_candidates.v_candidates(problem, "v-auto")]
    assert "paced" in sources  # 300 actions, a tight limit: the search offers them


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    devices=st.integers(2, 4),
    microbatches=st.integers(1, 8),
    chunks=st.integers(2, 8),
    input_ms=st.sampled_from([0.5, 0.6, 1.0]),
    weight_ms=st.sampled_from([0.0, 0.3, 0.5]),
    latency_us=st.sampled_from([0.0, 100.0]),
)
def test_paced_orders_are_valid_and_fit(
    devices, microbatches, chunks, input_ms, weight_ms, latency_us
):
    """Every order built runs every pass once, in an order the engine can run, and never
    holds more than the limit (each device's bytes follow its own order alone)."""
    costs = split_costs(2 * devices, 0.5, input_ms, weight_ms)
    topology = Topology(devices, Link(latency_us=latency_us)) if latency_us else None
    limit = float(min(chunks, 2 * devices))
    problem = make_problem(v_placement(devices), microbatches, costs, topology, limit)
    for schedule in paced_schedules(problem, "v-auto"):
        validate(schedule)
        assert schedule.num_actions == 3 * 2 * devices * microbatches
        assert engine_run(schedule, costs, topology)[1] <= limit + 1e-9
