"""The states at a device's last forward (``pipesim.search.last_forward``): never above
the optimum of every order of a tiny case nor any random order within the limit, and the
Zero Bubble H1 makespan at 1F1B's memory, which the search reaches."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.schedules.ir import v_placement
from pipesim.search import last_forward, search_schedule
from pipesim.search.bound import chains, last_forward_floor_ms
from pipesim.search.greedy import make_problem
from pipesim.sim.links import Link, Topology
from tests.search.orders import makespan, optimum, random_schedule, small_costs, split_costs


def last_forward_bound(placement, microbatches, costs, topology, limit):
    problem = make_problem(placement, microbatches, costs, topology, limit)
    chain = chains(problem, costs.backward_ms, costs.overhead_ms)
    return max(last_forward_floor_ms(problem, chain, d) for d in range(problem.devices))


# (placement, microbatches): at most a few thousand combinations of per-device orders
TINY = [((0, 1), 2), ((0, 1), 3), ((0, 1), 4), ((0, 1, 2), 2), (v_placement(2), 1)]
TINY += [(v_placement(2), 2)]
SMALL = [((0, 1, 2), 5), ((0, 1, 2, 3), 6), ((0, 1), 6), (v_placement(2), 4), (v_placement(3), 3)]


@st.composite
def tight_cases(draw, shapes, times=(1.0, 1.25, 2.0, 2.5, 3.0)):
    """A case whose limit is a few of its largest activations (where memory paces)."""
    placement, microbatches = draw(st.sampled_from(shapes))
    costs, kept = small_costs(draw, len(placement))
    latency_us = draw(st.sampled_from([0.0, 500.0]))
    limit = max(kept) * draw(st.sampled_from(times))
    topology = Topology(max(placement) + 1, Link(latency_us=latency_us))
    return placement, microbatches, costs, topology, limit


@settings(max_examples=12, deadline=None)
@given(case=tight_cases(TINY, times=(1.0, 1.25, 2.0)))
def test_never_above_the_optimum_of_every_order(case):
    placement, microbatches, costs, topology, limit = case
    best = optimum(placement, microbatches, costs, topology, limit, most=3000)
    if best is None:
        return  # too many orders to try them all
    assert last_forward_bound(placement, microbatches, costs, topology, limit) <= best * (1 + 1e-9)


@settings(max_examples=10, deadline=None)
@given(case=tight_cases(SMALL), seed=st.integers(0, 2**16))
def test_never_above_a_random_order_within_the_limit(case, seed):
    placement, microbatches, costs, topology, limit = case
    bound = last_forward_bound(placement, microbatches, costs, topology, limit)
    rng = random.Random(seed)
    for _ in range(5):
        schedule = random_schedule(placement, microbatches, costs, limit, rng)
        if schedule is not None:
            assert bound <= makespan(schedule, costs, topology) * (1 + 1e-9)


@pytest.mark.parametrize(
    "input_, weight, latency_ms, expected",
    [(1.0, 1.0, 0.1, 28.2), (1.2, 0.6, 0.0, 27.2), (1.2, 0.6, 0.1, 28.4)],
)
def test_zb_h1_at_1f1b_memory_with_latency_or_unequal_passes(input_, weight, latency_ms, expected):
    """4 devices, 8 microbatches, F = 1 ms, a quarter of each activation kept until W, at
    the memory 1F1B holds (4 activations). Device 0 first waits for its first gradient,
    ``trip - I - 4 F = 3 (I + 2 hop)``; its last forward F(7) starts at phi with ``a`` in
    flight and ``b`` weight passes pending, ``4a + b <= 16`` (in quarters):

    * ``a = 4, b = 0``: 7 F + 4 (I + W) ran before phi, so ``phi >= 3 (I + 2 hop) + 7 F
      + 4 (I + W)`` and the last round trip, ``4 (F + I) + 6 hop + W``, follows it: the
      Zero Bubble H1 step ``8 (F+I+W) + 3 (F + I - W) + 12 hop``;
    * ``a <= 3``: I(7 - a) ended before phi, and F(4) waited for I(0) and W(0) (the limit
      is full), so ``phi >= end of I(4) >= 2 trip + W``; with the way back, or with the
      pending W passes ``b`` in the work after phi, no state beats the same step.

    The exact mode proves each optimal; the search reaches it."""
    costs = split_costs(4, 1.0, input_, weight)
    topology = Topology(4, Link(latency_us=latency_ms * 1000)) if latency_ms else None
    assert last_forward_bound((0, 1, 2, 3), 8, costs, topology, 4.0) == pytest.approx(expected)
    zb_h1 = 8 * (1.0 + input_ + weight) + 3 * (1.0 + input_ - weight) + 12 * latency_ms
    assert zb_h1 == pytest.approx(expected)
    found = search_schedule("zb-auto", 4, 8, costs, topology, 4.0)
    assert found.lower_bound_part == "last forward of device 0"
    assert found.lower_bound_ms == pytest.approx(expected)
    assert found.makespan_ms == pytest.approx(expected)


@pytest.mark.parametrize("latency_ms, expected", [(0.0, 18.0), (0.1, 19.8)])
def test_a_v_with_room_for_two_microbatches(latency_ms, expected):
    """v-auto on 4 devices, 4 microbatches, a chunk's F, I, W = 0.5, 0.6, 0.3 ms, room for
    4 chunk activations per device (two microbatches of both chunks, Zero Bubble V-Min's
    memory). The device part counts 17.55 and 19.35 ms; going through the states at the
    last chunk-1 forward of device 3 (the V's turn) gives the optimum the exact mode
    proves, which the search reaches with the hop."""
    costs = split_costs(8, 0.5, 0.6, 0.3)
    topology = Topology(4, Link(latency_us=latency_ms * 1000)) if latency_ms else None
    assert last_forward_bound(v_placement(4), 4, costs, topology, 4.0) == pytest.approx(expected)
    found = search_schedule("v-auto", 4, 4, costs, topology, 4.0)
    assert found.lower_bound_ms == pytest.approx(expected)
    assert found.lower_bound_part == "last forward of device 3"
    if latency_ms:
        assert found.makespan_ms == pytest.approx(expected)


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=tight_cases(SMALL, times=(1.0, 2.0, 4.0, 100.0)))
def test_states_taken_in_ranges_only_lower_it(monkeypatch, case):
    """Past ``STATES`` states a device's walk takes them in ranges: each range floors
    ``phi`` by its earliest floor and spans its work, so the part can only drop."""
    one_by_one = last_forward_bound(*case)
    monkeypatch.setattr(last_forward, "STATES", 1)
    assert last_forward_bound(*case) <= one_by_one * (1 + 1e-12)
