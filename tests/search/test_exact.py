"""The exact mode: on tiny cases the optimum of every order (brute force), never slower
than a fixed recipe of the family or the heuristic, its own timing the engine's, and
within its time limit where it cannot prove an optimum."""

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.schedules.ir import Schedule, single_chain
from pipesim.search import auto, minimum_limit_bytes, one_device, search_schedule
from pipesim.search.auto import evaluate, placement_of
from pipesim.search.exact import exact_schedule, solve
from pipesim.search.exact_model import down, memory_units, ticks_per_ms
from pipesim.search.greedy import make_problem
from pipesim.search.tail import Tail
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.links import Link, Topology
from tests.search.orders import fitting_recipes, optimum, small_costs

QUICK = settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture
def small_budget(monkeypatch):
    """A smaller improvement pass and a smaller search of each device alone in the bound
    (a lower bound still) keep the heuristic before the solver quick."""
    monkeypatch.setattr(auto, "IMPROVE_ACTIONS", 3_000)
    monkeypatch.setattr(one_device, "BUDGET", 4_000)


@st.composite
def cases(draw, shapes, latencies=(0.0, 500.0, 1500.0)):
    """A policy and sizes from ``shapes``, F, I, W in small whole numbers, bytes kept per
    stage with a part kept until W, a latency or none, and a limit from the least any
    order of the family needs up."""
    name, devices, microbatches = draw(st.sampled_from(shapes))
    stages = devices * (2 if name == "v-auto" else 1)
    costs, kept = small_costs(draw, stages)
    topology = Topology(devices, Link(latency_us=draw(st.sampled_from(latencies))))
    floor = minimum_limit_bytes(name, devices, microbatches, costs)
    limit = floor * draw(st.sampled_from([1.0, 1.5, 2.0, 1e9]))
    return name, devices, microbatches, costs, topology, limit


# (policy, devices, microbatches): at most a few thousand combinations of per-device orders
TINY = [("zb-auto", 2, 2), ("zb-auto", 2, 3), ("zb-auto", 3, 2), ("v-auto", 2, 1), ("v-auto", 2, 2)]


@QUICK
@given(case=cases(TINY))
def test_the_exact_optimum_equals_brute_force(small_budget, case):
    name, devices, microbatches, costs, topology, limit = case
    best = optimum(placement_of(name, devices), microbatches, costs, topology, limit, most=3000)
    if best is None:
        return  # too many orders to try them all
    found = exact_schedule(name, devices, microbatches, costs, topology, limit, time_limit_s=10)
    assert found.optimal
    assert found.makespan_ms == pytest.approx(best, abs=1e-9)
    assert found.lower_bound_ms <= best
    assert found.peak_activation_bytes <= limit * (1 + 1e-9)


SMALL_SHAPES = [("zb-auto", 4, 8), ("zb-auto", 3, 6), ("v-auto", 3, 3), ("v-auto", 4, 2)]


@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=cases(SMALL_SHAPES))
def test_never_slower_than_a_recipe_or_the_heuristic(small_budget, case):
    name, devices, microbatches, costs, topology, limit = case
    found = exact_schedule(name, devices, microbatches, costs, topology, limit, time_limit_s=1)
    assert found.makespan_ms <= found.heuristic_makespan_ms
    assert found.lower_bound_ms <= found.makespan_ms
    assert found.makespan_ms == evaluate(found.schedule, costs, topology, "").makespan_ms
    for recipe, fixed in fitting_recipes(name, devices, microbatches, costs, topology, limit):
        assert found.makespan_ms <= fixed.makespan_ms * (1 + 1e-9), recipe


def split_costs(stages, forward, input_, weight, chunks=1):
    return uniform_costs(
        stages,
        forward / chunks,
        backward_input_ms=input_ / chunks,
        backward_weight_ms=weight / chunks,
        activation_memory_bytes=4.0 / chunks,
        weight_grad_memory_bytes=1.0 / chunks,
    )


@pytest.mark.parametrize(
    "name, devices, microbatches, latency_us, tail, heuristic_ms",
    [
        ("zb-auto", 3, 4, 100.0, None, 17.0),
        ("v-auto", 3, 3, 100.0, None, 11.8),  # the solver finds 11.7
        ("zb-auto", 3, 3, 0.0, Tail((0.5, 2.0, 1.0), after_flush=False), 13.6),
    ],
)
def test_the_models_timing_is_the_engines(
    small_budget, name, devices, microbatches, latency_us, tail, heuristic_ms
):
    """On a solved case the step end the solver's timing gives is the engine's makespan
    of the order taken from it (costs in whole ticks: nothing is rounded), and the
    solver's order is never slower than the heuristic's it started from."""
    chunks = 2 if name == "v-auto" else 1
    costs = split_costs(devices * chunks, 1.0, 1.5, 0.6, chunks)
    topology = Topology(devices, Link(latency_us=latency_us))
    start = search_schedule(name, devices, microbatches, costs, topology, tail=tail)
    problem = make_problem(
        placement_of(name, devices), microbatches, costs, topology, start.limit_bytes
    )
    assert start.makespan_ms == pytest.approx(heuristic_ms, abs=1e-9)
    solved = solve(problem, costs, topology, tail, start, time_limit_s=10)
    assert solved.proven
    schedule = Schedule(
        solved.orders, problem.placement, single_chain(problem.stages, microbatches), name
    )
    options = {} if tail is None else tail.engine_options()
    assert simulate(schedule, costs, topology, **options).makespan_ms == pytest.approx(
        solved.model_ms, abs=1e-9
    )
    assert solved.model_ms <= start.makespan_ms + 1e-9
    assert solved.bound_ms == pytest.approx(solved.model_ms, abs=1e-9)


def test_the_time_limit_is_kept_and_the_bound_stays_below(small_budget):
    """v-auto on 3 devices, 6 microbatches, I > F > W and 0.1 ms links: the solver improves
    on the heuristic within a second but cannot close the gap; it stops at its limit."""
    name, devices, microbatches = "v-auto", 3, 6
    costs, topology = split_costs(6, 1.0, 1.5, 0.6, 2), Topology(3, Link(latency_us=100))
    heuristic = search_schedule(name, devices, microbatches, costs, topology)
    problem = make_problem(
        placement_of(name, devices), microbatches, costs, topology, heuristic.limit_bytes
    )
    began = time.perf_counter()
    solved = solve(problem, costs, topology, None, heuristic, time_limit_s=1.0)
    assert time.perf_counter() - began <= 1.0 + 1.0  # the limit, plus building the model
    assert not solved.proven
    assert solved.bound_ms <= solved.model_ms < heuristic.makespan_ms
    found = exact_schedule(name, devices, microbatches, costs, topology, time_limit_s=0.2)
    assert not found.optimal
    assert found.lower_bound_ms <= found.makespan_ms <= heuristic.makespan_ms
    assert found.heuristic_makespan_ms == heuristic.makespan_ms


@pytest.mark.parametrize(
    "microbatches, forward, input_, weight, expected",
    [
        # a microbatch at a time, its W before the next F (the bytes it keeps): m x (trip + W)
        (3, (1.0, 1.0), (1.0, 1.0), (1.0, 1.0), 15.0),
        (4, (2.0, 1.0), (1.0, 3.0), (1.0, 1.0), 32.0),
    ],
)
def test_one_microbatch_at_a_time(microbatches, forward, input_, weight, expected):
    costs = uniform_costs(
        2,
        list(forward),
        backward_input_ms=list(input_),
        backward_weight_ms=list(weight),
        activation_memory_bytes=1.0,
        weight_grad_memory_bytes=0.5,
    )
    found = exact_schedule("zb-auto", 2, microbatches, costs, None, 1.0, time_limit_s=10)
    assert found.optimal and found.makespan_ms == expected


def test_ticks_and_rounding():
    """A step of 46 ms is 4.6 million ticks of 1e-5 ms; 1.2 ms and 0.6 ms stay whole; a
    time is never rounded up."""
    assert ticks_per_ms(46.0) == 100_000
    assert ticks_per_ms(2e6) == 1
    assert down(1.2, 100_000) == 120_000 and down(0.6, 100_000) == 60_000
    assert down(1 / 3, 10) == 3


def test_memory_in_whole_units():
    """Whole byte counts are divided by their common divisor; the capacity is the limit's."""
    costs = split_costs(2, 1.0, 1.0, 1.0)  # 4 bytes kept, 1 of them until W
    problem = make_problem((0, 1), 4, costs, None, 8.0)
    units = memory_units(problem)
    assert (units.until_input, units.until_weight, units.capacity) == ((3, 3), (1, 1), 8)
