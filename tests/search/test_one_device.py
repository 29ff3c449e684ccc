"""One device's relaxation (``pipesim.search.one_device``): its best order is never later
than the optimum of every order of a tiny case, nor than any valid order of a larger V;
and on the V at Zero Bubble's V-Min memory it proves the search's order optimal."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.schedules.ir import v_placement
from pipesim.search import search_schedule
from pipesim.search.bound import chains, lower_bound
from pipesim.search.greedy import make_problem
from pipesim.search.one_device import one_device_ms
from pipesim.sim.costs import uniform_costs
from pipesim.sim.links import Link, Topology
from tests.search.orders import makespan, optimum, random_schedule, small_costs
from tests.search.test_bound import TINY, small_cases

GIB = 2.0**30


def relaxed_ms(placement, microbatches, costs, topology, limit, budget=50_000):
    """The largest of the devices' relaxations, searched to the end (or ``budget``)."""
    problem = make_problem(placement, microbatches, costs, topology, limit)
    chain = chains(problem, costs.backward_ms, costs.overhead_ms)
    return max(one_device_ms(problem, chain, d, 0.0, budget)[0] for d in range(problem.devices))


@settings(max_examples=15, deadline=None)
@given(case=small_cases(TINY))
def test_no_order_of_a_tiny_case_beats_any_device_alone(case):
    placement, microbatches, costs, topology, limit = case
    best = optimum(placement, microbatches, costs, topology, limit, most=5000)
    if best is None:
        return  # too many orders to try them all
    assert relaxed_ms(placement, microbatches, costs, topology, limit) <= best + 1e-9


@st.composite
def v_cases(draw):
    """A V on 2 or 3 devices with 3 or 4 microbatches, small whole costs, and a limit from
    one microbatch's bytes per device up to a few."""
    devices = draw(st.integers(2, 3))
    placement = v_placement(devices)
    costs, kept = small_costs(draw, 2 * devices, activation_bytes=1000.0)
    latency_us = draw(st.sampled_from([0.0, 500.0]))
    topology = Topology(devices, Link(latency_us=latency_us))
    held = max(kept[d] + kept[2 * devices - 1 - d] for d in range(devices))
    limit = held * draw(st.sampled_from([1.0, 1.5, 2.0, 3.0]))
    return placement, draw(st.integers(3, 4)), costs, topology, limit


@settings(max_examples=15, deadline=None)
@given(case=v_cases(), seed=st.integers(0, 2**16))
def test_no_valid_order_of_a_v_beats_any_device_alone(case, seed):
    """Too many orders to try them all: random valid orders, each timed by the oracle,
    are never faster than the relaxations' best."""
    placement, microbatches, costs, topology, limit = case
    relaxed = relaxed_ms(placement, microbatches, costs, topology, limit, budget=5_000)
    rng = random.Random(seed)
    for _ in range(20):
        schedule = random_schedule(placement, microbatches, costs, limit, rng)
        if schedule is not None:
            assert relaxed <= makespan(schedule, costs, topology) + 1e-9


def test_the_v_at_v_min_memory_is_optimal():
    """4 devices, 8 microbatches, F = I = W = 0.5 ms per chunk, 0.5 GiB per chunk
    activation (0.125 GiB kept until W), 2 GiB per device (Zero Bubble's V-Min limit for
    this V). The turn's device (stages 3 and 4) alone needs 29.5 ms: its chunk pairs
    enter two at a time, each waits a 3.5 ms round trip beyond its forwards, and the last
    input backward still walks 2 ms down the pipeline. The search's order takes as long,
    so it is optimal (the exact mode's 300 s found nothing faster and proved only 27.5)."""
    p, m = 4, 8
    costs = uniform_costs(
        2 * p,
        0.5,
        backward_input_ms=0.5,
        backward_weight_ms=0.5,
        activation_memory_bytes=0.5 * GIB,
        weight_grad_memory_bytes=0.125 * GIB,
    )
    problem = make_problem(v_placement(p), m, costs, None, 2 * GIB)
    bound = lower_bound(problem, costs.backward_ms, costs.overhead_ms)
    assert bound.makespan_ms == pytest.approx(29.5)
    assert bound.part == "device 3 alone, in its best order"
    found = search_schedule("v-auto", p, m, costs, memory_limit_bytes=2 * GIB)
    assert found.makespan_ms == pytest.approx(29.5)
    assert found.gap == pytest.approx(0.0, abs=1e-8)
