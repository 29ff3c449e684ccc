"""A floor under a candidate's step time, known before its timeline is simulated.

A device runs its list one action after another, so a step takes at least as long as its
busiest device is busy. It cannot start before its first action's inputs exist, and the
step cannot end before the work its last action leaves to other devices is done:

* a forward of stage ``s`` of a chain waits for the forwards of the same microbatch on
  every earlier stage of the chain (``head``);
* the input gradient of a backward at stage ``s`` still has to go back through every
  earlier stage of the chain, one backward (or input-gradient backward, whichever is
  shorter) each, after it (``drain``); a weight-gradient backward ``W`` leaves nothing;
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
    actions, and the layer groups of its first action's head and last action's drain."""

    counts: np.ndarray
    groups: tuple[tuple[tuple[tuple[tuple[Kind, int], ...], int], ...], ...]
    actions: np.ndarray
    heads: tuple[tuple[int, ...], ...]
    drains: tuple[tuple[int, ...], ...]


def bound_program(schedule: Schedule) -> BoundProgram:
    """The schedule's lists walked once for ``step_floor_ms``."""
    model_stages = schedule.model_stages
    counts = np.zeros((schedule.devices, 4, model_stages), dtype=np.float64)
    groups, heads, drains = [], [], []
    for d, actions in enumerate(schedule.device_actions):
        together: Counter = Counter()
        for action in actions:
            if action.sub_actions is None:
                counts[d, _ROW[action.kind], schedule.model_stage(action.stage)] += 1
            else:
                members = tuple((a.kind, schedule.model_stage(a.stage)) for a in action.sub_actions)
                together[members] += 1
        groups.append(tuple(together.items()))
        heads.append(_head(schedule, actions[0]) if actions else ())
        drains.append(_drain(schedule, actions[-1]) if actions else ())
    sizes = np.array([len(actions) for actions in schedule.device_actions], dtype=np.float64)
    return BoundProgram(counts, tuple(groups), sizes, tuple(heads), tuple(drains))


def _earlier_groups(schedule: Schedule, stage: int) -> tuple[int, ...]:
    """The layer groups of the stages before ``stage`` on its chain."""
    chain = schedule.chain_of(stage)
    return tuple(schedule.model_stage(s) for s in range(chain.first_stage, stage))


def _head(schedule: Schedule, first: Action) -> tuple[int, ...]:
    if first.sub_actions is not None or first.kind != Kind.F:
        return ()
    return _earlier_groups(schedule, first.stage)


def _drain(schedule: Schedule, last: Action) -> tuple[int, ...]:
    if last.sub_actions is not None or last.kind not in (Kind.B, Kind.I):
        return ()
    return _earlier_groups(schedule, last.stage)


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
    forward = table[0]
    backward = np.minimum(table[1], table[2])
    head = np.array([forward[list(h)].sum() if h else 0.0 for h in program.heads])
    drain = np.array([backward[list(g)].sum() if g else 0.0 for g in program.drains])
    floor = float((head + busy + drain).max(initial=0.0))
    if tail_ms is not None and len(tail_ms):
        tail = np.asarray(tail_ms, dtype=np.float64)
        if tail_after_flush:
            floor += max(float(tail.max()), 0.0)
        else:
            floor = max(floor, float((head + busy + tail).max()))
    return floor * (1 - FLOOR_MARGIN)


__all__ = ["FLOOR_MARGIN", "BoundProgram", "bound_program", "step_floor_ms"]
