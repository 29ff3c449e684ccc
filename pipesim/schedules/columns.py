"""A schedule as columns: one entry per simple action, in program order, device by device.

The device lists of ``Action`` are the schedule's text-like form; the passes that look at
every action at once (the validator's bulk check, the fast evaluator's graph) want arrays.
``columns`` builds them once per schedule and keeps them with it, so that building,
validating and evaluating a schedule of a million actions reads its actions once.

A policy that builds in bulk goes the other way: it makes the columns (``rank_lists``),
and the schedule's lists are made from them only when something reads them
(``pipesim.schedules.lists.ActionLists``); such a schedule is built, validated and
evaluated without an ``Action`` object.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from functools import partial
from itertools import pairwise, repeat
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from pipesim.schedules.ir import Action, Kind, Schedule
from pipesim.schedules.lists import ActionLists

ATOM_CODE = {Kind.F: 0, Kind.B: 1, Kind.I: 2, Kind.W: 3}  # a simple action's kind, as a code
GROUP_CODE = 4  # a node that runs a group (OVERLAP_F_B)
NODE_CODE = ATOM_CODE | {Kind.OVERLAP_F_B: GROUP_CODE}
_STAGE, _KIND, _MICROBATCH, _SUB_ACTIONS = (itemgetter(k) for k in range(4))
_KIND_OF_CODE = tuple(ATOM_CODE)  # code -> Kind

# ``(stage, kind, microbatch, sub_actions)`` as an Action, without NamedTuple's Python-level
# ``__new__``: what the policies map over the columns they build in bulk
make_action = partial(tuple.__new__, Action)


def actions(stage: int, kind: Kind, microbatches: range) -> Iterator[Action]:
    """``kind`` of ``stage`` for each of ``microbatches``, in order (built in bulk: a
    policy's million actions are made without a Python call each)."""
    return map(make_action, zip(repeat(stage), repeat(kind), microbatches, repeat(None)))


class Columns(NamedTuple):
    """Nodes (the entries of the device lists, chained) and atoms (the simple actions they
    run: a group's members, or the node itself). Per atom: ``node`` (which node runs it),
    ``stage``, ``kind`` (``ATOM_CODE``), ``microbatch``, ``device``. Per node:
    ``node_device`` and ``is_group``. ``one_each``: no groups, so atoms and nodes are the
    same entries."""

    node: np.ndarray
    stage: np.ndarray
    kind: np.ndarray
    microbatch: np.ndarray
    device: np.ndarray
    node_device: np.ndarray
    is_group: np.ndarray
    one_each: bool


def columns(schedule: Schedule) -> Columns:
    """The schedule's columns, built on first use and kept with the schedule."""
    return schedule.derived("columns", _build)


def performed_kinds(schedule: Schedule) -> set[Kind]:
    """The kinds of simple action the schedule runs (a group's members counted)."""
    counts = np.bincount(columns(schedule).kind, minlength=len(_KIND_OF_CODE))
    return {_KIND_OF_CODE[code] for code in np.flatnonzero(counts).tolist()}


def _build(schedule: Schedule) -> Columns:
    if isinstance(schedule.device_actions, ActionLists):  # built as columns
        return schedule.device_actions.columns
    lengths = [len(actions) for actions in schedule.device_actions]
    nodes = list(itertools.chain.from_iterable(schedule.device_actions))
    node_device = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    count = len(nodes)
    if not any(map(_SUB_ACTIONS, nodes)):  # a group's sub-actions: a non-empty tuple
        atoms, node, device = nodes, np.arange(count, dtype=np.int64), node_device
        is_group = np.zeros(count, dtype=bool)
        one_each = True
    else:
        owners = [n for n, action in enumerate(nodes) for _ in action.atoms]
        node = np.asarray(owners, dtype=np.int64)
        device = node_device[node]
        atoms = [atom for action in nodes for atom in action.atoms]
        is_group = np.fromiter((a.sub_actions is not None for a in nodes), bool, count)
        one_each = False
    size = len(atoms)
    return Columns(
        node=node,
        stage=np.fromiter(map(_STAGE, atoms), np.int64, size),
        kind=np.fromiter(map(ATOM_CODE.__getitem__, map(_KIND, atoms)), np.int64, size),
        microbatch=np.fromiter(map(_MICROBATCH, atoms), np.int64, size),
        device=device,
        node_device=node_device,
        is_group=is_group,
        one_each=one_each,
    )


def rank_lists(ranks: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> ActionLists:
    """A schedule's lists from each device's columns ``(stage, kind, microbatch)``, in
    program order, ``kind`` as ``ATOM_CODE``: made into Actions only when read."""
    devices = len(ranks)
    lengths = [len(stage) for stage, _, _ in ranks]
    device = np.repeat(np.arange(devices, dtype=np.int64), lengths)
    stage, kind, microbatch = (
        np.concatenate([np.asarray(rank[k], dtype=np.int64) for rank in ranks] or [device])
        for k in range(3)
    )
    return action_lists(devices, device, stage, kind, microbatch)


def action_lists(
    devices: int, device: np.ndarray, stage: np.ndarray, kind: np.ndarray, microbatch: np.ndarray
) -> ActionLists:
    """``devices`` lists of simple actions, given as columns in program order, device by
    device (``device`` never decreasing; ``kind`` as ``ATOM_CODE``)."""
    count = len(stage)
    found = Columns(
        node=np.arange(count, dtype=np.int64),
        stage=stage,
        kind=kind,
        microbatch=microbatch,
        device=device,
        node_device=device,
        is_group=np.zeros(count, dtype=bool),
        one_each=True,
    )
    return ActionLists(
        devices,
        partial(_made_lists, found, devices),
        atoms=count,
        training=bool((kind != ATOM_CODE[Kind.F]).any()),
        columns=found,
        content=(device, stage, kind, microbatch),
    )


def kept_lists(found: Columns, devices: int, keep: np.ndarray) -> ActionLists:
    """The simple actions of ``found`` (one atom a node) where ``keep``, in their order."""
    pick = (found.device, found.stage, found.kind, found.microbatch)
    return action_lists(devices, *(column[keep] for column in pick))


def _made_lists(found: Columns, devices: int) -> tuple[tuple[Action, ...], ...]:
    """The Actions the columns stand for, device by device."""
    kinds = map(_KIND_OF_CODE.__getitem__, found.kind.tolist())
    rows = zip(found.stage.tolist(), kinds, found.microbatch.tolist(), repeat(None))
    made = list(map(make_action, rows))
    bounds = np.searchsorted(found.device, np.arange(devices + 1)).tolist()
    return tuple(tuple(made[start:stop]) for start, stop in pairwise(bounds))


__all__ = [
    "ATOM_CODE",
    "GROUP_CODE",
    "NODE_CODE",
    "Columns",
    "action_lists",
    "actions",
    "columns",
    "kept_lists",
    "make_action",
    "performed_kinds",
    "rank_lists",
]
