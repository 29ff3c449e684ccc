"""Invariants of the engine on random schedules, and agreement with the oracle."""

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.schedules import POLICIES, get_schedule
from pipesim.schedules.ir import Action, B, ConstraintError, F, I, W, schedule_from_lists
from pipesim.schedules.validity import validate
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.links import Link, Topology
from pipesim.sim.memory import memory_timelines
from pipesim.sim.metrics import build_report
from pipesim.sim.trace import Cause, Lane
from tests.helpers import shared_channels
from tests.oracle import evaluate

QUARTERS = st.integers(0, 12).map(lambda k: k / 4)  # exact in binary floating point


@st.composite
def random_schedules(draw):
    """A random placement and a random topological order of the step's work.

    Each device's list is a subsequence of one global dependency-respecting order, so the
    schedule can always finish; split backward (I + W) is drawn per microbatch.
    """
    devices = draw(st.integers(1, 4))
    stages = draw(st.integers(1, 6))
    placement = [
        s % devices if s < devices else draw(st.integers(0, devices - 1)) for s in range(stages)
    ]
    microbatches = draw(st.integers(1, 4))
    split = [draw(st.booleans()) for _ in range(microbatches)]
    backward = draw(st.booleans())
    done: set[tuple] = set()

    def ready(node):
        s, kind, i = node
        if kind == F:
            return s == 0 or (s - 1, F, i) in done
        if kind == W:
            return (s, I, i) in done
        upstream = s == stages - 1 or (s + 1, kind, i) in done
        return (s, F, i) in done and upstream

    todo = [(s, F, i) for s in range(stages) for i in range(microbatches)]
    if backward:
        for i in range(microbatches):
            kinds = (I, W) if split[i] else (B,)
            todo += [(s, k, i) for s in range(stages) for k in kinds]
    lists = [[] for _ in range(devices)]
    while todo:
        candidates = [n for n in todo if ready(n)]
        node = candidates[draw(st.integers(0, len(candidates) - 1))]
        todo.remove(node)
        done.add(node)
        lists[placement[node[0]]].append(Action(*node))
    schedule = schedule_from_lists(lists)
    costs = uniform_costs(
        stages,
        forward_ms=[draw(QUARTERS) for _ in range(stages)],
        backward_input_ms=[draw(QUARTERS) for _ in range(stages)],
        backward_weight_ms=[draw(QUARTERS) for _ in range(stages)],
        activation_bytes=[draw(st.integers(0, 4)) * 250_000 for _ in range(stages)],
        activation_memory_bytes=[draw(st.integers(0, 9)) * 10 for _ in range(stages)],
        weight_grad_memory_bytes=0,
    )
    link = Link(
        latency_us=draw(st.integers(0, 4)) * 250,
        bandwidth_gbps=draw(st.sampled_from([1.0, float("inf")])),
        gap_us=draw(st.sampled_from([0, 0, 250])),
    )
    topology = Topology(
        devices,
        default=link,
        channels=draw(shared_channels(devices)),
        comm_overlap=draw(st.booleans()),
    )
    return schedule, costs, topology


def check_invariants(schedule, costs, topology):
    trace = simulate(schedule, costs, topology)
    frame = trace.frame
    compute = frame[frame.lane == "compute"]
    # Every action runs exactly once.
    expected = Counter(str(a) for actions in schedule.device_actions for a in actions)
    assert Counter(compute.name) == expected
    # No device runs two actions at once; each runs its list in order.
    for d, actions in enumerate(schedule.device_actions):
        rows = compute[compute.device == d]
        assert list(rows.name) == [str(a) for a in actions]
        assert (rows.start.to_numpy()[1:] >= rows.end.to_numpy()[:-1]).all()
    # Dependencies hold: an input is consumed after it arrives.
    starts, ends = {}, {}
    for row in np.flatnonzero(trace.lane == 0):
        for atom in trace.actions[row].atoms:
            starts[str(atom)], ends[str(atom)] = trace.start[row], trace.end[row]
    comm = frame[frame.lane == "comm"]
    arrivals = {}
    for row in comm.itertuples():
        arrivals[(row.kind, row.stage, row.microbatch)] = row.end
    for actions in schedule.device_actions:
        for action in actions:
            for atom in action.atoms:
                s, i = atom.stage, atom.microbatch
                start = starts[str(atom)]
                if atom.kind == F and schedule.prev_stage(s) is not None:
                    assert start >= ends.get(f"{s - 1}F{i}", 0.0)
                    assert start >= arrivals.get(("SEND_F", s - 1, i), 0.0)
                if atom.kind in (B, I):
                    assert start >= ends[f"{s}F{i}"]
                    nxt = schedule.next_stage(s)
                    if nxt is not None:
                        assert start >= arrivals.get(("SEND_B", nxt, i), 0.0)
                if atom.kind == W:
                    assert start >= ends[f"{s}I{i}"]
    # busy + idle = makespan; peak memory bounds every instant.
    report = build_report(trace, schedule, costs, topology=topology)
    for d, dev in enumerate(report.per_device):
        assert abs(dev.busy_ms + dev.idle_ms - report.makespan_ms) < 1e-9
        timeline = memory_timelines(trace, schedule, costs)[d]
        if len(timeline.time):
            assert dev.peak_activation_bytes >= timeline.activation_bytes.max() - 1e-9
            assert abs(timeline.activation_bytes[-1]) < 1e-9  # everything taken is given back
    # The oracle, computed without SimPy, agrees exactly.
    oracle = evaluate(schedule, costs, topology)
    for d in range(schedule.devices):
        rows = compute[compute.device == d]
        mine = list(zip(rows.start, rows.end, strict=True))
        theirs = [oracle[(d, k)] for k in range(len(schedule.device_actions[d]))]
        assert mine == theirs
    check_causes(trace, topology)
    return report


def check_causes(trace, topology=None):
    """Every row starts exactly when what released it ended (a queued transfer: when the
    transfer ahead of it left the channel, after that one started and before it arrived)."""
    start, end, cause, cause_row = trace.start, trace.end, trace.cause, trace.cause_row
    for row in range(len(start)):
        ahead = cause_row[row]
        if cause[row] == Cause.START:
            assert start[row] == 0 and ahead == -1
        elif cause[row] == Cause.CHANNEL:
            assert trace.lane[row] == trace.lane[ahead] == Lane.COMM
            # ahead left the channel after it started (at once if it carried no bytes)
            assert start[ahead] <= start[row] <= end[ahead]
            assert channel_of(trace, row, topology) == channel_of(trace, ahead, topology)
        else:
            assert 0 <= ahead < row or cause[row] == Cause.FLUSH
            assert start[row] == end[ahead], (trace.name(row), trace.name(ahead))


def channel_of(trace, row, topology):
    src, dst = int(trace.device[row]), int(trace.peer[row])
    return (topology or Topology(trace.devices)).channel(src, dst)


@settings(max_examples=30, deadline=None)
@given(random_schedules(), st.integers(0, 2**32 - 1))
def test_causes_stay_exact_under_variability(case, seed):
    # Random durations and link times (any floats, not quarters): every row still starts
    # at its cause's end, to the bit. And the engine's general way (taken here because of
    # a link hook that changes nothing) gives the common step's trace, causes included.
    schedule, costs, topology = case
    rng = np.random.default_rng(seed)
    factors = {}

    def duration_scale(device, action):
        return factors.setdefault((device, action), float(rng.uniform(0.5, 1.5)))

    trace = simulate(
        schedule,
        costs,
        topology,
        duration_scale=duration_scale,
        link_scale=lambda src, dst: float(rng.uniform(0.5, 1.5)),
    )
    check_causes(trace, topology)
    common = simulate(schedule, costs, topology, duration_scale=duration_scale)
    general = simulate(
        schedule, costs, topology, duration_scale=duration_scale, link_scale=lambda s, d: 1.0
    )
    check_causes(common, topology)
    for column in ("device", "kind", "start", "end", "peer", "cause", "cause_row"):
        assert np.array_equal(getattr(common, column), getattr(general, column))


@settings(max_examples=60, deadline=None)
@given(random_schedules())
def test_random_schedules_keep_every_invariant(case):
    schedule, costs, topology = case
    validate(schedule)
    check_invariants(schedule, costs, topology)


@st.composite
def policy_cases(draw):
    name = draw(st.sampled_from(sorted(POLICIES)))
    devices = draw(st.integers(1, 6))
    microbatches = draw(st.integers(1, 12))
    virtual = draw(st.integers(1, 3))
    try:
        schedule = get_schedule(name, devices, microbatches, virtual)
    except ConstraintError:
        schedule = None
    stages = schedule.model_stages if schedule else 1
    costs = uniform_costs(
        stages,
        forward_ms=[draw(QUARTERS) for _ in range(stages)],
        backward_input_ms=[draw(QUARTERS) for _ in range(stages)],
        backward_weight_ms=[draw(QUARTERS) for _ in range(stages)],
        activation_memory_bytes=8,
        weight_grad_memory_bytes=2,
        activation_bytes=250_000,
    )
    topology = Topology(
        max(devices, 1),
        default=Link(latency_us=draw(st.integers(0, 3)) * 250, bandwidth_gbps=1.0),
        channels=draw(shared_channels(devices)),
    )
    return schedule, costs, topology


@settings(max_examples=80, deadline=None)
@given(policy_cases())
def test_every_policy_matches_the_oracle(case):
    schedule, costs, topology = case
    if schedule is None:
        return
    report = check_invariants(schedule, costs, topology)
    assert report.makespan_ms >= max(d.busy_ms for d in report.per_device)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["gpipe", "1f1b"]), st.integers(1, 8), st.integers(1, 16), QUARTERS, QUARTERS
)
def test_classic_closed_form(name, p, m, f, b):
    schedule = get_schedule(name, p, m)
    costs = uniform_costs(p, forward_ms=f, backward_ms=b)
    report = build_report(simulate(schedule, costs), schedule, costs)
    assert report.makespan_ms == (m + p - 1) * (f + b)
    assert report.analytic.makespan_ms == report.makespan_ms
    if f + b:
        assert np.isclose(report.bubble_fraction, (p - 1) / (m + p - 1))
        assert np.isclose(report.bubble_overhead, (p - 1) / m)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(2, 4), QUARTERS, QUARTERS)
def test_interleaved_closed_form(p, groups, v, f, b):
    m = p * groups
    schedule = get_schedule("interleaved-1f1b", p, m, v)
    costs = uniform_costs(p * v, forward_ms=f, backward_ms=b)
    report = build_report(simulate(schedule, costs), schedule, costs)
    assert report.makespan_ms == (m * v + p - 1) * (f + b)
    assert report.analytic.makespan_ms == report.makespan_ms
