"""End-of-step work: the gradient all-reduce and the optimizer step, each a row of its own.

A device's tail is cut as the engine runs it: the gradients are reduced first, then the
optimizer steps; a part that costs nothing leaves no row, so a run without data
parallelism (all of its tail an optimizer step) has no all-reduce row.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.schedules import get_schedule
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.fast import simulate_with
from pipesim.sim.metrics import build_report
from pipesim.sim.trace import Cause, RowKind
from tests.sim.test_fast import ANY_MS, both, policy_scenarios

SHARES = st.lists(st.sampled_from([0.0, 0.25, 1.0]), min_size=5, max_size=5)


def tail_rows(trace):
    """(device, name, start, end, cause) of every end-of-step row, in row order."""
    frame = trace.frame
    rows = frame[frame.kind.isin(["ALLREDUCE", "OPTIMIZER"])]
    return [(int(r.device), r.name, r.start, r.end, r.cause) for r in rows.itertuples(index=False)]


@pytest.mark.parametrize("evaluator", ["simpy", "fast"])
def test_a_tail_is_the_all_reduce_then_the_optimizer_step(evaluator):
    # GPipe, 2 devices, m = 2, F = 1, B = 2: the flush at 9 ms. Device 0 reduces for
    # 2 ms and steps for 1 ms; device 1 only steps (1.5 ms): no all-reduce row of its own.
    schedule = get_schedule("gpipe", 2, 2)
    trace, _ = simulate_with(
        schedule,
        uniform_costs(2, 1.0, 2.0),
        tail_ms=[3.0, 1.5],
        optimizer_ms=[1.0, 1.5],
        evaluator=evaluator,
    )
    assert sorted(tail_rows(trace)) == [
        (0, "gradient all-reduce", 9.0, 11.0, "flush"),
        (0, "optimizer step", 11.0, 12.0, "device"),
        (1, "optimizer step", 9.0, 10.5, "flush"),
    ]
    reduce_row = int(((trace.kind == RowKind.ALLREDUCE) & (trace.device == 0)).argmax())
    step_row = int(((trace.kind == RowKind.OPTIMIZER) & (trace.device == 0)).argmax())
    assert trace.cause[step_row] == Cause.DEVICE and trace.cause_row[step_row] == reduce_row
    assert trace.makespan_ms == 12.0


def test_without_optimizer_ms_the_whole_tail_is_the_all_reduce():
    trace = simulate(get_schedule("gpipe", 2, 2), uniform_costs(2, 1.0, 2.0), tail_ms=[3.0, 0.0])
    assert tail_rows(trace) == [(0, "gradient all-reduce", 9.0, 12.0, "flush")]


def test_the_tail_counts_as_idle_in_the_bubble_numbers_and_is_reported():
    # busy 6 ms a device; makespan 12 ms with the tail: bubble fraction 1 - 12 / 24
    schedule, costs = get_schedule("gpipe", 2, 2), uniform_costs(2, 1.0, 2.0)
    trace = simulate(schedule, costs, tail_ms=[3.0, 1.5], optimizer_ms=[1.0, 1.5])
    report = build_report(trace, schedule, costs)
    assert report.bubble_fraction == pytest.approx(1 - 12 / 24)
    assert report.bubble_overhead == pytest.approx(12 / 6 - 1)
    assert report.span_bubble_rate == pytest.approx(1 - 6 / 9)  # device 0: 0 to the flush
    assert [(d.allreduce_ms, d.optimizer_ms) for d in report.per_device] == [(2, 1), (0, 1.5)]
    assert [d.idle_ms for d in report.per_device] == [6.0, 6.0]
    assert report.tail_ms == 3.0


@pytest.mark.parametrize(
    "optimizer, message",
    [
        ([1.0], "optimizer_ms needs tail_ms, with one entry per device"),
        ([4.0, 0.0], r"optimizer_ms\[0\] = 4.0 is not within tail_ms, 3.0"),
        ([-1.0, 0.0], r"optimizer_ms\[0\] = -1.0 is not within tail_ms, 3.0"),
    ],
)
def test_an_optimizer_step_outside_its_tail_is_refused(optimizer, message):
    schedule, costs = get_schedule("gpipe", 2, 2), uniform_costs(2)
    for evaluator in ("simpy", "fast"):
        with pytest.raises(ValueError, match=f"^{message}$"):
            simulate_with(
                schedule, costs, tail_ms=[3.0, 0.0], optimizer_ms=optimizer, evaluator=evaluator
            )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy_scenarios(), st.booleans(), ANY_MS, SHARES)
def test_cut_tails_match_the_engine(case, after_flush, tail, shares):
    schedule, costs, topology = case
    tail_ms = [tail * (d + 1) for d in range(schedule.devices)]
    optimizer_ms = [t * share for t, share in zip(tail_ms, shares, strict=False)]
    both(
        schedule,
        costs,
        topology,
        tail_ms=tail_ms,
        tail_after_flush=after_flush,
        optimizer_ms=optimizer_ms,
    )
