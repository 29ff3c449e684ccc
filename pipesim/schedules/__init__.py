"""Schedules: the IR, the policies that build it, and the registry in front of them.

A schedule is data: for each device, the ordered actions it runs (``pipesim.schedules.ir``;
torch's text and CSV forms in ``torch_csv``). A policy is a pure function
``(devices, microbatches, virtual_stages, *, options) -> Schedule`` in
``pipesim.schedules.policies``, one module each, registered in ``POLICIES`` with a typed
entry (``Policy``): its name, summary and constraints (one line each, for
``pipesim schedules``), its chunk-count rule (``ChunkRule``: exactly v, at least v, or
any), the builder, the keyword-only options it takes, and, where the makespan has one
under uniform costs, its closed form
``closed_form(p, m, v, forward_ms, backward_ms, hop_ms, training) -> (makespan_ms, busy_ms)``
(None where the formula does not hold; ``pipesim.sim.closed_form`` checks that the costs
are uniform and calls it).

``get_schedule`` is the front door: it looks the name up, checks the sizes, the chunk
count and the options once for every policy (a builder states only the limits that are
its own), builds, and validates the result.
"""

from __future__ import annotations

from pipesim.schedules.forward import forward_only
from pipesim.schedules.ir import Action, ConstraintError, Kind, Schedule, ScheduleError
from pipesim.schedules.policies import POLICIES, ChunkRule, ClosedForm, Policy, Registry
from pipesim.schedules.validity import validate


def list_schedules() -> list[tuple[str, str, str]]:
    """``(name, summary, constraints)`` for every registered policy, in registry order."""
    return [(p.name, p.summary, p.constraints) for p in POLICIES.values()]


def closed_form_of(name: str) -> ClosedForm | None:
    """The closed form the policy ``name`` declares, or None (unknown name, or none declared)."""
    policy = POLICIES.get(name)
    return policy.closed_form if policy is not None else None


def fit_virtual_stages(name: str, requested: int) -> int:
    """The number of virtual stages ``name`` runs with when ``requested`` is asked for.

    A policy's ``ChunkRule`` says exactly how many (1 for 1F1B, 2 for the V shapes) or at
    least how many (2 for interleaved 1F1B; 1 where any count fits).
    """
    return POLICIES[name].chunks.fit(requested)


def get_schedule(
    name: str,
    devices: int,
    microbatches: int,
    virtual_stages: int = 1,
    *,
    forward: bool = False,
    **options: object,
) -> Schedule:
    """Build and validate the named policy; ``forward=True`` keeps only the forward passes.

    ``options`` go to the policy; one it does not take is refused (ConstraintError), as is
    a chunk count its ``ChunkRule`` does not allow.
    """
    policy = POLICIES.policy(name)
    if devices < 1 or microbatches < 1 or virtual_stages < 1:
        raise ConstraintError(
            f"devices, microbatches and virtual_stages must be >= 1, got "
            f"devices={devices}, microbatches={microbatches}, virtual_stages={virtual_stages}"
        )
    schedule = policy.schedule(devices, microbatches, virtual_stages, **options)
    if forward:
        schedule = forward_only(schedule)
    validate(schedule)
    return schedule


__all__ = [
    "Action",
    "ChunkRule",
    "ClosedForm",
    "ConstraintError",
    "Kind",
    "POLICIES",
    "Policy",
    "Registry",
    "Schedule",
    "ScheduleError",
    "closed_form_of",
    "fit_virtual_stages",
    "get_schedule",
    "list_schedules",
    "validate",
]
