"""zb-auto and v-auto: within the memory limit on every device, never slower than the fixed
recipes of their family, and exact where the closed forms are known."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.schedules import get_schedule
from pipesim.schedules.validity import validate
from pipesim.search import (
    AUTO_POLICIES,
    SearchError,
    auto,
    minimum_limit_bytes,
    one_device,
    search_schedule,
)
from pipesim.search.auto import default_limit_bytes, evaluate
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.links import Link, Topology
from pipesim.sim.memory import memory_timelines
from tests.search.orders import fitting_recipes, split_costs


@pytest.fixture
def small_budget(monkeypatch):
    """Property tests run many searches: a smaller improvement pass and a smaller search
    of each device alone in the bound (a lower bound still) keep them quick."""
    monkeypatch.setattr(auto, "IMPROVE_ACTIONS", 3_000)
    monkeypatch.setattr(one_device, "BUDGET", 4_000)


def peaks_per_device(schedule, costs, topology=None):
    trace = simulate(schedule, costs, topology)
    return [
        float(t.activation_bytes.max()) if len(t.time) else 0.0
        for t in memory_timelines(trace, schedule, costs)
    ]


@st.composite
def search_cases(draw, max_devices=8):
    name = draw(st.sampled_from(sorted(AUTO_POLICIES)))
    devices = draw(st.integers(2, max_devices))
    microbatches = draw(st.integers(1, 4 * devices))
    stages = devices * AUTO_POLICIES[name]
    per_stage = lambda lo, hi: st.lists(  # noqa: E731
        st.floats(lo, hi, allow_nan=False), min_size=stages, max_size=stages
    )
    kept = draw(per_stage(1.0, 4.0))
    costs = uniform_costs(
        stages,
        draw(per_stage(0.2, 2.0)),
        backward_input_ms=draw(per_stage(0.2, 2.0)),
        backward_weight_ms=draw(per_stage(0.1, 2.0)),
        activation_memory_bytes=kept,
        weight_grad_memory_bytes=[k * draw(st.floats(0.0, 1.0)) for k in kept],
    )
    latency = draw(st.sampled_from([0.0, 0.0, 50.0]))
    topology = Topology(devices, Link(latency_us=latency))
    floor = minimum_limit_bytes(name, devices, microbatches, costs)
    limit = floor * (1 + draw(st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0, 4.0])))
    return name, devices, microbatches, costs, topology, limit


PROPERTY = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.slow  # 15 searches: seconds; the full suite runs it
@PROPERTY
@given(case=search_cases())
def test_peak_activation_never_exceeds_the_limit_on_any_device(small_budget, case):
    name, devices, microbatches, costs, topology, limit = case
    found = search_schedule(name, devices, microbatches, costs, topology, limit)
    validate(found.schedule)
    peaks = peaks_per_device(found.schedule, costs, topology)
    assert max(peaks) <= limit * (1 + 1e-9), (peaks, limit)
    assert found.peak_activation_bytes == pytest.approx(max(peaks))
    assert found.makespan_ms == pytest.approx(simulate(found.schedule, costs, topology).makespan_ms)
    assert found.limit_bytes == limit


@pytest.mark.slow
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=search_cases(max_devices=16))
def test_peak_within_the_limit_up_to_16_devices(small_budget, case):
    name, devices, microbatches, costs, topology, limit = case
    found = search_schedule(name, devices, microbatches, costs, topology, limit)
    assert max(peaks_per_device(found.schedule, costs, topology)) <= limit * (1 + 1e-9)


@pytest.mark.slow  # 15 searches: seconds; the full suite runs it
@PROPERTY
@given(case=search_cases())
def test_never_slower_than_a_fixed_recipe_of_the_family_that_fits(small_budget, case):
    name, devices, microbatches, costs, topology, limit = case
    found = search_schedule(name, devices, microbatches, costs, topology, limit)
    for recipe, fixed in fitting_recipes(name, devices, microbatches, costs, topology, limit):
        assert found.makespan_ms <= fixed.makespan_ms * (1 + 1e-9), recipe


@pytest.mark.parametrize("devices, microbatches", [(4, 7), (4, 8), (4, 12), (6, 11), (8, 16)])
@pytest.mark.parametrize("forward, input_, weight", [(1.0, 1.0, 1.0), (2.0, 2.0, 1.0)])
def test_uniform_costs_reach_the_zero_bubble_closed_forms(
    devices, microbatches, forward, input_, weight
):
    """At 1F1B's memory (p activations) the ZB-H1 makespan
    ``m (F+I+W) + (p-1)(F+I-W)``; at twice that, with m >= 2p-1, the zero-bubble makespan
    ``m (F+I+W) + (p-1) F``: the last device starts after p-1 forwards and is never idle
    again (what ZB-H2 reaches with 2p-1 activations on device 0)."""
    p, m = devices, microbatches
    costs = split_costs(p, forward, input_, weight)
    one_f_one_b = search_schedule("zb-auto", p, m, costs)
    assert one_f_one_b.limit_bytes == p
    work = m * (forward + input_ + weight)
    assert one_f_one_b.makespan_ms == pytest.approx(work + (p - 1) * (forward + input_ - weight))
    double = search_schedule("zb-auto", p, m, costs, memory_limit_bytes=2 * p)
    assert double.makespan_ms == pytest.approx(work + (p - 1) * forward)
    assert double.peak_activation_bytes <= 2 * p


def test_the_minimum_limit_holds_one_microbatch_per_device():
    costs = split_costs(4, kept=1.0)
    assert minimum_limit_bytes("zb-auto", 4, 8, costs) == 1.0
    v_costs = uniform_costs(8, activation_memory_bytes=[1, 2, 3, 4, 5, 6, 7, 8])
    # device d holds stages d and 7-d: 1+8, 2+7, 3+6, 4+5
    assert minimum_limit_bytes("v-auto", 4, 8, v_costs) == 9.0
    for name, c in (("zb-auto", costs), ("v-auto", split_costs(8))):
        floor = minimum_limit_bytes(name, 4, 8, c)
        found = search_schedule(name, 4, 8, c, memory_limit_bytes=floor)
        assert max(peaks_per_device(found.schedule, c)) <= floor


def test_a_limit_below_the_minimum_is_one_line_naming_it():
    with pytest.raises(SearchError) as caught:
        search_schedule("v-auto", 4, 8, split_costs(8, kept=3.0), memory_limit_bytes=5.0)
    assert str(caught.value) == (
        "memory limit 5 bytes is below the minimum 6 bytes any v-auto order can reach (4 devices)"
    )


def test_the_default_limit_is_what_1f1b_holds_on_the_same_work():
    assert search_schedule("zb-auto", 4, 8, split_costs(4, kept=2.0)).limit_bytes == 8.0
    # v-auto: 1F1B's stage k is chunks 2k and 2k+1, 2 x 1.0 bytes; device 0 holds 4 of them
    assert default_limit_bytes("v-auto", 4, 8, split_costs(8)) == 8.0
    assert search_schedule("v-auto", 4, 8, split_costs(8)).limit_bytes == 8.0


def test_v_auto_at_1f1b_memory_matches_zbv_with_uniform_costs():
    found = search_schedule("v-auto", 4, 8, split_costs(8, 0.5, 0.5, 0.5, kept=0.5))
    zbv = evaluate(get_schedule("zbv", 4, 8, 2), split_costs(8, 0.5, 0.5, 0.5, 0.5), None, "")
    assert found.makespan_ms <= zbv.makespan_ms
    assert found.schedule.name == "v-auto"


def test_the_search_is_deterministic_and_reports_progress():
    costs = uniform_costs(
        4,
        [1.0, 1.3, 0.8, 1.1],
        backward_input_ms=1.2,
        backward_weight_ms=0.7,
        activation_memory_bytes=1.0,
        weight_grad_memory_bytes=0.3,
    )
    topology = Topology(4, Link(latency_us=100.0))
    seen = []
    first = search_schedule("zb-auto", 4, 12, costs, topology, 6.0, progress=seen.append)
    second = search_schedule("zb-auto", 4, 12, costs, topology, 6.0)
    assert first.schedule == second.schedule
    assert first.makespan_ms == second.makespan_ms
    assert seen == [1] * first.candidates
    assert first.seconds > 0 and first.source


def test_unknown_policy_and_missing_costs_are_search_errors():
    with pytest.raises(SearchError, match="unknown search policy 'x-auto'"):
        search_schedule("x-auto", 4, 8, split_costs(4))
    with pytest.raises(SearchError, match="v-auto needs costs for 8 stages"):
        search_schedule("v-auto", 4, 8, split_costs(4))
