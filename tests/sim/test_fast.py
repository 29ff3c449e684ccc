"""The fast evaluator gives the engine's Trace: every row, time and cause, and the Report.

Rows are matched by what they are (a compute action, a transfer, a tail), since the
two evaluators may order rows that end at the same instant differently
(``pipesim.sim.fast.rows``). Times must agree to 1e-9 relative (in practice, to the bit),
causes exactly, and a cause's row must be the same row, except the pipeline flush, which
may name any row ending at the flush.
"""

import json
import pickle
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pipesim.analysis.critical import explain
from pipesim.schedules import POLICIES, get_schedule
from pipesim.schedules.ir import (
    Action,
    B,
    ConstraintError,
    F,
    Schedule,
    ScheduleError,
    from_csv,
    schedule_from_lists,
)
from pipesim.schedules.torch_csv import read_torch_csv
from pipesim.sim.closed_form import closed_form
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import DeadlockError, simulate
from pipesim.sim.fast import (
    Evaluator,
    EvaluatorCache,
    fast_unsupported,
    parse_evaluator,
    simulate_with,
)
from pipesim.sim.links import Link, Topology
from pipesim.sim.memory import memory_timelines
from pipesim.sim.metrics import build_report
from pipesim.sim.trace import Cause
from tests.helpers import latency_topology
from tests.schedules.test_zero_bubble import PAPER_TABLES_9_AND_5
from tests.sim.test_properties import QUARTERS, random_schedules

GOLDEN = Path(__file__).parent.parent / "golden"
ANY_MS = st.floats(0.0, 10.0, allow_nan=False, allow_infinity=False)


def row_keys(trace):
    return [
        (int(k), int(d), trace.name(r))
        for r, (k, d) in enumerate(zip(trace.kind.tolist(), trace.device.tolist(), strict=True))
    ]


def assert_same_trace(engine, fast):
    """Same rows (matched by identity), same times to 1e-9 relative, same causes."""
    assert fast.devices == engine.devices
    keys_e, keys_f = row_keys(engine), row_keys(fast)
    assert sorted(keys_e) == sorted(keys_f)
    at = {key: row for row, key in enumerate(keys_e)}
    match = np.array([at[key] for key in keys_f], dtype=np.int64)  # fast row -> engine row
    for column in ("device", "lane", "stage", "chunk", "microbatch", "kind", "peer", "cause"):
        assert np.array_equal(getattr(fast, column), getattr(engine, column)[match]), column
    for column in ("start", "end"):
        assert np.allclose(getattr(fast, column), getattr(engine, column)[match], rtol=1e-9, atol=0)
    named_e = engine.cause_row[match]
    named_f = np.where(fast.cause_row >= 0, match[np.maximum(fast.cause_row, 0)], -1)
    flush = fast.cause == Cause.FLUSH
    assert np.array_equal(named_f[~flush], named_e[~flush])
    assert np.array_equal(engine.end[named_f[flush]], engine.end[named_e[flush]])
    assert [fast.actions[r] for r in range(len(match))] == [engine.actions[r] for r in match]


def assert_same_report(engine, fast, schedule, costs, topology=None):
    mine = build_report(fast, schedule, costs, topology=topology)
    theirs = build_report(engine, schedule, costs, topology=topology)
    assert np.isclose(mine.makespan_ms, theirs.makespan_ms, rtol=1e-9, atol=0)
    for a, b in zip(mine.per_device, theirs.per_device, strict=True):
        for field in ("busy_ms", "idle_ms", "span_ms", "peak_activation_bytes"):
            assert np.isclose(getattr(a, field), getattr(b, field), rtol=1e-9, atol=1e-12)
        assert a.peak_inflight == b.peak_inflight
    for field in ("bubble_fraction", "bubble_overhead", "span_bubble_rate"):
        assert np.isclose(getattr(mine, field), getattr(theirs, field), rtol=1e-9, atol=1e-12)
    for a, b in zip(
        memory_timelines(fast, schedule, costs),
        memory_timelines(engine, schedule, costs),
        strict=True,
    ):
        assert np.allclose(a.time, b.time, rtol=1e-9, atol=0)
        assert np.allclose(a.activation_bytes, b.activation_bytes, rtol=1e-9, atol=1e-9)


def assert_rows_follow_their_causes(trace):
    """As in the engine: a row comes after the row that released it and starts as that
    one ends (behind a busy channel: as it leaves the channel, within its span)."""
    named = trace.cause_row
    caused = (trace.cause != Cause.START) & (trace.cause != Cause.FLUSH)
    rows = np.flatnonzero(caused)
    assert (named[rows] >= 0).all() and (named[rows] < rows).all()
    queued = trace.cause[rows] == Cause.CHANNEL
    released = np.where(queued, trace.start[named[rows]], trace.end[named[rows]])
    assert (trace.start[rows] >= released).all()
    exact = rows[~queued]
    assert np.array_equal(trace.start[exact], trace.end[named[exact]])
    assert (trace.start[trace.cause == Cause.START] == 0).all()


def assert_summary_is_the_trace(fast, schedule, costs, topology=None):
    """A fast Trace's report and memory, read before its rows are laid out (from its
    compute rows, makespan and end-of-step work), are its laid-out rows' to the bit."""
    assert "_lay_out" in vars(fast)  # nothing laid out yet
    report = build_report(fast, schedule, costs, topology=topology)
    memory = memory_timelines(fast, schedule, costs)
    assert "_lay_out" in vars(fast)
    rows = pickle.loads(pickle.dumps(fast))  # laid out: a Trace of plain columns
    assert "_lay_out" not in vars(rows) and len(rows.end) == len(fast.end)
    assert build_report(rows, schedule, costs, topology=topology) == report
    for mine, theirs in zip(memory, memory_timelines(rows, schedule, costs), strict=True):
        for name in ("time", "activation_bytes", "inflight"):
            assert np.array_equal(getattr(mine, name), getattr(theirs, name)), name


def both(schedule, costs, topology=None, cache=None, **kwargs):
    engine = simulate(schedule, costs, topology, **kwargs)
    fast, which = simulate_with(schedule, costs, topology, evaluator="fast", cache=cache, **kwargs)
    assert which == "fast"
    assert_summary_is_the_trace(fast, schedule, costs, topology)
    assert_same_trace(engine, fast)
    assert_rows_follow_their_causes(fast)
    assert_same_report(engine, fast, schedule, costs, topology)
    return engine, fast


def dedicated(topology):
    """The same topology with every directed link on its own channel."""
    return Topology(
        topology.devices,
        default=topology.default,
        links=topology.links,
        comm_overlap=topology.comm_overlap,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_schedules(), st.booleans(), st.lists(ANY_MS, min_size=4, max_size=4))
def test_random_schedules_match_the_engine(case, after_flush, tail):
    schedule, costs, topology = case
    tail_ms = tail[: schedule.devices] if tail[0] > 1 else None
    both(schedule, costs, dedicated(topology), tail_ms=tail_ms, tail_after_flush=after_flush)


@st.composite
def policy_scenarios(draw):
    """Every registered policy at sizes within its constraints, random per-stage costs
    (any floats, the split backward's I and W drawn apart), a LogGP link with latency,
    bandwidth and gap, an overhead per action, sends that may hold their device."""
    name = draw(st.sampled_from(sorted(POLICIES)))
    devices, microbatches, virtual = (
        draw(st.integers(1, 5)),
        draw(st.integers(1, 10)),
        draw(st.integers(1, 3)),
    )
    try:
        schedule = get_schedule(name, devices, microbatches, virtual)
    except ConstraintError:
        schedule = get_schedule("1f1b", devices, microbatches)
    stages = schedule.model_stages
    forward = [draw(ANY_MS) for _ in range(stages)]
    costs = uniform_costs(
        stages,
        forward,
        backward_input_ms=[draw(ANY_MS) for _ in range(stages)],
        backward_weight_ms=[draw(ANY_MS) for _ in range(stages)],
        overlapped_fb_ms=[f + draw(ANY_MS) for f in forward],
        activation_bytes=[draw(st.floats(0, 4e6)) for _ in range(stages)],
        activation_memory_bytes=[draw(st.floats(0, 1e9)) for _ in range(stages)],
        weight_grad_memory_bytes=0,
        overhead_ms=draw(st.sampled_from([0.0, 0.0, 0.01])),
    )
    link = Link(
        latency_us=draw(st.floats(0, 500)),
        bandwidth_gbps=draw(st.sampled_from([0.5, 25.0, float("inf")])),
        gap_us=draw(st.sampled_from([0.0, 0.0, 3.0])),
    )
    slow = Link(latency_us=draw(st.floats(0, 2000)), bandwidth_gbps=1.0)
    links = {(0, 1): slow} if devices > 1 and draw(st.booleans()) else {}
    overlap = draw(st.sampled_from([True, True, False]))  # off: a send holds its device
    return schedule, costs, Topology(devices, default=link, links=links, comm_overlap=overlap)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy_scenarios(), st.booleans(), ANY_MS)
def test_every_policy_matches_the_engine(case, after_flush, tail):
    schedule, costs, topology = case
    tail_ms = [tail * (d + 1) for d in range(schedule.devices)]
    both(schedule, costs, topology, tail_ms=tail_ms, tail_after_flush=after_flush)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy_scenarios(), st.booleans(), ANY_MS)
def test_every_policy_matches_the_engine_at_length(case, after_flush, tail):
    schedule, costs, topology = case
    both(schedule, costs, topology, tail_ms=[tail] * schedule.devices, tail_after_flush=after_flush)


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.csv")), ids=lambda p: p.stem)
def test_golden_schedules_match_the_engine(path):
    schedule = from_csv(path.read_text(), path.stem.split("_")[0])
    stages = schedule.model_stages
    costs = uniform_costs(stages, [1.0 + s / 8 for s in range(stages)], 2.0, activation_bytes=1e6)
    topology = Topology(schedule.devices, default=Link(latency_us=30, bandwidth_gbps=25.0))
    for topo in (None, topology):
        both(schedule, costs, topo, tail_ms=[0.5] * schedule.devices)


# ---------------------------------------------------------------------------
# Exact references: published tables and closed forms


@pytest.mark.parametrize("row", PAPER_TABLES_9_AND_5, ids=lambda r: f"{r[0]}-m{r[2]}")
def test_zero_bubble_table_5_through_the_fast_evaluator(row):
    # Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024), Tables 9 and 5.
    _, p, m, t_f, t_b, t_w, t_comm, *expected = row
    costs = uniform_costs(p, t_f, backward_input_ms=t_b, backward_weight_ms=t_w)
    topology = latency_topology(p, t_comm)
    for name, cell in zip(["1f1b", "zb-h1", "zb-h2"], expected, strict=True):
        schedule = get_schedule(name, p, m)
        trace, which = simulate_with(schedule, costs, topology)
        assert which == "fast"
        assert round(build_report(trace, schedule, costs).span_bubble_rate, 4) == cell, name


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["gpipe", "1f1b", "interleaved-1f1b"]),
    st.integers(1, 6),
    st.integers(1, 4),
    st.integers(1, 3),
    QUARTERS,
    QUARTERS,
    st.integers(0, 4),
)
def test_closed_forms_through_the_fast_evaluator(name, p, k, v, f, b, hop_quarters):
    # Uniform costs, one latency on every hop: the policies' closed forms hold exactly.
    v = 1 if name != "interleaved-1f1b" else v + 1
    schedule = get_schedule(name, p, p * k, v)
    costs = uniform_costs(schedule.model_stages, forward_ms=f, backward_ms=b)
    topology = latency_topology(p, hop_quarters / 4)
    analytic = closed_form(schedule, costs, topology)
    assume(analytic is not None)  # 1F1B's formula with latency holds only where F >= B
    trace, which = simulate_with(schedule, costs, topology)
    assert which == "fast"
    assert trace.makespan_ms == pytest.approx(analytic.makespan_ms, rel=1e-12)


# ---------------------------------------------------------------------------
# Choosing: what only the engine runs, and why


def test_auto_takes_the_engine_for_shared_channels_and_variability():
    schedule = get_schedule("1f1b", 4, 8)
    costs = uniform_costs(4, 1.0, 2.0, activation_bytes=1e6)
    link = Link(latency_us=10, bandwidth_gbps=1.0)
    shared = Topology(4, default=link, channels={(0, 1): "switch", (2, 1): "switch"})
    assert "shared by several senders" in fast_unsupported(schedule, costs, shared)
    trace, which = simulate_with(schedule, costs, shared)
    assert which == "simpy"
    assert np.array_equal(trace.end, simulate(schedule, costs, shared).end)
    with pytest.raises(ValueError, match="channel 'switch' is shared by several senders"):
        simulate_with(schedule, costs, shared, evaluator="fast")
    # One sender on a named channel is still a dedicated channel.
    single = Topology(4, default=link, channels={(0, 1): "nic0", (2, 3): "nic1"})
    assert fast_unsupported(schedule, costs, single) is None
    both(schedule, costs, single)
    noise = {"duration_scale": lambda d, a: 1.0, "link_scale": lambda s, d: 1.0}
    for key, scale in noise.items():
        assert "at random" in fast_unsupported(schedule, costs, None, **{key: scale})
        assert simulate_with(schedule, costs, None, **{key: scale})[1] == "simpy"
        with pytest.raises(ValueError, match=f"at random \\({key}\\)"):
            simulate_with(schedule, costs, None, evaluator="fast", **{key: scale})
    negative = uniform_costs(4, 1.0, -2.0)
    assert "negative" in fast_unsupported(schedule, negative)
    assert simulate_with(schedule, costs, None, evaluator="simpy")[1] == "simpy"
    with pytest.raises(ValueError, match="unknown evaluator 'quick'; allowed: auto, fast, simpy"):
        simulate_with(schedule, costs, evaluator="quick")
    assert tuple(Evaluator) == ("auto", "fast", "simpy")


def test_runtime_posts_go_to_the_engine():
    path = GOLDEN.parent / "schedules" / "golden" / "torch-zbv_p2_m4_v2.lowered.csv"
    schedule = read_torch_csv(path.read_text(), "zbv")
    costs = uniform_costs(schedule.model_stages, 1.0, 2.0)
    assert "runtime posts" in fast_unsupported(schedule, costs)
    assert simulate_with(schedule, costs)[1] == "simpy"


def test_invalid_and_deadlocked_schedules_raise_the_engines_errors():
    costs = uniform_costs(2)
    backward_first = [[Action(0, F, 0), Action(0, B, 0)], [Action(1, B, 0), Action(1, F, 0)]]
    for evaluator in Evaluator:
        with pytest.raises(ScheduleError, match="1B0 comes before 1F0"):
            simulate_with(schedule_from_lists(backward_first), costs, evaluator=evaluator)
    cycle = [
        [Action(0, F, 0), Action(0, B, 0), Action(0, F, 1), Action(0, B, 1)],
        [Action(1, F, 1), Action(1, F, 0), Action(1, B, 0), Action(1, B, 1)],
    ]
    with pytest.raises(DeadlockError, match="rank 1 step 0: 1F1 waits for the activation"):
        simulate_with(schedule_from_lists(cycle), costs, evaluator="fast")


def test_costs_or_tails_that_do_not_fit_the_schedule_are_refused_by_every_evaluator():
    schedule = get_schedule("1f1b", 4, 8)
    for evaluator in Evaluator:
        with pytest.raises(ValueError, match="^costs cover 3 stages, the schedule needs 4$"):
            simulate_with(schedule, uniform_costs(3), evaluator=evaluator)
        with pytest.raises(ValueError, match="^tail_ms has 3 entries, expected 4$"):
            simulate_with(schedule, uniform_costs(4), tail_ms=[1.0] * 3, evaluator=evaluator)


def test_one_schedule_under_many_costs_reuses_its_index():
    schedule = get_schedule("zbv", 4, 8, 2)
    cache = EvaluatorCache()
    assert cache.index(schedule) is cache.index(get_schedule("zbv", 4, 8, 2))
    assert cache.index(schedule) is not cache.index(get_schedule("zbv", 4, 16, 2))
    topology = Topology(4, default=Link(latency_us=40, bandwidth_gbps=10.0))
    for forward in (0.5, 1.0, 1.75):
        costs = uniform_costs(
            8, forward, backward_input_ms=1.0, backward_weight_ms=0.25, activation_bytes=2e6
        )
        both(schedule, costs, topology, cache)
    assert cache.index_builds == 2  # the two schedules above, each laid out once


def test_a_held_cache_is_reused_and_two_caches_share_nothing():
    schedule = get_schedule("interleaved-1f1b", 4, 8, 2)
    costs = uniform_costs(8, 1.0, 2.0, activation_bytes=1e6)
    topology = Topology(4, default=Link(latency_us=10, bandwidth_gbps=20.0))
    mine, theirs = EvaluatorCache(), EvaluatorCache()
    first, which = simulate_with(schedule, costs, topology, cache=mine)
    assert which is Evaluator.FAST and mine.index_builds == 1
    again = simulate_with(get_schedule("interleaved-1f1b", 4, 8, 2), costs, topology, cache=mine)
    assert mine.index_builds == 1  # the same schedule by content: no second layout
    assert np.array_equal(again[0].end, first.end)
    assert mine.buffers.holds(mine.index(schedule).graph)  # the next sweep reuses them
    assert theirs.index_builds == 0 and not theirs.buffers.holds(mine.index(schedule).graph)
    simulate_with(schedule, uniform_costs(8, 2.0, 1.0), topology, cache=theirs)
    assert (mine.index_builds, theirs.index_builds) == (1, 1)
    assert theirs.index(schedule) is not mine.index(schedule)
    # without a cache, every call builds afresh and gives the same answer
    fresh, _ = simulate_with(schedule, costs, topology)
    assert fresh.end.tobytes() == first.end.tobytes() and mine.index_builds == 1


def test_the_evaluator_enum_round_trips_through_the_report_json():
    schedule = get_schedule("1f1b", 2, 4)
    costs = uniform_costs(2, 1.0, 2.0)
    trace, which = simulate_with(schedule, costs)
    report = replace(build_report(trace, schedule, costs), evaluator=which)
    text = json.dumps(report.to_dict())
    as_strings = json.dumps(report.to_dict() | {"evaluator": "fast"})
    assert text == as_strings and '"evaluator": "fast"' in text  # byte for byte the string
    assert Evaluator(json.loads(text)["evaluator"]) is Evaluator.FAST is which
    assert f"{which}" == str(which) == "fast"
    assert build_report(trace, schedule, costs).evaluator is Evaluator.SIMPY  # the default
    with pytest.raises(ValueError, match="unknown evaluator 'numpy'; allowed: auto, fast"):
        parse_evaluator("numpy")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy_scenarios())
def test_idle_gaps_and_their_causes_match_the_engine(case):
    # Every idle stretch of every device, and what it waited for, read off either trace.
    schedule, costs, topology = case
    engine = explain(simulate(schedule, costs, topology), schedule, topology)
    fast = explain(simulate_with(schedule, costs, topology)[0], schedule, topology)
    assert fast.gaps == engine.gaps
    assert [s["end_ms"] for s in fast.critical_path][-1] == engine.makespan_ms


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_schedules(), st.data())
def test_broken_schedules_fail_as_in_the_engine(case, data):
    # Swap two actions of one device, or move one to another device, or drop or repeat
    # one: whatever the engine makes of it (a trace, a ScheduleError, a deadlock), the
    # fast evaluator makes the same.
    schedule, costs, topology = case
    lists = [list(actions) for actions in schedule.device_actions]
    d = data.draw(st.sampled_from([k for k, a in enumerate(lists) if a]))
    i = data.draw(st.integers(0, len(lists[d]) - 1))
    how = data.draw(st.sampled_from(["swap", "move", "drop", "repeat"]))
    if how == "swap":
        j = data.draw(st.integers(0, len(lists[d]) - 1))
        lists[d][i], lists[d][j] = lists[d][j], lists[d][i]
    elif how == "move":
        lists[data.draw(st.integers(0, len(lists) - 1))].append(lists[d].pop(i))
    elif how == "drop":
        lists[d].pop(i)
    else:
        lists[d].insert(i, lists[d][i])
    broken = Schedule(tuple(map(tuple, lists)), schedule.placement, schedule.chains)
    topology = dedicated(topology)
    try:
        engine = simulate(broken, costs, topology)
    except (ScheduleError, DeadlockError) as error:
        with pytest.raises(type(error)) as raised:
            simulate_with(broken, costs, topology, evaluator="fast")
        assert str(raised.value) == str(error)
        return
    fast, which = simulate_with(broken, costs, topology, evaluator="fast")
    assert which == "fast"  # what the engine runs, the sweep runs too
    assert_same_trace(engine, fast)


# GPipe on two devices, F 1 ms, B 2 ms; a message holds its link 0.5 ms (500 kB at
# 1 GB/s), then flies 0.25 ms. Worked by hand: 1F1 starts as 1F0 ends, its input there
# at that very instant (so the device released it, not the input); 0B1 likewise.
# Rows in row order: (name, start, end, cause).
OVERLAPPED = [
    ("0F0", 0.0, 1.0, "start"),
    ("0F0->1", 1.0, 1.75, "producer"),
    ("0F1", 1.0, 2.0, "device"),
    ("0F1->1", 2.0, 2.75, "producer"),
    ("1F0", 1.75, 2.75, "input"),
    ("1F1", 2.75, 3.75, "device"),
    ("1B0", 3.75, 5.75, "device"),
    ("1B0->0", 5.75, 6.5, "producer"),
    ("1B1", 5.75, 7.75, "device"),
    ("1B1->0", 7.75, 8.5, "producer"),
    ("0B0", 6.5, 8.5, "input"),
    ("0B1", 8.5, 10.5, "device"),
]
# comm_overlap off: a sender is held until its message arrives (cause "sending").
# Rows that end together come in the order they fell due: 1F0 was due at 1.0 (when 0F0
# sent its input), 0F1 only at 1.75 (when its own send released device 0).
BLOCKING = [
    ("0F0", 0.0, 1.0, "start"),
    ("0F0->1", 1.0, 1.75, "producer"),
    ("1F0", 1.75, 2.75, "input"),
    ("0F1", 1.75, 2.75, "sending"),
    ("0F1->1", 2.75, 3.5, "producer"),
    ("1F1", 3.5, 4.5, "input"),
    ("1B0", 4.5, 6.5, "device"),
    ("1B0->0", 6.5, 7.25, "producer"),
    ("0B0", 7.25, 9.25, "input"),
    ("1B1", 7.25, 9.25, "sending"),
    ("1B1->0", 9.25, 10.0, "producer"),
    ("0B1", 10.0, 12.0, "input"),
]


@pytest.mark.parametrize("overlap, expected", [(True, OVERLAPPED), (False, BLOCKING)])
def test_hand_worked_timelines(overlap, expected):
    lists = [[Action(d, F, 0), Action(d, F, 1), Action(d, B, 0), Action(d, B, 1)] for d in (0, 1)]
    schedule = schedule_from_lists(lists)
    costs = uniform_costs(2, 1.0, 2.0, activation_bytes=500_000)
    link = Link(latency_us=250, bandwidth_gbps=1.0)
    topology = Topology(2, default=link, comm_overlap=overlap)
    trace, which = simulate_with(schedule, costs, topology)
    frame = trace.frame
    rows = list(zip(frame.name, frame.start, frame.end, frame.cause, strict=True))
    assert (which, rows) == ("fast", expected)
    engine = simulate(schedule, costs, topology).frame
    assert rows == list(zip(engine.name, engine.start, engine.end, engine.cause, strict=True))


def test_a_channel_named_after_another_pair_is_shared_too():
    # Pair (0, 1) put on the channel that pair (2, 3) has by default: two senders, one
    # queue, served first come first served across them: the engine's case.
    schedule = get_schedule("1f1b", 4, 4)
    costs = uniform_costs(4, 1.0, 2.0, activation_bytes=1e6)
    topology = Topology(4, default=Link(bandwidth_gbps=1.0), channels={(0, 1): "2->3"})
    assert "channel '2->3' is shared by several senders" in fast_unsupported(
        schedule, costs, topology
    )
    assert simulate_with(schedule, costs, topology)[1] == "simpy"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_schedules())
def test_auto_is_exact_with_any_channels(case):
    # Named channels drawn at random (some shared by several senders, some by one): where
    # auto takes the sweep, it gives the engine's trace.
    schedule, costs, topology = case
    engine = simulate(schedule, costs, topology)
    trace, which = simulate_with(schedule, costs, topology)
    if which == "fast":
        assert_same_trace(engine, trace)
    else:
        assert fast_unsupported(schedule, costs, topology) is not None
        assert np.array_equal(trace.end, engine.end)
