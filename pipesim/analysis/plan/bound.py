"""A floor under a candidate's step time, known before its timeline is simulated.

A device runs its list one action after another, so a step takes at least as long as its
busiest device is busy. It cannot start before its first action's inputs exist, and the
step cannot end before the work its last action leaves to other devices is done:

* a forward of stage ``s`` of a chain waits for the forwards of the same microbatch on
  every earlier stage of the chain (``head``);
* the input gradient of a backward at stage ``s`` still has to go back through every
  earlier stage of the chain after it, one backward (``B`` or ``I``, as the schedule
  runs that stage's) each (``drain``); a weight-gradient backward ``W`` leaves nothing;
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

import numpy as np

from pipesim.schedules.ir import Action, Kind, Schedule
from pipesim.sim.costs import Costs

FLOOR_MARGIN = 1e-9  # relative: the floor is lowered by this much
_ROW = {Kind.F: 0, Kind.B: 1, Kind.I: 2, Kind.W: 3}  # rows of the duration table


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
    """The schedule's lists walked once for ``step_floor_ms``."""
    counts = np.zeros((schedule.devices, 4, schedule.model_stages), dtype=np.float64)
    simple = set()  # (stage, kind, microbatch) of every action run on its own
    groups = []
    for d, actions in enumerate(schedule.device_actions):
        together: Counter = Counter()
        for action in actions:
            if action.sub_actions is None:
                counts[d, _ROW[action.kind], schedule.model_stage(action.stage)] += 1
                simple.add(action[:3])
            else:
                members = tuple((a.kind, schedule.model_stage(a.stage)) for a in action.sub_actions)
                together[members] += 1
        groups.append(tuple(together.items()))
    ends = [
        (actions[0], actions[-1]) if actions else (None, None)
        for actions in schedule.device_actions
    ]
    heads = tuple(_chain_before(schedule, first, (Kind.F,), simple) for first, _ in ends)
    drains = tuple(_chain_before(schedule, last, (Kind.B, Kind.I), simple) for _, last in ends)
    sizes = np.array([len(actions) for actions in schedule.device_actions], dtype=np.float64)
    return BoundProgram(counts, tuple(groups), sizes, heads, drains)


def _chain_before(
    schedule: Schedule, action: Action | None, kinds: tuple[Kind, ...], simple: set
) -> tuple[tuple[int, int], ...]:
    """``(row, layer group)`` of the work of ``action``'s microbatch on the earlier stages
    of its chain that must come before it (a forward) or after it (a backward's input
    gradient): the actions of one of ``kinds`` there, each run on its own (one inside a
    group is left out, the group's time being its own). None for a group or another kind."""
    if action is None or action.sub_actions is not None or action.kind not in kinds:
        return ()
    chain = schedule.chain_of(action.stage)
    found = []
    for stage in range(chain.first_stage, action.stage):
        for kind in kinds:
            if (stage, kind, action.microbatch) in simple:
                found.append((_ROW[kind], schedule.model_stage(stage)))
                break
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
    busy = (program.counts * table).sum(axis=(1, 2)) + program.actions * costs.overhead_ms
    busy += [sum(n * costs.group_ms(members) for members, n in kept) for kept in program.groups]
    head = np.array([sum(table[row, group] for row, group in h) for h in program.heads])
    drain = np.array([sum(table[row, group] for row, group in g) for g in program.drains])
    floor = float((head + busy + drain).max(initial=0.0))
    if tail_ms is not None and len(tail_ms):
        tail = np.asarray(tail_ms, dtype=np.float64)
        if tail_after_flush:
            floor += max(float(tail.max()), 0.0)
        else:
            floor = max(floor, float((head + busy + tail).max()))
    return floor * (1 - FLOOR_MARGIN)


__all__ = ["FLOOR_MARGIN", "BoundProgram", "bound_program", "step_floor_ms"]
