"""The V candidates built the controllable-memory and Zero Bubble ways (greedy squeeze of
V-Half and V-Min, the building-block family under a chunk limit, ZB-V timed on the real
costs): hand-checked on small cases, within their memory, and never better than what
v-auto returns under the same limit."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.schedules.ir import Action, F, I, W, v_placement
from pipesim.schedules.policies import v_half
from pipesim.schedules.validity import validate
from pipesim.search import auto, search_schedule, v_candidates
from pipesim.search.greedy import make_problem
from pipesim.search.v_memory import memory_orders, memory_schedules
from pipesim.search.v_memory_phases import F0, F1, I0, I1, W0, W1, peak
from pipesim.search.v_patterns import activation_peak, greedy_v_schedule, place_weights
from pipesim.search.v_timed import timed_v_schedule
from pipesim.sim.engine import simulate
from pipesim.sim.links import Link, Topology
from pipesim.sim.memory import memory_timelines
from tests.search.orders import split_costs


def v_costs(devices, *costs, **named):
    """Costs of a V: two chunks per device."""
    return split_costs(2 * devices, *costs, **named)


def engine_peak(schedule, costs, topology=None):
    trace = simulate(schedule, costs, topology)
    timelines = memory_timelines(trace, schedule, costs)
    return trace.makespan_ms, max(float(t.activation_bytes.max()) for t in timelines)


def test_weights_take_the_free_units_chunk_1_first():
    """F0 at 0, F1 at 1, I1 at 2, I0 at 4: unit 3 is free and owes chunk 1's W, chunk 0's
    W follows the last pass. Held: 1, 2, 2, 1 (W1 at 3), 1, 0: peak 2."""
    rows = [[0], [1], [2], [4]]
    assert place_weights(rows, per_chunk=True) == [[0], [1], [2], [4], [3], [5]]
    assert place_weights(rows, per_chunk=False) == [[0], [1], [2], [4], [3, 5]]
    assert activation_peak(rows) == 2  # the W implied in the free unit 3


def test_greedy_v_half_keeps_the_blocks_memory_and_is_valid():
    """The squeeze never raises a device above the repeated block's largest peak: V-Half
    holds (D + 2) // 2 microbatches' worth of a 1F1B stage (D + 2 chunk activations for an
    even D, counted from F to W)."""
    for devices, microbatches in ((4, 8), (6, 12)):
        schedule = greedy_v_schedule(devices, microbatches, v_half.blocks(devices), "v")
        validate(schedule)
        costs = v_costs(devices, weight_grad=1.0)  # all bytes kept until W: counts chunks
        assert engine_peak(schedule, costs)[1] <= devices + 2


def test_timed_zbv_is_zero_bubble_with_equal_costs():
    """F = I = W = t per chunk and no latency: the last device starts at (D - 1) t and never
    waits again, so the step takes 6 m t + (D - 1) t (ZB-V's zero bubble), at 1F1B's
    memory (2D chunks)."""
    devices, microbatches = 4, 8
    costs = v_costs(devices, weight_grad=1.0)
    problem = make_problem(v_placement(devices), microbatches, costs, None, 2.0 * devices)
    schedule = timed_v_schedule(problem, "v")
    validate(schedule)
    makespan, held = engine_peak(schedule, costs)
    assert makespan == 6 * microbatches + devices - 1
    assert held <= 2 * devices


def test_timed_zbv_one_device_runs_the_v_turn_in_order():
    """One device holds both chunks: forward down and back, then the backwards; the W
    passes wait for the end (nothing to fill)."""
    problem = make_problem(v_placement(1), 1, v_costs(1), None, 2.0)
    schedule = timed_v_schedule(problem, "v")
    assert schedule.device_actions[0] == (
        Action(0, F, 0),
        Action(1, F, 0),
        Action(1, I, 0),
        Action(0, I, 0),
        Action(1, W, 0),
        Action(0, W, 0),
    )


def test_the_memory_family_stays_within_its_chunks():
    """Every order the family builds holds at most ``max_chunks`` chunk activations from F
    to W on every device, and is a valid V schedule."""
    for devices, microbatches, chunks in ((4, 4, 4), (4, 8, 5)):
        orders = memory_orders(devices, microbatches, chunks)
        assert orders
        for order in orders:
            codes = [[code for code, _ in row] for row in order]
            assert max(peak(line) for line in codes) <= chunks
            for line in codes:
                assert [line.count(c) for c in (F0, F1, I1, I0, W1, W0)] == [microbatches] * 6
        costs = v_costs(devices, weight_grad=1.0)
        problem = make_problem(v_placement(devices), microbatches, costs, None, float(chunks))
        for schedule in memory_schedules(problem, chunks, 4, "v"):
            validate(schedule)
            assert engine_peak(schedule, costs)[1] <= chunks


@st.composite
def limited_cases(draw):
    devices = draw(st.integers(2, 4))
    microbatches = draw(st.integers(devices, devices + 2))
    whole = st.integers(1, 3).map(float)
    costs = v_costs(devices, draw(whole), draw(whole), draw(whole), 2.0, 0.5)
    latency_us = draw(st.sampled_from([0.0, 100.0, 500.0]))
    topology = Topology(devices, Link(latency_us=latency_us)) if latency_us else None
    chunks = draw(st.integers(devices, 2 * devices))
    return devices, microbatches, costs, topology, 2.0 * chunks


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=limited_cases())
def test_v_auto_is_never_above_the_new_candidates_and_never_over_the_limit(monkeypatch, case):
    monkeypatch.setattr(auto, "IMPROVE_ACTIONS", 1_000)  # the climb is not under test
    devices, microbatches, costs, topology, limit = case
    found = search_schedule("v-auto", devices, microbatches, costs, topology, limit)
    assert found.peak_activation_bytes <= limit * (1 + 1e-9)
    problem = make_problem(v_placement(devices), microbatches, costs, topology, limit)
    candidates = [timed_v_schedule(problem, "v")]
    chunks = int(limit / 2.0)
    if chunks <= v_candidates.MEMORY_FAMILY_CHUNKS * 2 * devices:  # where v-auto runs the family
        candidates += memory_schedules(problem, chunks, v_candidates.MEMORY_FAMILY_OFFERS, "v")
    for candidate in candidates:
        if candidate is None:
            continue
        makespan, held = engine_peak(candidate, costs, topology)
        if held <= limit * (1 + 1e-9):
            assert found.makespan_ms <= makespan * (1 + 1e-9)
