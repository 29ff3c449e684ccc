"""Whether the engine would run a schedule as listed, checked in bulk for the fast evaluator.

The engine validates a schedule action by action and names what is wrong with a grid
picture. The fast evaluator only needs to know whether there is anything wrong at all
(then it hands the schedule to the engine, which says what): so the same rules are
checked here over whole arrays at once, with counts per cell and positions in program
order instead of a walk.
"""

from __future__ import annotations

import numpy as np

from pipesim.schedules.ir import Schedule


def schedule_fault(schedule: Schedule, atoms, node_device: np.ndarray) -> str | None:
    """What the engine would reject, checked in bulk (``atoms``: every simple action's
    ``node``, ``stage``, ``kind`` code and ``microbatch``, in program order): a stage placed elsewhere or outside
    every chain, a microbatch out of its chain's range, a cell missing or run twice, a
    backward before its forward, a W before its I, training and inference mixed."""
    stages, stage, microbatch = schedule.stages, atoms.stage, atoms.microbatch
    if not len(stage):
        return "the schedule has no actions"
    if stage.min() < 0 or stage.max() >= stages:
        return "an action names a stage the schedule lacks"
    placement = np.asarray(schedule.placement, dtype=np.int64)
    device = node_device if len(atoms.node) == len(node_device) else node_device[atoms.node]
    if not np.array_equal(placement[stage], device):
        return "an action runs on a device its stage is not placed on"
    owner = np.asarray(schedule._stage_chain, dtype=np.int64)
    if owner.min() < 0 and (owner[stage] < 0).any():
        return "an action names a stage outside every chain"
    lo = np.array([c.microbatches.start for c in schedule.chains], dtype=np.int64)[owner]
    hi = np.array([c.microbatches.stop for c in schedule.chains], dtype=np.int64)[owner]
    if len(schedule.chains) == 1:  # one range for every stage
        if microbatch.min() < lo[0] or microbatch.max() >= hi[0]:
            return "an action names a microbatch out of range"
    elif ((microbatch < lo[stage]) | (microbatch >= hi[stage])).any():
        return "an action names a microbatch out of range"
    width = int(hi.max())
    cell = stage * width + microbatch
    cells = stages * width
    counts = np.bincount(atoms.kind * cells + cell, minlength=4 * cells).reshape(4, cells)
    valid = np.zeros(cells, dtype=bool)
    for owned in schedule.chains:
        for s in owned.stages:
            valid[s * width + owned.microbatches.start : s * width + owned.microbatches.stop] = True
    f, b, i, w = counts[:, valid]
    if (counts[:, ~valid] != 0).any() or (f != 1).any():
        return "some actions are missing or run twice"
    full, split = (b == 1) & (i == 0) & (w == 0), (b == 0) & (i == 1) & (w == 1)
    forward_only = (b == 0) & (i == 0) & (w == 0)
    if not (forward_only.all() or (full | split).all()):
        return "some actions are missing or run twice"
    position = np.full((4, cells), -1, dtype=np.int64)
    position[atoms.kind, cell] = np.arange(len(cell))
    f, b, i, w = position[:, valid]
    if ((b >= 0) & (b < f)).any() or ((i >= 0) & ((i < f) | (w < i))).any():
        return "a backward runs before its forward, or a W before its I"
    return None


__all__ = ["schedule_fault"]
