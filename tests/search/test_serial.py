"""The serial round trips (``pipesim.search.serial``): never above the optimum of every
order of a tiny case, and exactly the optimum where one microbatch at a time fits on a
V's device and the bytes come home only through its own backward and weight passes."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.schedules.ir import Action, v_placement
from pipesim.search import search_schedule
from pipesim.search.bound import chains
from pipesim.search.greedy import make_problem
from pipesim.search.serial import precedences, serial_ms
from pipesim.sim.costs import uniform_costs
from pipesim.sim.links import Link, Topology
from tests.oracle import evaluate
from tests.search.orders import optimum, random_schedule, small_costs


def serial_bound(placement, microbatches, costs, topology, limit):
    problem = make_problem(placement, microbatches, costs, topology, limit)
    chain = chains(problem, costs.backward_ms, costs.overhead_ms)
    return max(serial_ms(problem, chain))


# (placement, microbatches): at most a few thousand combinations of per-device orders
TINY = [((0, 1), 3), ((0, 1), 4), ((0, 1, 2), 2), (v_placement(2), 1), (v_placement(2), 2)]
# for the cuts (random orders, no brute force): a little larger
SMALL = [*TINY, (v_placement(2), 4), (v_placement(3), 3), ((0, 1, 2), 5)]


@st.composite
def tight_cases(draw, shapes=TINY):
    """A tiny case whose limit is near the least any order needs (where memory paces)."""
    placement, microbatches = draw(st.sampled_from(shapes))
    stages, devices = len(placement), max(placement) + 1
    costs, kept = small_costs(draw, stages, activation_bytes=1000.0)
    latency_us = draw(st.sampled_from([0.0, 500.0]))
    held = [sum(kept[s] for s in range(stages) if placement[s] == d) for d in range(devices)]
    limit = max(held) * draw(st.sampled_from([1.0, 1.0, 1.25, 1.5, 2.0]))
    return placement, microbatches, costs, Topology(devices, Link(latency_us=latency_us)), limit


@settings(max_examples=10, deadline=None)
@given(case=tight_cases())
def test_never_above_the_optimum_of_every_order(case):
    placement, microbatches, costs, topology, limit = case
    best = optimum(placement, microbatches, costs, topology, limit, most=3000)
    if best is None:
        return  # too many orders to try them all
    assert serial_bound(placement, microbatches, costs, topology, limit) <= best * (1 + 1e-9)


def relabelled(schedule, costs, topology) -> dict[Action, tuple[float, float]]:
    """Each action's ``(start, end)`` in the oracle's timing, the microbatches of each
    stage and kind relabelled in the order they start (the exact model's order)."""
    times = evaluate(schedule, costs, topology)
    by_kind: dict[tuple, list[tuple[float, float]]] = {}
    for (device, step), span in times.items():
        action = schedule.device_actions[device][step]
        by_kind.setdefault((action.stage, action.kind), []).append(span)
    return {
        Action(stage, kind, i): span
        for (stage, kind), spans in by_kind.items()
        for i, span in enumerate(sorted(spans))
    }


@settings(max_examples=8, deadline=None)
@given(case=tight_cases(SMALL), seed=st.integers(0, 2**16))
def test_the_exact_modes_cuts_hold_in_every_order(case, seed):
    """Random orders within the limit, relabelled: every cut holds (``before`` ends
    before ``after`` starts)."""
    placement, microbatches, costs, topology, limit = case
    problem = make_problem(placement, microbatches, costs, topology, limit)
    pairs = [pair for d in range(problem.devices) for pair in precedences(problem, d)]
    rng = random.Random(seed)
    for _ in range(5):
        schedule = random_schedule(placement, microbatches, costs, limit, rng)
        if schedule is None:
            continue
        spans = relabelled(schedule, costs, topology)
        for before, after in pairs:
            assert spans[after][0] >= spans[before][1] - 1e-9, (before, after)


@pytest.mark.parametrize(
    "input_ms, weight_ms, latency_ms, expected",
    [
        # cycle F2 + F3 + I3 + (I2 + I1 + W2 + W1 + F1) = 4.0; F(2,3) >= 1 + 3 x 4 = 13;
        # then F2 F3 I3 I2 (2.0), I1, I0, W0 (1.5)
        (0.5, 0.5, 0.0, 16.5),
        # cycle 0.5 + 0.5 + 0.6 + (0.6 + 0.6 + 0.3 + 0.3 + 0.5) = 3.9; 1 + 11.7 + 2.2 + 1.5
        (0.6, 0.3, 0.0, 16.4),
        # a 0.1 ms hop each way between the devices: the exact mode's proven optimum
        (0.5, 0.5, 0.1, 17.5),
    ],
)
def test_one_microbatch_per_device_on_a_v(input_ms, weight_ms, latency_ms, expected):
    """v-auto on 2 devices, 4 microbatches, each chunk F = 0.5 ms, bytes 1 (a quarter kept
    until W), limit 2: a device holds one microbatch's two chunks and nothing else. So
    device 1 (stages 1 and 2) starts F(2, j+1) only after microbatch j's I(2), I(1),
    W(2), W(1) and F(1, j+1), which it runs one at a time after I(2, j) can start
    (F(2,j) + F2 + F3 + I3 later): each round trip costs that cycle, and the bound is
    the optimum the search reaches."""
    costs = uniform_costs(
        4,
        0.5,
        backward_input_ms=input_ms,
        backward_weight_ms=weight_ms,
        activation_memory_bytes=1.0,
        weight_grad_memory_bytes=0.25,
    )
    topology = Topology(2, Link(latency_us=latency_ms * 1000)) if latency_ms else None
    assert serial_bound(v_placement(2), 4, costs, topology, 2.0) == pytest.approx(expected)
    found = search_schedule("v-auto", 2, 4, costs, topology, 2.0)
    assert found.lower_bound_part.startswith("serial round trips of device")
    assert found.lower_bound_ms == pytest.approx(expected)
    assert found.makespan_ms == pytest.approx(expected)
