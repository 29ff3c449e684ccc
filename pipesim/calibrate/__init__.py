"""Calibration: measure real timings, feed them to pipesim, and check its predictions.

* ``harness``: time each stage's F, B, I and W and fit point-to-point links (torch);
* ``profile``: the versioned profile file, and ``costs_from_profile`` for scenarios;
* ``trace_import``: PyTorch profiler traces of a real run -> profile and Trace;
* ``realrun``: run a schedule for real with torch.distributed.pipelining, timing every action;
* ``fit``: the host overhead and per-hop cost, fitted from real runs;
* ``crosscheck`` and ``suite``: measured against simulated, with every error figure.

Only ``profile`` is imported here; the rest import torch inside functions when used.
"""

from pipesim.scenario.profile import (
    Profile,
    ProfileError,
    costs_from_profile,
    load_profile,
    save_profile,
    topology_from_profile,
)

__all__ = [
    "Profile",
    "ProfileError",
    "costs_from_profile",
    "load_profile",
    "save_profile",
    "topology_from_profile",
]
