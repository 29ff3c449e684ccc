"""The dependency graph of a schedule, laid out as flat arrays for the fast evaluator.

The fast evaluator (``pipesim.sim.fast``) never looks at an Action while it runs: it
walks integer arrays. This module builds them once per schedule, whatever the costs or
the links; a caller's ``EvaluatorCache`` keeps them, so a planner that scores one
schedule under many costs pays for it once.

The graph has two kinds of node:

* a **compute node** is one entry of a device's list (a simple action, or a group run as
  one, such as an overlapped F&B pair). Nodes are numbered device by device, each device
  in program order, so a device's nodes are one contiguous range.
* a **message** is the output one atom hands to the next stage: the activation of
  ``F(s,i)`` for ``F(s+1,i)``, the gradient of ``B/I(s,i)`` for ``B/I(s-1,i)``. Messages
  are numbered in their sender's program order, which is also the order in which a
  dedicated channel serves them.

Each node waits for at most one message (a group: one per member that needs an input)
and sends at most one (a group: one per member). The sweep graph's ``input_of`` and
``output_of`` hold the message number, -1 for none, or ``-2 - g`` for group ``g``'s lists.

The index also answers whether the schedule is one the engine would run without
complaint (every cell in the right order, exactly once); where it is not, the fast
evaluator hands the schedule to the engine, whose validator names the fault.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import chain
from operator import itemgetter

import numpy as np

from pipesim.schedules.columns import Columns, columns
from pipesim.schedules.ir import Kind, Schedule
from pipesim.schedules.validity import schedule_fault
from pipesim.sim.fast.kernel import SweepGraph
from pipesim.sim.fast.messages import MessageColumns, no_messages, pair_table, routes
from pipesim.sim.trace import KIND_CODE, KIND_CODES

_MEMO_SIZE = 8
_STAGE, _KIND, _MICROBATCH = (itemgetter(k) for k in range(3))  # an Action's fields
_GROUP = KIND_CODE[Kind.OVERLAP_F_B]


@dataclass(frozen=True, slots=True)
class ScheduleIndex:
    """Flat arrays of one schedule's compute nodes and messages (see the module doc).

    Per node: ``node_device``, ``node_kind`` (a KIND_CODE), ``node_stage`` and
    ``node_microbatch`` (-1 for a group), ``node_model_stage`` (the layer group whose cost
    it takes; -1 for a group). ``bounds[d]:bounds[d+1]`` are device d's nodes. ``graph``: what the sweep walks, each node's input and output
    message among it (``pipesim.sim.fast.kernel.SweepGraph``).
    Per message: ``message_node`` (its producer), ``message_src``/``message_dst``
    (devices), ``message_kind`` (SEND_F or SEND_B), ``message_stage`` and
    ``message_microbatch`` (the producing atom), ``message_action`` (the producing atom's
    entry in ``pool()``, the node's own where it is one: ``action_pool``); all but
    ``message_node`` are ``messages``'s, made when first read (a Trace's rows read them).
    ``routes[route_of]`` is each message's sender, receiver and the boundary whose
    activation bytes it carries.
    ``groups``: per group, ``(node, inputs, outputs, members as (kind, model stage))``.
    ``fault``: None when the engine would run the schedule as listed, else what is wrong.
    """

    devices: int
    bounds: tuple[int, ...]
    node_device: np.ndarray
    node_kind: np.ndarray
    node_stage: np.ndarray
    node_microbatch: np.ndarray
    node_model_stage: np.ndarray
    graph: SweepGraph
    message_node: np.ndarray
    messages: MessageColumns  # the columns below, made when first read
    groups: tuple[tuple[int, tuple[int, ...], tuple[int, ...], tuple[tuple[Kind, int], ...]], ...]
    routes: np.ndarray  # the distinct (sender, receiver, boundary) of the messages, one a row
    route_of: np.ndarray  # per message, its row in ``routes``
    chunk_of: np.ndarray  # per stage, plus a trailing -1 for stage -1
    fault: str | None
    memo: dict  # what later calls reuse (see ``remember``)
    pool: Callable[[], np.ndarray]  # the Actions of the nodes and atoms, made when called

    @property
    def message_src(self) -> np.ndarray:
        return self.messages.src

    @property
    def message_dst(self) -> np.ndarray:
        return self.messages.dst

    @property
    def message_kind(self) -> np.ndarray:
        return self.messages.kind

    @property
    def message_stage(self) -> np.ndarray:
        return self.messages.stage

    @property
    def message_microbatch(self) -> np.ndarray:
        return self.messages.microbatch

    @property
    def message_action(self) -> np.ndarray:
        return self.messages.action


@dataclass(slots=True)
class _Atoms:
    """Every atom of the schedule in program order: which node runs it, and what it is."""

    node: np.ndarray
    stage: np.ndarray
    kind: np.ndarray
    microbatch: np.ndarray
    is_group: np.ndarray  # per node: a group of atoms run as one


def _atoms(found: Columns) -> _Atoms:
    """The schedule's columns as the graph's builder reads them (``kind``: the RowKind
    codes, which are ``ATOM_CODE``'s for simple actions)."""
    return _Atoms(found.node, found.stage, found.kind, found.microbatch, found.is_group)


def build_index(schedule: Schedule) -> ScheduleIndex:
    """Lay out ``schedule``'s graph (the caller keeps it: ``EvaluatorCache.index``)."""
    devices, stages = schedule.devices, schedule.stages
    found = columns(schedule)
    node_device = found.node_device
    nodes = len(node_device)
    bounds = tuple(np.searchsorted(node_device, np.arange(devices + 1)).tolist())
    atoms = _atoms(found)
    fault = schedule_fault(schedule)
    model_stage = np.array([_model_stage(schedule, s) for s in range(stages)] + [-1])
    chunk_of = np.array([schedule.chunk(s) for s in range(stages)] + [-1], dtype=np.int64)
    is_group = atoms.is_group
    base = dict(
        devices=devices,
        bounds=bounds,
        node_device=node_device,
        chunk_of=chunk_of,
        fault=fault,
        memo={},
        pool=partial(action_pool, schedule),
    )
    if fault is not None:  # the engine will say what is wrong; nothing more to lay out
        return _empty_graph(base, nodes)
    node_kind, node_stage, node_microbatch = atoms.kind, atoms.stage, atoms.microbatch
    if len(atoms.node) != nodes:  # a group's node has kind 4, stage and microbatch -1
        node_kind = np.full(nodes, _GROUP, dtype=np.int64)
        node_stage = np.full(nodes, -1, dtype=np.int64)
        node_microbatch = np.full(nodes, -1, dtype=np.int64)
        simple_atoms = ~is_group[atoms.node]
        owners = atoms.node[simple_atoms]
        node_kind[owners] = atoms.kind[simple_atoms]
        node_stage[owners] = atoms.stage[simple_atoms]
        node_microbatch[owners] = atoms.microbatch[simple_atoms]
    graph = _messages(schedule, atoms, model_stage, is_group, bounds)
    return ScheduleIndex(
        **base,
        node_kind=node_kind,
        node_stage=node_stage,
        node_microbatch=node_microbatch,
        node_model_stage=model_stage[node_stage],
        **graph,
    )


def _model_stage(schedule: Schedule, stage: int) -> int:
    return schedule.model_stage(stage) if schedule.stage_chain[stage] >= 0 else -1


def _empty_graph(base: dict, nodes: int) -> ScheduleIndex:
    none = np.zeros(0, dtype=np.int64)
    return ScheduleIndex(
        **base,
        node_kind=np.zeros(nodes, dtype=np.int64),
        node_stage=np.zeros(nodes, dtype=np.int64),
        node_microbatch=np.zeros(nodes, dtype=np.int64),
        node_model_stage=np.zeros(nodes, dtype=np.int64),
        graph=SweepGraph(none, none, none, none, none, none, none),
        message_node=none,
        messages=no_messages(),
        groups=(),
        routes=np.zeros((0, 3), dtype=np.int64),
        route_of=none,
    )


def _messages(schedule: Schedule, atoms: _Atoms, model_stage, is_group, bounds) -> dict:
    """The messages between atoms, and each node's input and output message. What an atom
    sends, and to which atom, is looked up per (kind, stage) pair
    (``pipesim.sim.fast.messages``)."""
    stages, microbatch = schedule.stages, atoms.microbatch
    width = int(microbatch.max()) + 1
    pair = atoms.kind * stages
    pair += atoms.stage
    table = pair_table(schedule, model_stage, width)
    # the atom that consumes each cell's activation (an F) and gradient (a B or I)
    rows = 3 if (atoms.kind == KIND_CODE[Kind.W]).any() else 2  # a W: a row nothing reads
    dtype = np.int32 if len(pair) < 2**31 else np.int64
    consumer = np.full(rows * stages * width, -1, dtype=dtype)
    listed = table.listed[pair]
    listed += microbatch
    consumer[listed] = np.arange(len(pair), dtype=dtype)
    del listed
    target = table.target[pair]  # the consumer's entry, less the microbatch; -1: no message
    sender = np.flatnonzero(target >= 0)  # program order
    target += microbatch
    receiver = consumer[target[sender]]
    del consumer, target
    sent = pair[sender]
    one_each = len(atoms.node) == len(is_group)  # each atom is its own node
    produced = sender if one_each else atoms.node[sender]
    consumed = receiver if one_each else atoms.node[receiver]
    inputs, outputs, groups = _wire(atoms, produced, consumed, receiver, model_stage, is_group)
    offset = 0 if one_each else len(is_group)  # in the pool, the atoms follow the nodes
    return dict(
        graph=_sweep_graph(bounds, inputs, outputs, groups),
        message_node=produced,
        messages=MessageColumns(table, sent, sender, microbatch, offset),
        **routes(table, sent),
        groups=groups,
    )


def _wire(atoms, produced, consumed, receiver, model_stage, is_group) -> tuple:
    """Each node's input and output message, and the groups; a group's node points to
    its entry in the groups (``produced``, ``consumed``: each message's nodes;
    ``receiver``: its consuming atom)."""
    nodes = len(is_group)
    outputs, inputs = np.full(nodes, -1, dtype=np.int64), np.full(nodes, -1, dtype=np.int64)
    message = np.arange(len(produced), dtype=np.int64)
    outputs[produced], inputs[consumed] = message, message
    grouped = np.flatnonzero(is_group)
    outputs[grouped] = inputs[grouped] = -2 - np.arange(len(grouped))
    if not len(grouped):
        return inputs, outputs, ()
    group_in: dict[int, list[int]] = {}
    group_out: dict[int, list[int]] = {}
    for k in np.flatnonzero(is_group[produced]).tolist():  # program order
        group_out.setdefault(int(produced[k]), []).append(k)
    for k in np.argsort(receiver, kind="stable").tolist():  # inputs in atom order
        if is_group[consumed[k]]:
            group_in.setdefault(int(consumed[k]), []).append(k)
    members = np.bincount(atoms.node, minlength=nodes)
    groups = []
    starts = np.searchsorted(atoms.node, grouped)
    for node, at in zip(grouped.tolist(), starts.tolist(), strict=True):
        count = int(members[node])
        kinds = [Kind(KIND_CODES[k]) for k in atoms.kind[at : at + count].tolist()]
        layer = model_stage[atoms.stage[at : at + count]].tolist()
        groups.append(
            (
                node,
                tuple(group_in.get(node, ())),
                tuple(group_out.get(node, ())),
                tuple(zip(kinds, layer, strict=True)),
            )
        )
    return inputs, outputs, tuple(groups)


def _sweep_graph(bounds: tuple[int, ...], inputs, outputs, groups) -> SweepGraph:
    """The arrays the sweep walks: device ranges, inputs, outputs, the groups' lists."""
    members_in = [np.asarray(g[1], dtype=np.int64) for g in groups]
    members_out = [np.asarray(g[2], dtype=np.int64) for g in groups]

    def packed(lists: list) -> tuple[np.ndarray, np.ndarray]:
        first = np.zeros(len(lists) + 1, dtype=np.int64)
        first[1:] = np.cumsum([len(x) for x in lists])
        flat = np.concatenate(lists) if lists else np.zeros(0, dtype=np.int64)
        return first, flat.astype(np.int64)

    return SweepGraph(
        np.asarray(bounds, dtype=np.int64),
        inputs,
        outputs,
        *packed(members_in),
        *packed(members_out),
    )


def action_pool(schedule: Schedule) -> np.ndarray:
    """The Actions a fast Trace's rows show, as an object array: the schedule's nodes (the
    entries of its lists, device by device), then its atoms where a group makes them
    differ, then None (for rows beside the schedule). Made on first call, from the lists
    (which this makes, where they are made on read), and kept with the schedule."""
    return schedule.derived("action pool", _pool)


def _pool(schedule: Schedule) -> np.ndarray:
    nodes = list(chain.from_iterable(schedule.device_actions))
    atoms = [] if columns(schedule).one_each else [a for node in nodes for a in node.atoms]
    count = len(nodes) + len(atoms) + 1
    return np.fromiter(chain(nodes, atoms, [None]), dtype=object, count=count)


def remember(index: ScheduleIndex, key, value) -> None:
    """Keep ``value`` on the index under ``key`` for later calls on the same schedule (the
    Trace layout per set of messages on a channel, the routes' channels per topology); a
    few entries at most, the oldest dropped first."""
    if len(index.memo) >= _MEMO_SIZE:
        index.memo.pop(next(iter(index.memo)))
    index.memo[key] = value


__all__ = ["ScheduleIndex", "action_pool", "build_index", "remember"]
