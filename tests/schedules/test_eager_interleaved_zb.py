"""Eager 1F1B (Alpa's overlap-friendly 1F1B) and torch's interleaved zero bubble."""

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.schedules import ConstraintError, get_schedule
from pipesim.schedules.ir import B, F, I, W, from_csv, to_csv
from pipesim.schedules.policies import interleaved_zero_bubble, zb_h1
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from tests.helpers import latency_topology, run_policy
from tests.schedules.test_zero_bubble import sized_costs
from tests.sim.test_properties import QUARTERS, check_invariants

GOLDEN = Path(__file__).parent.parent / "golden"


@pytest.mark.parametrize(
    "name, p, m, v", [("eager-1f1b", 4, 8, 1), ("interleaved-zero-bubble", 4, 8, 2)]
)
def test_golden_csv(name, p, m, v):
    golden = (GOLDEN / f"{name}_p{p}_m{m}_v{v}.csv").read_text()
    schedule = get_schedule(name, p, m, v)
    assert to_csv(schedule) == golden
    assert from_csv(golden, name) == schedule


@settings(max_examples=60, deadline=None)
@given(
    sized_costs(["eager-1f1b"]) | sized_costs(["interleaved-zero-bubble"], virtual_stages=(2, 3, 4))
)
def test_engine_matches_the_oracle(case):
    check_invariants(*case)


# -- eager 1F1B ------------------------------------------------------------------------


def test_eager_follows_alpas_example():
    """The first clocks of Alpa's OverlapFriendlyPipeDreamSchedule docstring, 3 stages."""
    schedule = get_schedule("eager-1f1b", 3, 6)
    expected = [
        ["0F0", "0F1", "0F2", "0F3", "0F4", "0B0", "0F5"],
        ["1F0", "1F1", "1F2", "1B0", "1F3", "1B1"],
        ["2F0", "2B0", "2F1", "2B1", "2F2"],
    ]
    for actions, head in zip(schedule.device_actions, expected, strict=True):
        assert [str(a) for a in actions[: len(head)]] == head


@pytest.mark.parametrize("p, m", [(4, 8), (4, 3), (6, 20), (1, 4)])
def test_eager_warmup_doubles_and_memory_follows(p, m):
    eager, one_f_one_b = get_schedule("eager-1f1b", p, m), get_schedule("1f1b", p, m)
    _, _, report = run_policy("eager-1f1b", p, m, activation_memory_bytes=1)
    for rank, actions in enumerate(eager.device_actions):
        first_backward = next(k for k, a in enumerate(actions) if a.kind == B)
        assert first_backward == min(2 * (p - rank) - 1, m)
        assert report.per_device[rank].peak_inflight == min(2 * (p - rank) - 1, m)
    assert eager.device_actions[-1] == one_f_one_b.device_actions[-1]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 7), st.integers(1, 16), QUARTERS, QUARTERS)
def test_eager_costs_what_1f1b_costs_without_communication(p, m, f, b):
    costs = uniform_costs(p, f, b)
    eager = simulate(get_schedule("eager-1f1b", p, m), costs)
    assert eager.makespan_ms == simulate(get_schedule("1f1b", p, m), costs).makespan_ms


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 7), st.integers(1, 16), st.integers(1, 12), st.integers(1, 12), st.data())
def test_eager_hides_forward_latency(p, m, f4, b4, data):
    """With a latency c <= min(T_F, T_B) on every hop, eager 1F1B takes GPipe's
    (m + p - 1)(T_F + T_B) + 2 (p - 1) c: the latency is paid once each way, at fill and
    drain, never in the steady state."""
    f, b = f4 / 4, b4 / 4
    c = data.draw(st.integers(0, min(f4, b4))) / 4
    costs, topology = uniform_costs(p, f, b), latency_topology(p, c)
    eager = simulate(get_schedule("eager-1f1b", p, m), costs, topology).makespan_ms
    assert math.isclose(eager, (m + p - 1) * (f + b) + 2 * (p - 1) * c)


def test_eager_beats_1f1b_on_a_latency_link():
    # 1F1B pays the latency in every steady-state cycle (DESIGN.md); eager does not.
    topology = latency_topology(4, 0.5)
    makespans = {
        name: simulate(get_schedule(name, 4, 8), uniform_costs(4, 1, 2), topology).makespan_ms
        for name in ("1f1b", "eager-1f1b", "gpipe")
    }
    assert makespans == {"1f1b": 41.0, "eager-1f1b": 36.0, "gpipe": 36.0}


def test_eager_takes_one_virtual_stage():
    with pytest.raises(ConstraintError, match="eager-1f1b takes virtual_stages = 1"):
        get_schedule("eager-1f1b", 4, 8, 2)


# -- interleaved zero bubble -------------------------------------------------------------


def _torch_order(p: int, m: int, v: int) -> list[list[str]]:
    """torch's own action lists, from the schedule's rank generator (no process group)."""
    from torch.distributed.pipelining.schedules import ScheduleInterleavedZeroBubble

    schedule = object.__new__(ScheduleInterleavedZeroBubble)
    schedule.pp_group_size, schedule.n_local_stages, schedule._n_microbatches = p, v, m
    schedule.number_of_rounds = max(1, m // p)
    schedule.microbatches_per_round = m // schedule.number_of_rounds
    return [
        [str(a) for a in schedule._calculate_single_rank_operations(r) if a is not None]
        for r in range(p)
    ]


TORCH_SIZES = [
    (p, m, v)
    for p in (1, 2, 3, 4, 6)
    for m in (1, 2, 3, 4, 5, 8, 10, 12, 16)
    for v in (2, 3, 4)
    if m % max(1, m // p) == 0  # torch's own condition: equal rounds
]


@pytest.mark.torch
@pytest.mark.parametrize("p, m, v", TORCH_SIZES)
def test_interleaved_zero_bubble_matches_torch(p, m, v):
    pytest.importorskip("torch.distributed.pipelining")
    schedule = get_schedule("interleaved-zero-bubble", p, m, v)
    ours = [[str(a) for a in actions] for actions in schedule.device_actions]
    assert ours == _torch_order(p, m, v)


@pytest.mark.parametrize("p, m", [(1, 3), (2, 5), (4, 8), (4, 3), (5, 12)])
def test_interleaved_zero_bubble_on_one_chunk_is_zb_h1(p, m):
    for rank in range(p):
        assert interleaved_zero_bubble.rank_actions(rank, p, m, 1) == zb_h1.rank_actions(rank, p, m)


@pytest.mark.parametrize("p, groups, v", [(4, 2, 2), (2, 3, 3), (3, 1, 4)])
def test_interleaved_zero_bubble_keeps_interleaved_1f1b_order(p, groups, v):
    """When p divides m, forwards and input gradients run in interleaved 1F1B's order."""
    m = p * groups
    zb = get_schedule("interleaved-zero-bubble", p, m, v)
    megatron = get_schedule("interleaved-1f1b", p, m, v)
    assert zb.placement == megatron.placement
    for ours, theirs in zip(zb.device_actions, megatron.device_actions, strict=True):
        assert [a for a in ours if a.kind == F] == [a for a in theirs if a.kind == F]
        assert [(a.stage, a.microbatch) for a in ours if a.kind == I] == [
            (a.stage, a.microbatch) for a in theirs if a.kind == B
        ]
        assert [(a.stage, a.microbatch) for a in ours if a.kind == W] == [
            (a.stage, a.microbatch) for a in ours if a.kind == I
        ]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(2, 4), st.data())
def test_interleaved_zero_bubble_closed_form(p, groups, v, data):
    """p | m, T_W <= min(T_F, T_I) per chunk: m v (T_F + T_I + T_W) + (p-1)(T_F + T_I - T_W),
    ZB-H1's bubble on chunk times, v times smaller than ZB-H1's on the same model."""
    f4, i4 = data.draw(st.integers(1, 12)), data.draw(st.integers(1, 12))
    f, i, w = f4 / 4, i4 / 4, data.draw(st.integers(1, min(f4, i4))) / 4
    m = p * groups
    costs = uniform_costs(p * v, f, backward_input_ms=i, backward_weight_ms=w)
    makespan = simulate(get_schedule("interleaved-zero-bubble", p, m, v), costs).makespan_ms
    assert math.isclose(makespan, m * v * (f + i + w) + (p - 1) * (f + i - w))


def test_interleaved_zero_bubble_constraints():
    with pytest.raises(ConstraintError, match="virtual_stages >= 2, got virtual_stages=1"):
        get_schedule("interleaved-zero-bubble", 4, 8, 1)
    # m = 9 on 4 devices: 2 rounds, which 9 microbatches cannot fill equally.
    with pytest.raises(ConstraintError, match=r"microbatches=9 .*=2 rounds.*multiple of 2, e.g. 8"):
        get_schedule("interleaved-zero-bubble", 4, 9, 2)
    get_schedule("interleaved-zero-bubble", 4, 10, 2)  # 2 rounds of 5: torch's flexible rounds
