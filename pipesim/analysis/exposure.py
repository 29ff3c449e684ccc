"""Exposed all-to-all: how long a MoE step's compute waits on its expert all-to-alls.

A MoE action runs attention and experts on the compute stream and the dispatch and combine
all-to-alls on the communication stream (``pipesim.sim.sublayers``). Whatever of an
action's length is not compute, its compute stream spent waiting on an all-to-all: all of
its all-to-alls for a lone pass, what the other pass's compute did not cover for an
overlapped pair (``pipesim.sim.sublayer_rows.exposed_all_to_all``). Added up per device
it is the all-to-all a device's step pays; added up along the critical path it is the
all-to-all the makespan pays, and a cause of idle compute inside the actions that the
idle gaps between them (``pipesim.analysis.critical``) do not show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipesim.schedules.ir import Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.sublayer_rows import exposed_all_to_all
from pipesim.sim.trace import Trace

CAUSE = "all-to-all"  # the compute stream waits on a dispatch or combine inside an action


@dataclass(frozen=True, slots=True)
class AllToAllExposure:
    """A step's exposed all-to-all: per device (ms its compute waits on all-to-alls inside
    its actions), per element of the critical path, and their sum along the path."""

    per_device_ms: tuple[float, ...]
    path_ms: tuple[float, ...]

    @property
    def critical_path_ms(self) -> float:
        return sum(self.path_ms)

    def to_dict(self) -> dict[str, object]:
        return {
            "critical_path_ms": self.critical_path_ms,
            "per_device_ms": {str(d): ms for d, ms in enumerate(self.per_device_ms)},
        }


def all_to_all_exposure(
    trace: Trace, schedule: Schedule, costs: Costs, path_rows: Sequence[int] = ()
) -> AllToAllExposure | None:
    """The exposed all-to-all of ``trace`` (None for costs without sub-layer parts);
    ``path_rows``: the rows of the critical path, in order."""
    exposed = exposed_all_to_all(trace, schedule, costs)
    if exposed is None:
        return None
    per_device = np.bincount(trace.device, weights=exposed, minlength=trace.devices)
    return AllToAllExposure(
        tuple(per_device.tolist()),
        tuple(float(exposed[r]) for r in path_rows),
    )


def device_exposed_ms(trace: Trace, schedule: Schedule, costs: Costs) -> tuple[float, ...]:
    """Each device's exposed all-to-all in the step (zeros without sub-layer parts)."""
    found = all_to_all_exposure(trace, schedule, costs)
    return found.per_device_ms if found is not None else (0.0,) * trace.devices


__all__ = ["CAUSE", "AllToAllExposure", "all_to_all_exposure", "device_exposed_ms"]
