"""Small builders shared by the tests."""

from math import inf

import pytest
from hypothesis import strategies as st

from pipesim.schedules import get_schedule
from pipesim.schedules.ir import from_csv, to_csv
from pipesim.schedules.validity import validate
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.links import Link, Topology
from pipesim.sim.metrics import build_report
from tests.oracle import evaluate


def latency_topology(devices: int, latency_ms: float) -> Topology:
    return Topology(devices, default=Link(latency_us=latency_ms * 1000))


def run_policy(
    name, devices, microbatches, virtual_stages=1, topology=None, forward=False, **cost_args
):
    schedule = get_schedule(name, devices, microbatches, virtual_stages, forward=forward)
    costs = uniform_costs(schedule.model_stages, **cost_args)
    trace = simulate(schedule, costs, topology)
    return schedule, trace, build_report(trace, schedule, costs, topology=topology)


def compute_rows(trace):
    """[(device, name, start, end)] of compute actions, sorted by device then start."""
    frame = trace.frame[trace.frame.lane == "compute"]
    rows = zip(frame.device, frame.name, frame.start, frame.end, strict=True)
    return sorted((int(d), n, float(s), float(e)) for d, n, s, e in rows)


# ---------------------------------------------------------------------------
# Policies against the oracle (shared by the schedule families' tests)

QUARTERS = st.integers(1, 12).map(lambda k: k / 4)  # exact in binary floating point


@st.composite
def policy_runs(draw, sizes, virtual_stages):
    """A policy at sizes within its constraints, random per-stage costs, a LogGP link,
    perhaps shared channels.

    ``sizes`` draws ``(name, devices, microbatches)``; ``virtual_stages[name]`` is its v.
    """
    name, devices, microbatches = draw(sizes)
    schedule = get_schedule(name, devices, microbatches, virtual_stages[name])
    stages = schedule.model_stages
    fwd = [draw(QUARTERS) for _ in range(stages)]
    costs = uniform_costs(
        stages,
        fwd,
        backward_input_ms=[draw(QUARTERS) for _ in range(stages)],
        backward_weight_ms=[draw(QUARTERS) for _ in range(stages)],
        overlapped_fb_ms=[f + draw(QUARTERS) for f in fwd],
        activation_bytes=1e6,
    )
    link = Link(
        latency_us=draw(st.integers(0, 4)) * 250, bandwidth_gbps=draw(st.sampled_from([1.0, inf]))
    )
    return schedule, costs, Topology(devices, default=link, channels=draw(shared_channels(devices)))


@st.composite
def shared_channels(draw, devices):
    """None, or some directed pairs on two shared channels (a PCIe switch's uplinks)."""
    if not draw(st.booleans()):
        return {}
    pairs = [(a, b) for a in range(devices) for b in range(devices) if a != b]
    names = [draw(st.sampled_from([None, "up0", "up1"])) for _ in pairs]
    return {pair: name for pair, name in zip(pairs, names, strict=True) if name}


def assert_matches_oracle_and_round_trips(schedule, costs, topology):
    """Valid; the engine's timeline equals the oracle's; the CSV round trip is exact."""
    validate(schedule)
    times = evaluate(schedule, costs, topology)
    frame = simulate(schedule, costs, topology).frame
    compute = frame[frame.lane == "compute"]
    for d, actions in enumerate(schedule.device_actions):
        rows = compute[compute.device == d]
        assert list(rows.name) == [str(a) for a in actions]
        expected = [t for k in range(len(actions)) for t in times[(d, k)]]
        simulated = [t for pair in zip(rows.start, rows.end, strict=True) for t in pair]
        assert simulated == pytest.approx(expected)
    assert from_csv(to_csv(schedule), schedule.name) == schedule
