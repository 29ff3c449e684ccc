"""Calibration: measure real timings, feed them to pipesim, and check its predictions.

* ``harness``: time each stage's F, B, I and W and fit point-to-point links (torch);
* ``profile``: the versioned profile file, and ``costs_from_profile`` for scenarios;
* ``trace_import``: PyTorch profiler traces of a real run -> profile and Trace;
* ``realrun``: run a schedule for real with torch.distributed.pipelining, timing every action;
* ``fit``: the host overhead and per-hop cost, fitted from real runs;
* ``crosscheck`` and ``suite``: measured against simulated, with every error figure.

The front below is what a notebook or a script needs; torch is imported inside functions,
when a measurement runs.
"""

from pipesim.calibrate.harness import MIN_REPEATS, profile_stages
from pipesim.calibrate.ops import StageSpec
from pipesim.calibrate.suite import check_schedules
from pipesim.scenario.profile import (
    Profile,
    ProfileError,
    costs_from_profile,
    load_profile,
    save_profile,
    topology_from_profile,
)

__all__ = [
    "MIN_REPEATS",
    "Profile",
    "ProfileError",
    "StageSpec",
    "check_schedules",
    "costs_from_profile",
    "load_profile",
    "profile_stages",
    "save_profile",
    "topology_from_profile",
]
