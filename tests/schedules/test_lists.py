"""Lists made on first read: a policy that builds in bulk gives its lists as columns, and
the Actions are made only when read; made or not, the schedule is the one the eager lists
give (equality, hash, text, columns, verdict)."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from pipesim.schedules import POLICIES, ConstraintError, get_schedule
from pipesim.schedules.columns import columns, make_action
from pipesim.schedules.forward import forward_only
from pipesim.schedules.ir import B, F, Schedule, to_csv
from pipesim.schedules.lists import ActionLists, MadeOnRead
from pipesim.schedules.validity import schedule_fault

BULK = (
    "1f1b",
    "gpipe",
    "interleaved-1f1b",
    "zbv",
    "eager-1f1b",
    "zb-h1",
    "zb-h2",
    "interleaved-zero-bubble",
    "looped-bfs",
    "chimera",
    "v-half",
    "v-min",
)
CHUNKED = ("interleaved-1f1b", "zbv", "interleaved-zero-bubble", "v-half", "v-min")
GRID = [(p, m, v) for p in (1, 2, 3, 4) for m in (1, 2, 3, 4, 5, 8) for v in (1, 2, 3)]


def built(name: str, p: int, m: int, v: int, forward: bool = False) -> Schedule | None:
    try:
        return get_schedule(name, p, m, v, forward=forward)
    except ConstraintError:
        return None


def eager(schedule: Schedule) -> Schedule:
    """The same schedule with its lists as plain tuples (read, so made if not yet)."""
    lists = tuple(tuple(actions) for actions in schedule.device_actions)
    return Schedule(lists, schedule.placement, schedule.chains, schedule.name, schedule.posts)


def column_arrays(schedule: Schedule) -> list[np.ndarray]:
    found = columns(schedule)
    return [found.node, found.stage, found.kind, found.microbatch, found.device]


@pytest.mark.parametrize("name", BULK)
def test_a_bulk_policy_builds_and_validates_without_making_its_actions(name):
    schedule = get_schedule(name, 4, 8, 2 if name in CHUNKED else 1)
    lists = schedule.device_actions
    assert isinstance(lists, ActionLists)
    assert schedule_fault(schedule) is None and schedule.devices == len(lists) == 4
    assert schedule.num_actions > 0 and schedule.is_training
    assert schedule.microbatches == 8 and len(columns(schedule).stage) == schedule.num_actions
    assert not lists.made  # building, validating and the counts read the columns
    assert isinstance(schedule.device_actions[0][0], tuple)
    assert lists.made


@pytest.mark.parametrize("forward", [False, True])
@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_lazy_or_not_equals_its_eager_lists(name, forward):
    for p, m, v in GRID:
        schedule = built(name, p, m, v, forward)
        if schedule is None:
            continue
        fresh = built(name, p, m, v, forward)
        twin = eager(schedule)  # reads (makes) ``schedule``'s lists; ``fresh`` stays as built
        assert isinstance(fresh.device_actions, ActionLists) == (name in BULK)
        counts = (fresh.devices, fresh.num_actions, fresh.is_training, schedule_fault(fresh))
        assert counts == (twin.devices, twin.num_actions, twin.is_training, schedule_fault(twin))
        for mine, theirs in zip(column_arrays(fresh), column_arrays(twin), strict=True):
            assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs)
        assert fresh == twin and twin == fresh and hash(fresh) == hash(twin)
        assert str(fresh) == str(twin) and to_csv(fresh) == to_csv(twin)
        assert repr(fresh) == repr(twin)
        assert fresh.device_actions == twin.device_actions and fresh == schedule


def test_two_bulk_schedules_compare_by_their_columns_without_making_actions():
    one, two = get_schedule("zbv", 4, 8, 2), get_schedule("zbv", 4, 8, 2)
    assert one == two and one.device_actions.digest() == two.device_actions.digest()
    assert one != get_schedule("zbv", 4, 9, 2) and one != get_schedule("1f1b", 8, 8)
    assert not one.device_actions.made and not two.device_actions.made
    assert hash(one) == hash(two)  # the hash is the tuples' (an eager twin hashes the same)


def test_replace_keeps_the_lists_and_their_columns_and_drops_the_verdict():
    schedule = get_schedule("1f1b", 4, 8)
    renamed = dataclasses.replace(schedule, name="mine")
    assert renamed.device_actions is schedule.device_actions
    assert columns(renamed) is columns(schedule) and schedule_fault(renamed) is None
    swapped = dataclasses.replace(schedule, placement=(3, 2, 1, 0))
    assert schedule_fault(swapped) == "an action runs on a device its stage is not placed on"
    assert not schedule.device_actions.made


def test_forward_only_of_bulk_lists_stays_columns():
    schedule = forward_only(get_schedule("interleaved-1f1b", 4, 8, 2))
    assert isinstance(schedule.device_actions, ActionLists) and not schedule.is_training
    assert [str(a) for a in schedule.device_actions[1][:3]] == ["1F0", "1F1", "1F2"]
    assert all(a.kind == F for actions in schedule.device_actions for a in actions)


def test_a_schedule_with_lists_made_on_read_pickles():
    schedule = get_schedule("gpipe", 3, 4)
    back = pickle.loads(pickle.dumps(schedule))
    assert back == schedule and back.device_actions[2][-1] == make_action((2, B, 0, None))


def test_made_on_read_makes_once_and_compares_as_its_items():
    calls = []

    def make():
        calls.append(1)
        return [1, 2, 3]

    lazy = MadeOnRead(3, make)
    assert len(lazy) == 3 and not lazy.made and not calls
    assert lazy == [1, 2, 3] and lazy == (1, 2, 3) and (1, 2, 3) == lazy
    assert lazy[1:] == [2, 3] and list(reversed(lazy)) == [3, 2, 1] and 2 in lazy
    assert lazy != [1, 2] and lazy != "123" and calls == [1]
    with pytest.raises(ValueError, match="made 2 items, 3 promised"):
        list(MadeOnRead(3, lambda: [1, 2]))
