"""The search's lower bound: never above the makespan of any valid order within the memory
limit (every order of a tiny case, random orders, the fixed recipes, the search's own), and
equal to the optimum where the optimum is known."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.schedules.ir import v_placement
from pipesim.search import AUTO_POLICIES, auto, minimum_limit_bytes, search_schedule
from pipesim.search.bound import lower_bound
from pipesim.search.greedy import make_problem
from pipesim.sim.costs import uniform_costs
from pipesim.sim.links import Link, Topology
from tests.search.orders import (
    SMALL,
    fitting_recipes,
    makespan,
    optimum,
    random_schedule,
    small_costs,
)


@pytest.fixture
def small_budget(monkeypatch):
    monkeypatch.setattr(auto, "IMPROVE_ACTIONS", 3_000)


def bound_ms(placement, microbatches, costs, topology, limit):
    problem = make_problem(placement, microbatches, costs, topology, limit)
    return lower_bound(problem, costs.backward_ms, costs.overhead_ms).makespan_ms


@st.composite
def small_cases(draw, shapes):
    """A placement and microbatch count from ``shapes``, F, I, W in small whole numbers,
    bytes kept per stage with a part kept until W, a latency or none, and a limit from the
    least any order needs (each device's stages of one microbatch) up."""
    placement, microbatches, loose = draw(st.sampled_from(shapes))
    stages, devices = len(placement), max(placement) + 1
    costs, kept = small_costs(draw, stages, activation_bytes=1000.0)
    latency_us = draw(st.sampled_from([0.0, 500.0, 1500.0]))
    bandwidth = draw(st.sampled_from([float("inf"), 1.0]))  # 1 GB/s: 0.001 ms a message
    topology = Topology(devices, Link(latency_us=latency_us, bandwidth_gbps=bandwidth))
    held = [sum(kept[s] for s in range(stages) if placement[s] == d) for d in range(devices)]
    limit = max(held) * (draw(st.sampled_from([1.0, 1.5, 2.0, 1e9])) if loose else 1.0)
    return placement, microbatches, costs, topology, limit


# (placement, microbatches, whether the limit may be loose): at most a few thousand
# combinations of per-device orders each
TINY = [
    ((0, 1), 2, True),
    ((0, 1), 3, False),
    ((0, 1), 4, False),
    ((0, 1, 2), 2, False),
    (v_placement(2), 1, True),
    (v_placement(2), 2, False),
]


@settings(max_examples=30, deadline=None)
@given(case=small_cases(TINY))
def test_the_bound_is_at_most_the_optimum_of_every_order(case):
    placement, microbatches, costs, topology, limit = case
    best = optimum(placement, microbatches, costs, topology, limit, most=5000)
    if best is None:
        return  # too many orders to try them all
    assert bound_ms(placement, microbatches, costs, topology, limit) <= best


@pytest.mark.parametrize(
    "placement, microbatches, forward, input_, weight, expected",
    [
        # a microbatch at a time, its W before the next F (the bytes it keeps): m x (trip + W)
        ((0, 1), 3, (1.0, 1.0), (1.0, 1.0), (1.0, 1.0), 15.0),
        ((0, 1), 4, (2.0, 1.0), (1.0, 3.0), (1.0, 1.0), 32.0),
    ],
)
def test_one_microbatch_at_a_time_is_exact(
    placement, microbatches, forward, input_, weight, expected
):
    costs = uniform_costs(
        2,
        list(forward),
        backward_input_ms=list(input_),
        backward_weight_ms=list(weight),
        activation_memory_bytes=1.0,
        weight_grad_memory_bytes=0.5,
    )
    assert optimum(placement, microbatches, costs, None, 1.0) == expected
    assert bound_ms(placement, microbatches, costs, None, 1.0) == pytest.approx(expected)


@st.composite
def search_cases(draw):
    name = draw(st.sampled_from(sorted(AUTO_POLICIES)))
    devices = draw(st.integers(2, 4))
    microbatches = draw(st.integers(1, 8))
    stages = devices * AUTO_POLICIES[name]
    per_stage = lambda values: [draw(values) for _ in range(stages)]  # noqa: E731
    kept = per_stage(st.integers(1, 3).map(float))
    input_ = per_stage(SMALL)
    weight = per_stage(st.integers(0, 3).map(float))
    # a full B (1F1B's) that may cost less than I + W: the bound must hold for it too
    cheaper = st.sampled_from([0.0, 0.0, 0.5])
    backward = [i + w - draw(cheaper) for i, w in zip(input_, weight, strict=True)]
    costs = uniform_costs(
        stages,
        per_stage(SMALL),
        backward,
        backward_input_ms=input_,
        backward_weight_ms=weight,
        activation_bytes=1000.0,
        activation_memory_bytes=kept,
        weight_grad_memory_bytes=[k * draw(st.sampled_from([0.0, 0.25, 0.5])) for k in kept],
        overhead_ms=draw(st.sampled_from([0.0, 0.0, 0.25])),
    )
    latency_us = draw(st.sampled_from([0.0, 0.0, 500.0]))
    topology = Topology(devices, Link(latency_us=latency_us))
    floor = minimum_limit_bytes(name, devices, microbatches, costs)
    limit = floor * draw(st.sampled_from([1.0, 1.5, 2.0, 3.0, 100.0]))
    return name, devices, microbatches, costs, topology, limit


@pytest.mark.slow  # 30 searches and their rivals: seconds; the full suite runs it
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=search_cases(), seed=st.integers(0, 2**16))
def test_no_order_within_the_limit_beats_the_bound(small_budget, case, seed):
    """The search's order, the fixed recipes that fit, and random orders that fit (timed by
    the oracle): none is faster than the bound the search reports."""
    name, devices, microbatches, costs, topology, limit = case
    found = search_schedule(name, devices, microbatches, costs, topology, limit)
    bound = found.lower_bound_ms
    assert 0 < bound <= found.makespan_ms
    assert found.gap == pytest.approx(found.makespan_ms / bound - 1)
    assert found.lower_bound_part
    for recipe, fixed in fitting_recipes(name, devices, microbatches, costs, topology, limit):
        assert bound <= fixed.makespan_ms, recipe
    rng = random.Random(seed)
    placement = found.schedule.placement
    for _ in range(20):
        schedule = random_schedule(placement, microbatches, costs, limit, rng)
        if schedule is not None:
            assert bound <= makespan(schedule, costs, topology)


@pytest.mark.parametrize(
    "devices, microbatches", [(2, 2), (4, 4), (4, 8), (4, 12), (6, 11), (6, 18)]
)
@pytest.mark.parametrize("forward, input_, weight", [(1.0, 1.0, 1.0), (1.0, 1.5, 0.6)])
def test_the_zero_bubble_makespan_is_the_bound_when_memory_allows(
    devices, microbatches, forward, input_, weight
):
    """Uniform costs, no latency, memory for every microbatch: the last device starts
    after p-1 forwards and then has m (F+I+W) of work; after its last I the gradient still
    walks down p-1 stages and a W follows, ``(p-1) I + W``, which its m W passes may not
    cover. So no order beats ``(p-1) F + m (F+I+W) + max(0, (p-1) I + W - m W)``; the
    search reaches it, so it is the optimum (ZB-H2's zero bubble once m is large)."""
    p, m = devices, microbatches
    costs = uniform_costs(
        p,
        forward,
        backward_input_ms=input_,
        backward_weight_ms=weight,
        activation_memory_bytes=1.0,
        weight_grad_memory_bytes=0.25,
    )
    found = search_schedule("zb-auto", p, m, costs, memory_limit_bytes=float(m))
    tail = max(0.0, (p - 1) * input_ + weight - m * weight)
    expected = (p - 1) * forward + m * (forward + input_ + weight) + tail
    assert found.lower_bound_ms == pytest.approx(expected)
    assert found.makespan_ms == pytest.approx(expected)
    assert found.gap == pytest.approx(0.0, abs=1e-8)


@pytest.mark.parametrize("devices, microbatches", [(2, 4), (4, 8), (4, 12)])
def test_zb_h1_at_1f1b_memory_is_optimal_when_f_i_w_are_equal(devices, microbatches):
    """F = I = W at 1F1B's memory: ZB-H1's ``m (F+I+W) + (p-1)(F+I-W)`` is
    ``(p-1) F + m (F+I+W)``, the bound: the search's order is optimal."""
    p, m = devices, microbatches
    costs = uniform_costs(
        p,
        1.0,
        backward_input_ms=1.0,
        backward_weight_ms=1.0,
        activation_memory_bytes=1.0,
        weight_grad_memory_bytes=0.25,
    )
    found = search_schedule("zb-auto", p, m, costs)
    assert found.lower_bound_ms == pytest.approx(3 * m + p - 1)
    assert found.makespan_ms == pytest.approx(3 * m + p - 1)


def test_v_auto_reaches_its_bound_with_memory_for_every_microbatch():
    """Two chunks per device: the last device (stages p-1 and p) starts after p-1
    forwards and has 2m (F+I+W) of work."""
    p, m = 4, 8
    costs = uniform_costs(
        2 * p,
        1.0,
        backward_input_ms=1.0,
        backward_weight_ms=1.0,
        activation_memory_bytes=1.0,
        weight_grad_memory_bytes=0.25,
    )
    found = search_schedule("v-auto", p, m, costs, memory_limit_bytes=float(2 * m))
    assert found.lower_bound_ms == pytest.approx((p - 1) + 2 * m * 3)
    assert found.makespan_ms == pytest.approx(found.lower_bound_ms)


def test_the_least_memory_forces_a_round_trip_per_microbatch():
    """One microbatch's bytes per device (the least any order needs), and a part kept
    until W: each forward at stage 0 waits for the previous microbatch's way back and its
    W there, m (p (F+I) + W); the search's order takes as long."""
    p, m = 4, 8
    costs = uniform_costs(
        p,
        1.0,
        backward_input_ms=1.0,
        backward_weight_ms=1.0,
        activation_memory_bytes=1.0,
        weight_grad_memory_bytes=0.25,
    )
    found = search_schedule("zb-auto", p, m, costs, memory_limit_bytes=1.0)
    assert found.lower_bound_ms == pytest.approx(m * (2 * p + 1))
    assert found.makespan_ms == pytest.approx(found.lower_bound_ms)
    assert found.lower_bound_part == "round trips of stage 0 (at most 1 in flight)"


def test_latency_adds_to_the_head_of_the_last_device():
    """With a hop of c ms, the last device starts after (p-1)(F + c)."""
    p, m, hop_ms = 4, 8, 0.1
    costs = uniform_costs(
        p,
        1.0,
        backward_input_ms=1.0,
        backward_weight_ms=1.0,
        activation_memory_bytes=1.0,
        weight_grad_memory_bytes=0.25,
    )
    topology = Topology(p, Link(latency_us=hop_ms * 1000))
    found = search_schedule("zb-auto", p, m, costs, topology, memory_limit_bytes=float(2 * p))
    assert found.lower_bound_ms == pytest.approx((p - 1) * (1.0 + hop_ms) + 3 * m)
    assert found.makespan_ms == pytest.approx(found.lower_bound_ms)
