"""The split-backward policies build their schedules as columns: the same Actions, in the
same order, as their Action-by-Action rank programs."""

from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.schedules import get_schedule
from pipesim.schedules.ir import Action, F, I, W
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
