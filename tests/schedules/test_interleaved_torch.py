"""Interleaved 1F1B in torch 2.13's order (``ScheduleInterleaved1F1B``), m not a multiple of p
included: torch's own orders (marked ``torch``), golden files torch wrote, the warm-up
formula, the closed form and the engine's invariants."""

from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.schedules import ConstraintError, get_schedule
from pipesim.schedules.ir import B, F, from_csv, to_csv
from pipesim.schedules.policies.interleaved import closed_form, microbatches_per_round, warmup_steps
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.metrics import build_report
from tests.helpers import latency_topology
from tests.sim.test_properties import QUARTERS, check_invariants

GOLDEN = Path(__file__).parent.parent / "golden"


def equal_rounds(p: int, m: int) -> bool:
    """torch's condition: m splits into max(1, m // p) rounds of equal size."""
    return m % max(1, m // p) == 0


def torch_order(p: int, m: int, v: int) -> list[list[str]] | None:
    """torch's action lists (idle steps dropped), or None where torch refuses m.

    The schedule is built by its own constructor; the stages it is given are bare objects
    with the four attributes the constructor reads, so no process group is needed.
    """
    from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B

    stages = [SimpleNamespace(num_stages=p * v, group_size=p, group_rank=0) for _ in range(v)]
    try:
        schedule = ScheduleInterleaved1F1B(stages, m)
    except ValueError:
        return None
    return [[str(a) for a in schedule.pipeline_order[r] if a is not None] for r in range(p)]


def our_order(p: int, m: int, v: int) -> list[list[str]] | None:
    try:
        schedule = get_schedule("interleaved-1f1b", p, m, v)
    except ConstraintError:
        return None
    return [[str(a) for a in actions] for actions in schedule.device_actions]


# Every m from 1 to 4p + 2 for p = 1..8 and v = 2..4: 480 sizes, 330 of them accepted.
TORCH_SIZES = [(p, m, v) for p in range(1, 9) for v in (2, 3, 4) for m in range(1, 4 * p + 3)]


@pytest.mark.torch
@pytest.mark.parametrize("p, m, v", [s for s in TORCH_SIZES if s[0] != s[1]])
def test_same_order_and_same_sizes_as_torch(p, m, v):
    pytest.importorskip("torch.distributed.pipelining")
    assert our_order(p, m, v) == torch_order(p, m, v)


@pytest.mark.torch
@pytest.mark.parametrize("p, v", [(p, v) for p in range(1, 9) for v in (2, 3, 4)])
def test_m_equal_to_p_keeps_megatrons_full_warm_up(p, v):
    """The one difference: with m = p Megatron (and pipesim) run every forward first, torch
    warms up with its formula. Each rank runs the same forwards and backwards in the same
    order; only how they interleave differs."""
    pytest.importorskip("torch.distributed.pipelining")
    ours, theirs = our_order(p, p, v), torch_order(p, p, v)
    for mine, torchs in zip(ours, theirs, strict=True):
        for kind in "FB":
            assert [a for a in mine if kind in a] == [a for a in torchs if kind in a]
        assert all("F" in a for a in mine[: p * v])


@pytest.mark.parametrize("p, m, v", [(4, 6, 2), (4, 10, 2)])
def test_golden_csv_written_by_torch(p, m, v):
    """Written from torch's ``pipeline_order``: one round of 6, and two rounds of 5."""
    golden = (GOLDEN / f"interleaved-1f1b_p{p}_m{m}_v{v}.csv").read_text()
    schedule = get_schedule("interleaved-1f1b", p, m, v)
    assert to_csv(schedule) == golden
    assert from_csv(golden, "interleaved-1f1b") == schedule


def test_two_rounds_of_five():
    """p = 4, m = 10: microbatches move in rounds of 5, chunk 0 then chunk 1 of each."""
    actions = get_schedule("interleaved-1f1b", 4, 10, 2).device_actions[3]
    assert [str(a) for a in actions if a.kind == F] == (
        [f"3F{i}" for i in range(5)]
        + [f"7F{i}" for i in range(5)]
        + [f"3F{i}" for i in range(5, 10)]
        + [f"7F{i}" for i in range(5, 10)]
    )
    assert [str(a) for a in actions if a.kind == B][:10] == (
        [f"7B{i}" for i in range(5)] + [f"3B{i}" for i in range(5)]
    )


@pytest.mark.parametrize(
    "p, m, n", [(4, 8, 4), (4, 6, 6), (4, 10, 5), (4, 3, 3), (3, 9, 3), (8, 18, 9), (5, 1, 1)]
)
def test_round_size(p, m, n):
    assert microbatches_per_round(p, m) == n


@pytest.mark.parametrize("p, m, v", [(4, 6, 2), (4, 10, 3), (3, 2, 2), (8, 12, 2), (4, 8, 2)])
def test_warm_up_count_is_the_formula(p, m, v):
    """warm-up = min((v - 1) n + 2 (p - r - 1), m v): forwards before the first backward."""
    n = microbatches_per_round(p, m)
    for rank, actions in enumerate(get_schedule("interleaved-1f1b", p, m, v).device_actions):
        warmup = min((v - 1) * n + 2 * (p - rank - 1), m * v)
        assert warmup_steps(rank, p, m, v) == warmup
        first_backward = next(k for k, a in enumerate(actions) if a.kind == B)
        assert first_backward == warmup + (1 if warmup < m * v else 0)


@pytest.mark.parametrize("p, m, rounds, below, above", [(4, 9, 2, 8, 10), (4, 13, 3, 12, 15)])
def test_rejects_unequal_rounds_naming_the_nearest_sizes(p, m, rounds, below, above):
    assert not equal_rounds(p, m) and equal_rounds(p, below) and equal_rounds(p, above)
    message = (
        f"rounds = max(1, microbatches // devices) = {rounds} of equal size: "
        f"microbatches={m} with devices={p} leaves {m % rounds} over; use {below} or {above}"
    )
    with pytest.raises(ConstraintError, match=message.replace("(", r"\(").replace(")", r"\)")):
        get_schedule("interleaved-1f1b", p, m, 2)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 8), st.integers(1, 30), st.integers(2, 4), QUARTERS, QUARTERS)
def test_closed_form_for_every_accepted_m(p, m, v, f, b):
    """(m v + p - 1)(F + B) for m >= p, (p v + m - 1)(F + B) below."""
    if not equal_rounds(p, m):
        assert closed_form(p, m, v, f, b, 0.0, True) is None
        return
    schedule = get_schedule("interleaved-1f1b", p, m, v)
    costs = uniform_costs(p * v, forward_ms=f, backward_ms=b)
    report = build_report(simulate(schedule, costs), schedule, costs)
    slots = m * v + p - 1 if m >= p else p * v + m - 1
    assert report.makespan_ms == slots * (f + b)
    assert report.analytic.makespan_ms == report.makespan_ms
    assert closed_form(p, m, v, f, b, 0.5, True) is None
    assert closed_form(p, m, v, f, b, 0.0, False) is None


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 20), st.integers(2, 3), st.data())
def test_engine_invariants_on_random_costs(p, m, v, data):
    if not equal_rounds(p, m):
        return
    schedule = get_schedule("interleaved-1f1b", p, m, v)
    stages = p * v
    costs = uniform_costs(
        stages,
        forward_ms=[data.draw(QUARTERS) for _ in range(stages)],
        backward_ms=[data.draw(QUARTERS) for _ in range(stages)],
        activation_memory_bytes=8,
    )
    check_invariants(schedule, costs, latency_topology(p, data.draw(QUARTERS)))
