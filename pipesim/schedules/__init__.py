"""Schedule policies and their registry.

Each policy is a module with ``NAME``, ``SUMMARY``, ``CONSTRAINTS`` (one line, for
``pipesim schedules``) and a pure function
``build(devices, microbatches, virtual_stages=1, **options) -> Schedule`` that checks its
constraints up front with ``require(...)`` and returns data. A policy whose makespan has a
closed form under uniform costs declares it as
``closed_form(p, m, v, forward_ms, backward_ms, hop_ms, training) -> (makespan_ms, busy_ms)``
(None where the formula does not hold); ``pipesim.sim.closed_form`` checks that the costs
are uniform and calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from types import ModuleType

from pipesim.schedules.gc_pause import no_cyclic_gc
from pipesim.schedules.ir import (
    Action,
    ConstraintError,
    Kind,
    Schedule,
    ScheduleError,
    forward_only,
)
from pipesim.schedules.validity import validate

# Module names, in the order `pipesim schedules` lists them.
_POLICY_MODULES = (
    "gpipe",
    "one_f_one_b",
    "interleaved",
    "looped_bfs",
    "zb_h1",
    "zb_h2",
    "eager_1f1b",
    "interleaved_zero_bubble",
    "dualpipe",
    "dualpipev",
    "zbv",
    "v_half",
    "v_min",
    "chimera",
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


ClosedForm = Callable[[int, int, int, float, float, float, bool], tuple[float, float] | None]


def closed_form_of(name: str) -> ClosedForm | None:
    """The closed form the policy ``name`` declares, or None (unknown name, or none declared)."""
    module = POLICIES.get(name)
    return getattr(module, "closed_form", None) if module is not None else None


def fit_virtual_stages(name: str, requested: int) -> int:
    """The number of virtual stages ``name`` runs with when ``requested`` does not fit it.

    A policy declares ``VIRTUAL_STAGES`` (an exact count, e.g. 1 for 1F1B, 2 for V shapes)
    or ``MIN_VIRTUAL_STAGES`` (e.g. 2 for interleaved 1F1B); otherwise any count fits.
    """
    module = POLICIES[name]
    exact = getattr(module, "VIRTUAL_STAGES", None)
    if exact is not None:
        return exact
    return max(requested, getattr(module, "MIN_VIRTUAL_STAGES", 1))


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
    with no_cyclic_gc():
        schedule = POLICIES[name].build(devices, microbatches, virtual_stages, **options)
        if forward:
            schedule = forward_only(schedule)
        validate(schedule)
    return schedule


__all__ = [
    "Action",
    "ClosedForm",
    "ConstraintError",
    "Kind",
    "POLICIES",
    "Schedule",
    "ScheduleError",
    "closed_form_of",
    "fit_virtual_stages",
    "get_schedule",
    "list_schedules",
    "validate",
]
