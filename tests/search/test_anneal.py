"""The annealing pass: its quick timing is the engine's on links that only delay, its peak
is the engine's, an order that cannot run has no makespan, and the annealing reaches the
optimum of tiny cases and improves the search's order under V-Min's memory."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.schedules.ir import v_placement
from pipesim.search import auto, search_schedule
from pipesim.search.anneal import OrderModel, anneal, passes_of, propose
from pipesim.search.greedy import make_problem
from pipesim.sim.costs import Costs, uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.links import Link, Topology
from pipesim.sim.memory import memory_timelines
from pipesim.sim.trace import Lane
from tests.search.orders import optimum, random_schedule, small_costs

PLACEMENTS = [(0, 1), (0, 1, 2), v_placement(2), v_placement(3), (0, 1, 1, 0, 0, 1)]


@st.composite
def random_orders(draw):
    """A placement, random costs (overhead too), a latency, a limit and a random order
    that fits it."""
    placement = draw(st.sampled_from(PLACEMENTS))
    microbatches = draw(st.integers(1, 4))
    stages, devices = len(placement), max(placement) + 1
    costs, kept = small_costs(
        draw, stages, activation_bytes=1000.0, overhead_ms=draw(st.sampled_from([0.0, 0.25]))
    )
    topology = Topology(devices, Link(latency_us=draw(st.sampled_from([0.0, 500.0, 1500.0]))))
    held = [sum(kept[s] for s in range(stages) if placement[s] == d) for d in range(devices)]
    limit = max(held) * draw(st.sampled_from([1.0, 2.0, 1e9]))
    rng = random.Random(draw(st.integers(0, 2**16)))
    schedule = random_schedule(placement, microbatches, costs, limit, rng)
    return placement, microbatches, costs, topology, limit, schedule


@settings(max_examples=60, deadline=None)
@given(case=random_orders())
def test_the_quick_timing_and_peaks_are_the_engines(case):
    placement, microbatches, costs, topology, limit, schedule = case
    if schedule is None:
        return  # the walk got stuck: no order to time
    problem = make_problem(placement, microbatches, costs, topology, limit)
    model = OrderModel(problem, costs.overhead_ms)
    orders = passes_of(schedule)
    trace = simulate(schedule, costs, topology)
    assert model.makespan(orders) == pytest.approx(trace.makespan_ms, rel=1e-12)
    clocks = model.timing(orders).clocks
    compute = trace.lane == Lane.COMPUTE
    for device in range(len(orders)):
        mine = trace.end[compute & (trace.device == device)]
        assert clocks[device] == pytest.approx(max(mine, default=0.0), rel=1e-12, abs=1e-12)
    peaks = [float(t.activation_bytes.max()) for t in memory_timelines(trace, schedule, costs)]
    assert [model.peak(order) for order in orders] == pytest.approx(peaks)
    assert model.makespan(orders, cutoff_ms=trace.makespan_ms * 0.999) is None


@settings(max_examples=60, deadline=None)
@given(case=random_orders(), seed=st.integers(0, 2**16))
def test_a_retimed_order_is_timed_as_from_the_start(case, seed):
    """After a random move, the timing resumed from the first changed start equals the
    timing run from the beginning, pass by pass (or both say the order cannot run)."""
    placement, microbatches, costs, topology, limit, schedule = case
    if schedule is None:
        return
    model = OrderModel(make_problem(placement, microbatches, costs, topology, limit))
    orders = passes_of(schedule)
    before = model.timing(orders)
    proposed = propose(orders, random.Random(seed))
    if proposed is None:
        return
    device, changed = proposed
    after = [changed if d == device else order for d, order in enumerate(orders)]
    first = next(
        at for at, (a, b) in enumerate(zip(orders[device], changed, strict=True)) if a != b
    )
    resumed, full = model.retimed(after, before, device, first), model.timing(after)
    assert (resumed is None) == (full is None)
    if full is not None:
        assert resumed.starts == full.starts
        assert resumed.clocks == full.clocks


def _model(placement, microbatches, costs, limit=1e9, topology=None):
    return OrderModel(make_problem(placement, microbatches, costs, topology, limit))


def test_an_order_that_cannot_run_has_no_makespan():
    costs = uniform_costs(2, 1.0, backward_input_ms=1.0, backward_weight_ms=1.0)
    model = _model((0, 1), 1, costs)
    runs = [[(0, 0, 0), (0, 1, 0), (0, 2, 0)], [(1, 0, 0), (1, 1, 0), (1, 2, 0)]]
    assert model.makespan(runs) == 5.0  # F, F, I, I then W on device 0: device 1's W beside
    own = [[(0, 1, 0), (0, 0, 0), (0, 2, 0)], runs[1]]  # I before its own F
    assert model.makespan(own) is None
    crossed = [[(0, 1, 0), (0, 0, 0), (0, 2, 0)], [(1, 1, 0), (1, 0, 0), (1, 2, 0)]]
    assert model.makespan(crossed) is None


def serial(placement, microbatches: int) -> list[list[tuple[int, int, int]]]:
    """Each device's passes of one microbatch after another: its forwards, its input
    backwards back down, its weight passes."""
    orders = [[] for _ in range(max(placement) + 1)]
    for device, order in enumerate(orders):
        mine = [s for s in range(len(placement)) if placement[s] == device]
        for i in range(microbatches):
            order += [(s, 0, i) for s in mine] + [(s, 1, i) for s in reversed(mine)]
            order += [(s, 2, i) for s in mine]
    return orders


# (placement, microbatches, limit over what one microbatch holds): at most a few thousand
# combinations of per-device orders each
TINY = [(v_placement(2), 2, 1.0), ((0, 1), 3, 1.0), ((0, 1, 2), 2, 1.0), ((0, 1), 2, 1e9)]


@settings(max_examples=25, deadline=None)
@given(shape=st.sampled_from(TINY), data=st.data())
def test_annealing_reaches_the_optimum_of_tiny_cases(shape, data):
    """From the order that runs one microbatch at a time (each pass as late as it can
    be), a few thousand moves reach the fastest order of all (every combination of
    per-device orders tried, ``tests.search.orders.optimum``). The moves keep each
    stage's microbatch order per kind, as the search's orders all have it."""
    placement, microbatches, loose = shape
    stages, devices = len(placement), max(placement) + 1
    costs, kept = small_costs(data.draw, stages, activation_bytes=1000.0)
    held = [sum(kept[s] for s in range(stages) if placement[s] == d) for d in range(devices)]
    limit = max(held) * loose
    best = optimum(placement, microbatches, costs, None, limit, most=5_000)
    if best is None:
        return
    model = _model(placement, microbatches, costs, limit)
    found_ms, orders = anneal(serial(placement, microbatches), model, limit * (1 + 1e-9), 4_000)
    assert found_ms == pytest.approx(best)
    assert model.makespan(orders) == found_ms
    assert all(model.peak(order) <= limit * (1 + 1e-9) for order in orders)


def v_costs(kept: float) -> Costs:
    """4 devices in a V, per chunk F 0.5, I 0.6, W 0.3 ms; ``kept`` bytes held from F, a
    quarter of them until W."""
    return uniform_costs(
        8,
        0.5,
        backward_input_ms=0.6,
        backward_weight_ms=0.3,
        activation_memory_bytes=kept,
        weight_grad_memory_bytes=kept / 4,
    )


def test_annealing_is_the_same_every_time_and_never_slower():
    costs = v_costs(2.0)
    topology = Topology(4, Link(latency_us=100.0))
    model = _model(v_placement(4), 6, costs, 16.0, topology)
    start = passes_of(random_schedule(v_placement(4), 6, costs, 16.0, random.Random(3)))
    first = anneal(start, model, 16.0, 3_000)
    assert first == anneal(start, model, 16.0, 3_000)
    assert first[0] < model.makespan(start)
    assert anneal(start, model, 16.0, 0)[0] == model.makespan(start)


def test_the_search_anneals_under_v_mins_memory(monkeypatch):
    """V-Min's memory (room for 4 chunk activations a device, half of what 1F1B holds),
    4 devices, 8 microbatches, I = 1.2 F, W = 0.6 F, 0.1 ms links: the annealing finds a
    faster order than every climb before it."""
    monkeypatch.setattr(auto, "IMPROVE_ACTIONS", 100_000)  # 10^7 passes annealed
    costs = v_costs(0.5)
    topology = Topology(4, Link(latency_us=100.0))
    args = ("v-auto", 4, 8, costs, topology, 2.0)
    monkeypatch.setattr(auto, "ANNEAL_MOST_ACTIONS", 0)
    climbed = search_schedule(*args)
    monkeypatch.setattr(auto, "ANNEAL_MOST_ACTIONS", 1_500)
    annealed = search_schedule(*args)
    assert annealed.source.startswith("annealed from")
    assert annealed.makespan_ms < climbed.makespan_ms - 0.5
    assert annealed.peak_activation_bytes <= 2.0 * (1 + 1e-9)
    assert simulate(annealed.schedule, costs, topology).makespan_ms == annealed.makespan_ms
