"""A schedule's columns: one entry per simple action in program order, kept with the
schedule, and dropped by ``dataclasses.replace`` (a replaced schedule is another one)."""

from __future__ import annotations

import dataclasses

import numpy as np

from pipesim.schedules import get_schedule
from pipesim.schedules.columns import ATOM_CODE, actions, columns, performed_kinds
from pipesim.schedules.ir import B, F, I, Kind, W
from pipesim.schedules.validity import schedule_fault


def test_columns_list_every_atom_in_program_order():
    schedule = get_schedule("1f1b", 2, 3)
    found = columns(schedule)
    atoms = [a for device in schedule.device_actions for a in device]
    assert found.one_each and found.node.tolist() == list(range(len(atoms)))
    assert found.stage.tolist() == [a.stage for a in atoms]
    assert found.kind.tolist() == [ATOM_CODE[a.kind] for a in atoms]
    assert found.microbatch.tolist() == [a.microbatch for a in atoms]
    assert found.device.tolist() == [0] * 6 + [1] * 6


def test_a_group_is_one_node_of_several_atoms():
    schedule = get_schedule("dualpipev", 4, 10, 2)
    found = columns(schedule)
    nodes = [a for device in schedule.device_actions for a in device]
    assert not found.one_each and found.is_group.sum() == sum(
        a.sub_actions is not None for a in nodes
    )
    first = np.flatnonzero(found.node == found.node[0])
    assert [(a.stage, ATOM_CODE[a.kind], a.microbatch) for a in nodes[0].atoms] == list(
        zip(found.stage[first], found.kind[first], found.microbatch[first], strict=True)
    )
    assert len(found.stage) == schedule.num_actions
    kinds = {atom.kind for action in nodes for atom in action.atoms}
    assert performed_kinds(schedule) == kinds and {F, I, W} <= kinds  # a group's members


def test_columns_and_the_verdict_are_built_once_and_not_carried_by_replace():
    schedule = get_schedule("zbv", 4, 8, 2)
    assert columns(schedule) is columns(schedule)
    assert schedule_fault(schedule) is None
    swapped = dataclasses.replace(schedule, device_actions=schedule.device_actions[::-1])
    assert columns(swapped) is not columns(schedule)
    assert schedule_fault(swapped) == "an action runs on a device its stage is not placed on"


def test_actions_in_bulk_are_plain_actions():
    made = tuple(actions(3, B, range(2, 5)))
    assert [str(a) for a in made] == ["3B2", "3B3", "3B4"]
    assert all(a.sub_actions is None and isinstance(a.kind, Kind) for a in made)
    assert performed_kinds(get_schedule("gpipe", 2, 2)) == {F, B}
