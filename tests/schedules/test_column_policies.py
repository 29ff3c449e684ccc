"""Policies that build their schedules as columns (ZB-H1, ZB-H2, interleaved zero bubble,
looped BFS, Chimera): the same Actions, in the same order, as their Action-by-Action rank
programs or an independent oracle of the paper's order."""

from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.schedules import get_schedule
from pipesim.schedules.ir import Action, B, F, I, W
from pipesim.schedules.lists import ActionLists
from pipesim.schedules.policies import interleaved_zero_bubble, zb_h1, zb_h2

SMALL = settings(max_examples=40, deadline=None)


def _lists(schedule):
    assert isinstance(schedule.device_actions, ActionLists)  # built as columns
    return tuple(tuple(actions) for actions in schedule.device_actions)


@SMALL
@given(p=st.integers(1, 6), m=st.integers(1, 16))
def test_zb_h1_and_h2_columns_equal_their_actions(p, m):
    for name, module in (("zb-h1", zb_h1), ("zb-h2", zb_h2)):
        expected = tuple(module.rank_actions(r, p, m) for r in range(p))
        assert _lists(get_schedule(name, p, m)) == expected


@SMALL
@given(p=st.integers(1, 5), rounds=st.integers(1, 3), v=st.integers(2, 4), extra=st.integers(0, 3))
def test_interleaved_zero_bubble_columns_equal_its_actions(p, rounds, v, extra):
    m = rounds * (p + extra) if rounds > 1 else p + extra  # a size the rounds divide
    if max(1, m // p) > 1 and m % max(1, m // p):
        m -= m % max(1, m // p)
    expected = tuple(interleaved_zero_bubble.rank_actions(r, p, m, v) for r in range(p))
    assert _lists(get_schedule("interleaved-zero-bubble", p, m, v)) == expected


def test_zb_h1_rank_one_of_three_by_hand():
    """p = 3, m = 3, rank 1: two warm-up forwards, I0 F2, I1 W0, I2 W1, then W2."""
    expected = [(1, F, 0), (1, F, 1), (1, I, 0), (1, F, 2), (1, I, 1), (1, W, 0), (1, I, 2)]
    expected += [(1, W, 1), (1, W, 2)]
    got = _lists(get_schedule("zb-h1", 3, 3))[1]
    assert got == tuple(Action(*a) for a in expected)


def _looped_bfs_oracle(p, m, v):
    """Each device: forwards of its stages (s = rank + p c) over every microbatch, then
    the backwards with stages and microbatches reversed."""
    lists = []
    for rank in range(p):
        own = [rank + p * c for c in range(v)]
        forwards = [Action(s, F, i) for s in own for i in range(m)]
        backwards = [Action(s, B, i) for s in reversed(own) for i in reversed(range(m))]
        lists.append(tuple(forwards + backwards))
    return tuple(lists)


def _chimera_oracle(d, m):
    """The paper's timetable: microbatch j of each basic unit runs its forward on the k-th
    stage of its pipeline at step 2j + k and its backward at 2j + 2d - 1 - k."""
    timed = [[] for _ in range(d)]
    for unit in range(m // d):
        for j in range(d // 2):
            for chain in (0, 1):
                mb = chain * (m // 2) + unit * (d // 2) + j
                for k in range(d):
                    stage, device = (k, k) if chain == 0 else (d + k, d - 1 - k)
                    start = 2 * d * unit + 2 * j
                    timed[device].append((start + k, Action(stage, F, mb)))
                    timed[device].append((start + 2 * d - 1 - k, Action(stage, B, mb)))
    return tuple(tuple(a for _, a in sorted(t, key=lambda e: e[0])) for t in timed)


@SMALL
@given(p=st.integers(1, 6), m=st.integers(1, 12), v=st.integers(1, 4))
def test_looped_bfs_columns_equal_the_breadth_first_order(p, m, v):
    assert _lists(get_schedule("looped-bfs", p, m, v)) == _looped_bfs_oracle(p, m, v)


@SMALL
@given(half=st.integers(1, 4), units=st.integers(1, 4))
def test_chimera_columns_equal_the_timetable(half, units):
    d = 2 * half
    assert _lists(get_schedule("chimera", d, units * d)) == _chimera_oracle(d, units * d)


def test_chimera_two_devices_by_hand():
    """d = 2, m = 2: device 0 runs 0F0 (step 0), 3F1 (1), 3B1 (2), 0B0 (3)."""
    expected = (Action(0, F, 0), Action(3, F, 1), Action(3, B, 1), Action(0, B, 0))
    assert _lists(get_schedule("chimera", 2, 2))[0] == expected
