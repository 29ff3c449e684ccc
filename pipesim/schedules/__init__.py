"""Schedule policies and their registry.

Each policy is a module with ``NAME``, ``SUMMARY``, ``CONSTRAINTS`` (one line, for
``pipesim schedules``) and a pure function
``build(devices, microbatches, virtual_stages=1, **options) -> Schedule`` that checks its
constraints up front with ``require(...)`` and returns data.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from pipesim.schedules.ir import (
    Action,
    ConstraintError,
    Kind,
    Schedule,
    ScheduleError,
    forward_only,
    validate,
)

# Module names, in the order `pipesim schedules` lists them.
_POLICY_MODULES = (
    "gpipe",
    "one_f_one_b",
    "interleaved",
    "looped_bfs",
    "dualpipe",
    "dualpipev",
)


def _load() -> dict[str, ModuleType]:
    policies = {}
    for module_name in _POLICY_MODULES:
        module = import_module(f"pipesim.schedules.{module_name}")
        policies[module.NAME] = module
    return policies


POLICIES: dict[str, ModuleType] = _load()


def list_schedules() -> list[tuple[str, str, str]]:
    """``(name, summary, constraints)`` for every built-in policy."""
    return [(name, m.SUMMARY, m.CONSTRAINTS) for name, m in POLICIES.items()]


def get_schedule(
    name: str,
    devices: int,
    microbatches: int,
    virtual_stages: int = 1,
    *,
    forward: bool = False,
    **options: object,
) -> Schedule:
    """Build and validate the named policy; ``forward=True`` keeps only the forward passes."""
    if name not in POLICIES:
        raise ConstraintError(f"unknown schedule {name!r}; allowed: {', '.join(POLICIES)}")
    if devices < 1 or microbatches < 1 or virtual_stages < 1:
        raise ConstraintError(
            f"devices, microbatches and virtual_stages must be >= 1, got "
            f"devices={devices}, microbatches={microbatches}, virtual_stages={virtual_stages}"
        )
    schedule = POLICIES[name].build(devices, microbatches, virtual_stages, **options)
    if forward:
        schedule = forward_only(schedule)
    validate(schedule)
    return schedule


__all__ = [
    "Action",
    "ConstraintError",
    "Kind",
    "POLICIES",
    "Schedule",
    "ScheduleError",
    "get_schedule",
    "list_schedules",
    "validate",
]
