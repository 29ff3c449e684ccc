"""A floor under a candidate's step time, known before its timeline is simulated.

A device runs its list one action after another, so a step takes at least as long as its
busiest device is busy. It cannot start before its first action's inputs exist, and the
step cannot end before the work its last action leaves to other devices is done:

* a forward of stage ``s`` of a chain waits for the forwards of the same microbatch on
  every earlier stage of the chain (``head``);
* the input gradient of a backward at stage ``s`` still has to go back through every
  earlier stage of the chain after it, one backward (``B`` or ``I``, as the schedule
  runs that stage's; the shorter where it runs both) each (``drain``); a weight-gradient
  backward ``W`` leaves nothing;
* the end-of-step work (``tail_ms``: the gradient all-reduce and the optimizer step) runs
  after the flush on every device, or as soon as its own device falls free when it
  overlaps.

So for every device ``d``::

    step >= head(first action of d) + busy(d) + drain(last action of d)
    step >= max_d that + max_d tail(d)          (the tail after the flush)
    step >= max_d (head + busy(d) + tail(d))    (the tail as each device falls free)

Every term is a duration the timeline cannot avoid under any schedule (zero-bubble,
V-shape, bidirectional, with or without real links: messages and contention only add),
so the floor is exact as a bound: never above the simulated step. An overlapped group
counts as the one action the evaluator runs (``Costs.group_ms``); a group at either end
of a device's list counts no head or drain. The floor is taken ``FLOOR_MARGIN`` lower
still, so that float sums in another order never lift it above a step equal to it.

The walk over a schedule's lists is done once per schedule (``BoundProgram``); each
candidate's costs then give its floor with a few array sums.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from pipesim.schedules.columns import ATOM_CODE, Columns, columns
from pipesim.schedules.ir import Action, Kind, Schedule
from pipesim.sim.costs import Costs

FLOOR_MARGIN = 1e-9  # relative: the floor is lowered by this much
_ROW = {Kind.F: 0, Kind.B: 1, Kind.I: 2, Kind.W: 3}  # rows of the duration table
_SHORTER = 4  # the table's last row: the shorter of B and I
_ATOM_KINDS = tuple(ATOM_CODE)  # a column's kind code -> Kind


@dataclass(frozen=True, slots=True)
class BoundProgram:
    """What the floor needs of one schedule: per device, how many simple actions of each
    kind and layer group it runs (``counts[d, kind, group]``), its overlapped groups and
    how many of each (``groups[d]``: ``((kind, group), ...) -> count``), its number of
    actions, and the ``(kind row, layer group)`` of its first action's head and its last
    action's drain."""

    counts: np.ndarray
    groups: tuple[tuple[tuple[tuple[tuple[Kind, int], ...], int], ...], ...]
    actions: np.ndarray
    heads: tuple[tuple[tuple[int, int], ...], ...]
    drains: tuple[tuple[tuple[int, int], ...], ...]


def bound_program(schedule: Schedule) -> BoundProgram:
    """The schedule's lists walked once for ``step_floor_ms``: the simple actions counted
    from its columns (``pipesim.schedules.columns``), its groups from its lists."""
    table = columns(schedule)
    model_stage = np.array(list(map(schedule.model_stage, range(schedule.stages))), np.int64)
    alone = ~table.is_group[table.node]  # atoms run on their own, not inside a group
    counts = np.zeros((schedule.devices, 4, schedule.model_stages), dtype=np.float64)
    at = (table.device[alone], table.kind[alone], model_stage[table.stage[alone]])
    np.add.at(counts, at, 1.0)
    kinds = _KindsAt(_present(table, alone, schedule.stages))
    groups: list[tuple] = [()] * schedule.devices
    if not table.one_each:
        for d, actions in enumerate(schedule.device_actions):
            together = Counter(
                tuple((m.kind, m.stage) for m in a.sub_actions)
                for a in actions
                if a.sub_actions is not None
            )
            groups[d] = tuple(_in_groups(schedule, together).items())
    ends = _ends(schedule, table)
    heads = tuple(_chain_before(schedule, first, (Kind.F,), kinds) for first, _ in ends)
    drains = tuple(_chain_before(schedule, last, (Kind.B, Kind.I), kinds) for _, last in ends)
    sizes = np.bincount(table.node_device, minlength=schedule.devices).astype(np.float64)
    return BoundProgram(counts, tuple(groups), sizes, heads, drains)


def _ends(schedule: Schedule, table: Columns) -> list[tuple[Action | None, Action | None]]:
    """Each device's first and last action (None, None for an empty list). Without
    groups, read from the columns: a schedule built as columns is never made into
    Actions for it."""
    if not table.one_each:
        return [(a[0], a[-1]) if a else (None, None) for a in schedule.device_actions]
    bounds = np.searchsorted(table.node_device, np.arange(schedule.devices + 1)).tolist()
    stage, kind, microbatch = (c.tolist() for c in (table.stage, table.kind, table.microbatch))

    def action(k: int) -> Action:
        return Action(stage[k], _ATOM_KINDS[kind[k]], microbatch[k])

    return [
        (action(start), action(stop - 1)) if stop > start else (None, None)
        for start, stop in pairwise(bounds)
    ]


def _present(table: Columns, chosen: np.ndarray, stages: int) -> np.ndarray:
    """``[stage, kind row]``: whether some chosen atom runs that kind at that stage."""
    found = np.zeros((stages, 4), dtype=bool)
    found[table.stage[chosen], table.kind[chosen]] = True
    return found


def _in_groups(schedule: Schedule, together: Counter) -> Counter:
    """Groups by their members' (kind, layer group)."""
    found: Counter = Counter()
    for members, n in together.items():
        found[tuple((kind, schedule.model_stage(stage)) for kind, stage in members)] += n
    return found


@dataclass(frozen=True, slots=True)
class _KindsAt:
    """Which kinds each stage runs on their own (``alone[stage, row]``)."""

    alone: np.ndarray

    def row(self, stage: int, kinds: tuple[Kind, ...]) -> int | None:
        """The table row of a microbatch's action of one of ``kinds`` at ``stage``: its
        kind's where the stage runs only that one of them on its own, the shorter of
        B and I (``_SHORTER``) where it runs both, None where it runs none of them on its
        own (a group's time is its own). A kind a stage runs both on its own and inside
        groups counts as run on its own, as the floor has always counted it."""
        present = [kind for kind in kinds if self.alone[stage, _ROW[kind]]]
        if len(present) == 1:
            return _ROW[present[0]]
        return _SHORTER if present else None


def _chain_before(
    schedule: Schedule, action: Action | None, kinds: tuple[Kind, ...], at: _KindsAt
) -> tuple[tuple[int, int], ...]:
    """``(row, layer group)`` of the work of ``action``'s microbatch on the earlier stages
    of its chain that must come before it (a forward) or after it (a backward's input
    gradient), each one of ``kinds`` (``_KindsAt.row``). None for a group or another kind."""
    if action is None or action.sub_actions is not None or action.kind not in kinds:
        return ()
    chain = schedule.chain_of(action.stage)
    found = []
    for stage in range(chain.first_stage, action.stage):
        row = at.row(stage, kinds)
        if row is not None:
            found.append((row, schedule.model_stage(stage)))
    return tuple(found)


def step_floor_ms(
    program: BoundProgram,
    costs: Costs,
    tail_ms: Sequence[float] | None = None,
    tail_after_flush: bool = True,
) -> float:
    """A lower bound on the step time of the schedule of ``program`` under ``costs`` and
    the end-of-step work ``tail_ms`` (per device; see the module's docstring)."""
    table = np.array(
        [costs.forward_ms, costs.backward_ms, costs.backward_input_ms, costs.backward_weight_ms],
        dtype=np.float64,
    )
    table = np.vstack([table, np.minimum(table[1], table[2])])
    busy = (program.counts * table[:4]).sum(axis=(1, 2)) + program.actions * costs.overhead_ms
    busy += [sum(n * costs.group_ms(members) for members, n in kept) for kept in program.groups]
    rows = table.tolist()  # Python floats: the same sums, without NumPy's scalar indexing
    head = np.array([sum(rows[row][group] for row, group in h) for h in program.heads])
    drain = np.array([sum(rows[row][group] for row, group in g) for g in program.drains])
    floor = float((head + busy + drain).max(initial=0.0))
    if tail_ms is not None and len(tail_ms):
        tail = np.asarray(tail_ms, dtype=np.float64)
        if tail_after_flush:
            floor += max(float(tail.max()), 0.0)
        else:
            floor = max(floor, float((head + busy + tail).max()))
    return floor * (1 - FLOOR_MARGIN)


__all__ = ["FLOOR_MARGIN", "BoundProgram", "bound_program", "step_floor_ms"]
