"""Whether the engine would run a schedule as listed, checked in bulk for the fast evaluator.

The engine validates a schedule action by action and names what is wrong with a grid
picture. The fast evaluator only needs to know whether there is anything wrong at all
(then it hands the schedule to the engine, which says what): the validator's bulk check
answers that over whole arrays at once.
"""

from __future__ import annotations

import numpy as np

from pipesim.schedules.ir import Schedule
from pipesim.schedules.validity import first_fault


def schedule_fault(schedule: Schedule, atoms, node_device: np.ndarray) -> str | None:
    """What the engine would reject, checked in bulk by the validator
    (``pipesim.schedules.validity.first_fault``; ``atoms``: every simple action's ``node``,
    ``stage``, ``kind`` code and ``microbatch``, in program order)."""
    device = node_device if len(atoms.node) == len(node_device) else node_device[atoms.node]
    node = None if len(atoms.node) == len(node_device) else atoms.node
    return first_fault(schedule, atoms.stage, atoms.kind, atoms.microbatch, device, node)


__all__ = ["schedule_fault"]
