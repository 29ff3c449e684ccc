"""MoE passes at sub-layer grain: hand-derived timelines with and without overlap, the
engine, the fast evaluator and the oracle in agreement, and DualPipe's bubble with
overlapped pairs (DeepSeek-V3 report, table 2; deepseek-ai/DualPipe README)."""

from dataclasses import replace
from math import inf

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.schedules import get_schedule
from pipesim.schedules.ir import B, F, I, Kind, W
from pipesim.sim.costs import Costs, uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.fast import fast_simulate
from pipesim.sim.links import Link, Topology
from pipesim.sim.metrics import build_report
from pipesim.sim.sublayers import (
    PassParts,
    Role,
    StageParts,
    Stream,
    exposed_comm_ms,
    pair_timeline,
)
from tests.helpers import compute_rows
from tests.oracle import evaluate

# One MoE layer a stage: forward attention 2, dispatch 1, experts 3, combine 1 (F = 7);
# input-gradient backward combine 1, experts 4, dispatch 1, attention 3 (I = 9); weight
# gradient 2 beside the experts, 1 beside attention (W = 3, B = 12).
FORWARD = PassParts(
    (2.0, 3.0, 0.0), (1.0, 1.0), ("attention", "experts", "head"), ("dispatch", "combine")
)
INPUT = PassParts(
    (0.0, 4.0, 3.0), (1.0, 1.0), ("head", "experts", "attention"), ("combine", "dispatch")
)
WEIGHT = (0.0, 2.0, 1.0)


def moe_costs(stages: int, forward=FORWARD, inputs=INPUT, weight=WEIGHT, parts_on=None) -> Costs:
    """Uniform costs whose passes are the parts' totals, with the parts on ``parts_on``
    stages (all by default)."""
    costs = uniform_costs(
        stages,
        forward.total_ms,
        backward_input_ms=inputs.total_ms,
        backward_weight_ms=sum(weight),
    )
    chosen = range(stages) if parts_on is None else parts_on
    parts = tuple(
        StageParts(forward, inputs, weight) if k in chosen else None for k in range(stages)
    )
    return replace(costs, moe_parts=parts)


def test_an_overlapped_pair_by_hand():
    """F with B = I + W beside it: compute (0, 6, 4), comm (1, 1). Compute stream issues
    B0 F0 B1 F1 B2 F2, comm stream B0 F0 B1 F1; each part also waits for its chain:

    B.c0 [0, 0]; F.c0 attention [0, 2]; B.m0 combine [0, 1] under it; F.m0 dispatch
    [2, 3] under B.c1 experts [2, 8]; F.c1 experts [8, 11] over B.m1 dispatch [8, 9];
    B.c2 attention [11, 15] over F.m1 combine [11, 12]; F.c2 [15, 15].
    15 = all the compute; F + B = 19 alone."""
    backward = StageParts(FORWARD, INPUT, WEIGHT).backward()
    assert (backward.compute_ms, backward.comm_ms) == ((0.0, 6.0, 4.0), (1.0, 1.0))
    timeline = pair_timeline(FORWARD, backward)
    got = {(p.role, p.stream, p.index): (p.start_ms, p.end_ms) for p in timeline}
    fwd, bwd, compute, comm = Role.FORWARD, Role.BACKWARD, Stream.COMPUTE, Stream.COMM
    assert got == {
        (bwd, compute, 0): (0, 0),
        (fwd, compute, 0): (0, 2),
        (bwd, comm, 0): (0, 1),
        (fwd, comm, 0): (2, 3),
        (bwd, compute, 1): (2, 8),
        (fwd, compute, 1): (8, 11),
        (bwd, comm, 1): (8, 9),
        (bwd, compute, 2): (11, 15),
        (fwd, comm, 1): (11, 12),
        (fwd, compute, 2): (15, 15),
    }
    costs = moe_costs(2)
    assert costs.group_ms([(F, 0), (B, 1)]) == costs.overlapped_ms(0, B, 1) == 15
    assert exposed_comm_ms(timeline) == 0
    # a lone pass exposes all of its all-to-alls, and keeps its total
    assert costs.duration_ms(F, 0) == 7 and costs.pass_parts(F, 0) == FORWARD


def test_a_pair_whose_all_to_alls_outlast_the_compute():
    """Dispatch and combine 5 each against attention 2, experts 3: the comm stream sets the
    pace. B.c0 [0, 0]; F.c0 [0, 2]; B.m0 [0, 5]; F.m0 [5, 10] (after B.m0); B.c1 [5, 11]
    (after B.m0); F.c1 [11, 14] (after F.m0 and B.c1); B.m1 [11, 16] (after B.c1); B.c2
    [16, 20] (after B.m1); F.m1 [16, 21] (after B.m1); F.c2 [21, 21]."""
    forward = PassParts((2.0, 3.0, 0.0), (5.0, 5.0))
    backward = PassParts((0.0, 6.0, 4.0), (5.0, 5.0))
    timeline = pair_timeline(forward, backward)
    ends = {(p.role, p.stream, p.index): p.end_ms for p in timeline}
    assert ends[(Role.BACKWARD, Stream.COMPUTE, 1)] == 11
    assert ends[(Role.FORWARD, Stream.COMM, 0)] == 10
    assert ends[(Role.FORWARD, Stream.COMPUTE, 1)] == 14
    assert ends[(Role.BACKWARD, Stream.COMM, 1)] == 16  # after B.c1 at 11 and F.m0 at 10
    assert ends[(Role.FORWARD, Stream.COMM, 1)] == 21
    assert max(ends.values()) == 21  # F.c2 (0 long) at 21; F + B = 20 + 20
    assert exposed_comm_ms(timeline) == 21 - 15


def test_delayed_weight_gradient_fills_the_compute_stream():
    """F with I and a delayed W (delay_wgrad): I's compute (0, 4, 3), W's (0, 2, 1) issued
    after the forward's part that follows each I part, needing only that I part.

    B.c0 [0, 0]; F.c0 [0, 2]; W0 [2, 2]; B.m0 [0, 1]; F.m0 [2, 3]; B.c1 [2, 6]; F.c1
    [6, 9]; W1 [9, 11]; B.m1 [6, 7]; B.c2 [11, 14]; F.m1 [9, 10]; F.c2 [14, 14]; W2
    [14, 15]: 15, as the plain pair, its dispatch now under the forward's experts."""
    costs = moe_costs(2)
    timeline = costs.group_timeline([(F, 0), (I, 1), (W, 1)])
    weights = [(p.start_ms, p.end_ms) for p in timeline if p.role == Role.WEIGHT]
    assert weights == [(2, 2), (9, 11), (14, 15)]
    assert costs.group_ms([(F, 0), (I, 1), (W, 1)]) == 15
    # without parts the same group takes its members added up
    assert uniform_costs(2, 7, 12).group_ms([(F, 0), (I, 1), (W, 1)]) == 7 + 6 + 6


def two_stage_rows(name: str, costs: Costs, microbatches: int = 3):
    schedule = get_schedule(name, 2, microbatches)
    trace = simulate(schedule, costs)
    fast = fast_simulate(schedule, costs)
    assert compute_rows(fast) == compute_rows(trace)
    oracle = evaluate(schedule, costs)
    starts = {(d, str(schedule.device_actions[d][k])): times for (d, k), times in oracle.items()}
    assert {(d, n): (s, e) for d, n, s, e in compute_rows(trace)} == starts
    return compute_rows(trace)


def test_two_stage_timeline_without_overlap():
    """1F1B, F = 7, B = 12, m = 3: every all-to-all exposed, as pipesim always ran them.
    Rank 0: F0 F1 B0 F2 B1 B2; rank 1: F0 B0 F1 B1 F2 B2."""
    assert two_stage_rows("1f1b", moe_costs(2)) == sorted(
        [
            (0, "0F0", 0, 7),
            (0, "0F1", 7, 14),
            (0, "0B0", 26, 38),
            (0, "0F2", 38, 45),
            (0, "0B1", 45, 57),
            (0, "0B2", 64, 76),
            (1, "1F0", 7, 14),
            (1, "1B0", 14, 26),
            (1, "1F1", 26, 33),
            (1, "1B1", 33, 45),
            (1, "1F2", 45, 52),
            (1, "1B2", 52, 64),
        ]
    )


def test_two_stage_timeline_with_overlap():
    """Combined 1F1B, m = 3: rank 0 warms up with min(2 (p - r - 1) + 1, m) = 3 forwards,
    rank 1 with 1, then its units (F1;B0) and (F2;B1) of 15 each (the pair by hand)
    instead of 19: 8 ms less. Without parts the same schedule ends at 76."""
    assert two_stage_rows("1f1b-a2a-overlap", moe_costs(2)) == sorted(
        [
            (0, "0F0", 0, 7),
            (0, "0F1", 7, 14),
            (0, "0F2", 14, 21),
            (0, "0B0", 29, 41),
            (0, "0B1", 44, 56),
            (0, "0B2", 56, 68),
            (1, "1F0", 7, 14),
            (1, "(1F1;1B0)OVERLAP_F_B", 14, 29),
            (1, "(1F2;1B1)OVERLAP_F_B", 29, 44),
            (1, "1B2", 44, 56),
        ]
    )
    plain = uniform_costs(2, 7, backward_input_ms=9, backward_weight_ms=3)
    assert (1, "1B2", 52, 64) in two_stage_rows("1f1b-a2a-overlap", plain)
    assert max(e for _, _, _, e in two_stage_rows("1f1b-a2a-overlap", plain)) == 76


def test_the_overlap_never_takes_longer_than_the_passes_in_turn():
    forward, inputs = PassParts((1.0, 0.5, 2.0), (3.0, 0.25)), PassParts((0.5, 1.0), (4.0,))
    for weight in ((), (0.5, 0.5)):
        timeline = pair_timeline(forward, inputs, weight)
        length = max(p.end_ms for p in timeline)
        assert max(4.25 + 3.5, forward.total_ms, inputs.total_ms) <= length
        assert length <= forward.total_ms + inputs.total_ms + sum(weight)


# ---------------------------------------------------------------------------
# DualPipe's bubble with overlapped pairs

DUAL_F = PassParts((1.0, 1.0, 0.0), (0.5, 0.5))  # F = 3
DUAL_I = PassParts((0.0, 1.0, 1.0), (0.5, 0.5))  # I = 3
DUAL_W = (0.0, 0.5, 0.5)  # W = 1, B = 4


@pytest.mark.parametrize(("devices", "extra"), [(2, 0), (4, 1), (6, 0), (8, 2)])
def test_dualpipe_bubble_with_moe_pairs(devices, extra):
    """F&B from the parts: compute B0 [0, 0], F0 [0, 1], B1 [1, 2.5], F1 [2.5, 3.5], B2
    [3.5, 5]; every all-to-all under the other's compute: F&B = 5 < F + B = 7. The README's
    bubble (PP/2 - 1)(F&B + B - 3W) is what the middle devices idle, those with the most
    pairs, 2 (m/2 - D + P) - 1; the others idle less, F + B - F&B per pair they lack."""
    microbatches = 2 * devices + 2 * extra
    schedule = get_schedule("dualpipe", devices, microbatches)
    costs = moe_costs(devices, DUAL_F, DUAL_I, DUAL_W)
    pair = costs.overlapped_ms(0, B, 0)
    assert pair == 5
    report = build_report(simulate(schedule, costs), schedule, costs)
    half, n = devices // 2, microbatches // 2
    bubble = (half - 1) * (pair + 4 - 3 * 1)
    idle = [d.idle_ms for d in report.per_device]
    assert idle[half - 1] == idle[half] == bubble and max(idle) == bubble
    middle_pairs = 2 * (n - devices + half) - 1
    assert report.makespan_ms == microbatches * 7 - middle_pairs * (7 - pair) + bubble


def test_dualpipev_bubble_with_moe_pairs():
    """DualPipeV on 4 devices (PP = 8 stages): (PP/2 - 1)(F&B + B - 3W) = 3 * 6 on its last
    device."""
    schedule = get_schedule("dualpipev", 4, 10, 2)
    costs = moe_costs(8, DUAL_F, DUAL_I, DUAL_W)
    report = build_report(simulate(schedule, costs), schedule, costs)
    assert max(d.idle_ms for d in report.per_device) == report.per_device[-1].idle_ms == 18


# ---------------------------------------------------------------------------
# Engine, fast evaluator and oracle on random MoE schedules

POLICIES = [
    ("1f1b", 1, {}),
    ("dualpipe", 1, {}),
    ("dualpipev", 2, {}),
    ("1f1b-a2a-overlap", 1, {}),
    ("1f1b-a2a-overlap", 1, {"delay_wgrad": True}),
    ("interleaved-1f1b-a2a-overlap", 2, {}),
    ("interleaved-1f1b-a2a-overlap", 2, {"delay_wgrad": True}),
]
HALVES = st.integers(0, 8).map(lambda k: k / 2)


@st.composite
def pass_parts(draw, layers):
    return PassParts(
        tuple(draw(HALVES) for _ in range(2 * layers + 1)),
        tuple(draw(HALVES) for _ in range(2 * layers)),
    )


@st.composite
def moe_runs(draw):
    name, chunks, options = draw(st.sampled_from(POLICIES))
    devices = draw(st.sampled_from([2, 4]))
    microbatches = 2 * devices + 2 * draw(st.integers(0, 2))
    schedule = get_schedule(name, devices, microbatches, chunks, **options)
    stages = schedule.model_stages
    parts = []
    for _ in range(stages):
        layers = draw(st.integers(0, 2))
        forward, inputs = draw(pass_parts(layers)), draw(pass_parts(layers))
        weight = tuple(draw(HALVES) for _ in inputs.compute_ms)
        parts.append(StageParts(forward, inputs, weight) if layers else None)
    costs = uniform_costs(  # totals with something besides the parts, on some stages
        stages,
        [(p.forward.total_ms if p else 0) + draw(HALVES) for p in parts],
        backward_input_ms=[(p.backward_input.total_ms if p else 0) + 1 for p in parts],
        backward_weight_ms=[sum(p.weight_ms) if p else 1.0 for p in parts],
        activation_bytes=1e6,
    )
    link = Link(
        latency_us=draw(st.integers(0, 2)) * 500, bandwidth_gbps=draw(st.sampled_from([1.0, inf]))
    )
    return schedule, replace(costs, moe_parts=tuple(parts)), Topology(devices, default=link)


@settings(max_examples=25, deadline=None)
@given(moe_runs())
def test_engine_fast_evaluator_and_oracle_agree_on_moe_schedules(run):
    schedule, costs, topology = run
    trace = simulate(schedule, costs, topology)
    fast = fast_simulate(schedule, costs, topology)
    assert compute_rows(fast) == compute_rows(trace)
    assert fast.makespan_ms == trace.makespan_ms
    oracle = evaluate(schedule, costs, topology)
    frame = trace.frame[trace.frame.lane == "compute"]
    names = {(d, str(schedule.device_actions[d][k])): t for (d, k), t in oracle.items()}
    for d, name, start, end in zip(frame.device, frame.name, frame.start, frame.end, strict=True):
        assert names[(d, name)] == (start, end)


def test_kinds_of_group_members_are_read_as_kinds():
    """A group's members are (Kind, model stage) pairs, whatever the caller passed."""
    costs = moe_costs(2)
    assert costs.group_ms(((Kind.F, 0), (Kind.B, 1))) == costs.group_ms([(F, 0), (B, 1)])
