"""The planner's axes: the scenario keys a plan varies, a candidate as a point of them, and
``--space KEY=V1,V2`` read into values each axis allows.

Each axis is named by the scenario key it sets (``parallel.tensor``, ``pipeline.schedule``,
``parallel.expert``, ...), so ``--space`` narrows or widens it in the words a scenario is
written in; ``AXIS_ATTRIBUTES`` maps each key to its ``Candidate`` attribute, in the order
results show them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipesim.analysis.grid import parse_grid
from pipesim.schedules import POLICIES
from pipesim.search import AUTO_POLICIES


class PlanError(ValueError):
    """A plan that cannot be made as asked (a bad --space key or value, bad --gpus); one
    line."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One configuration of the job: a point of the space, in the scenario's own terms."""

    tensor: int
    devices: int
    data: int
    schedule: str
    virtual_stages: int
    microbatch_size: int
    microbatches: int
    recompute: bool
    zero_stage: int
    partition: str
    sequence_parallel: bool
    dp_overlap: bool
    tp_overlap: bool
    expert: int | None = None  # None: a dense model, which has no expert axis
    # the combined-1F1B schedules' delayed weight gradient; None: a schedule without it
    delay_wgrad: bool | None = None

    def keys(self) -> dict[str, Any]:
        """The scenario keys this candidate sets, named as ``--space`` names them (a dense
        model's candidate sets no ``parallel.expert``, a schedule without the option no
        ``pipeline.delay_wgrad``)."""
        keys = {key: getattr(self, attr) for key, attr in AXIS_ATTRIBUTES.items()}
        if self.expert is not None:
            keys["parallel.expert"] = self.expert
        if self.delay_wgrad is not None:
            keys["pipeline.delay_wgrad"] = self.delay_wgrad
        return keys


# Scenario key -> Candidate attribute, in the order results show them.
AXIS_ATTRIBUTES = {
    "parallel.tensor": "tensor",
    "pipeline.devices": "devices",
    "parallel.data": "data",
    "pipeline.schedule": "schedule",
    "pipeline.virtual_stages": "virtual_stages",
    "pipeline.microbatch_size": "microbatch_size",
    "pipeline.microbatches": "microbatches",
    "model.recompute": "recompute",
    "parallel.zero_stage": "zero_stage",
    "model.partition": "partition",
    "parallel.sequence_parallel": "sequence_parallel",
    "parallel.dp_overlap": "dp_overlap",
    "parallel.tp_overlap": "tp_overlap",
}
# A MoE model's axes, after the others: expert parallelism, and the delayed weight gradient
# of the combined-1F1B schedules (absent for a dense model).
EXPERT_AXIS = {"parallel.expert": "expert"}
DELAY_AXIS = {"pipeline.delay_wgrad": "delay_wgrad"}
ALL_AXES = AXIS_ATTRIBUTES | EXPERT_AXIS | DELAY_AXIS
COUNT_KEYS = (
    "parallel.tensor",
    "pipeline.devices",
    "parallel.data",
    "parallel.expert",
    "pipeline.virtual_stages",
    "pipeline.microbatch_size",
    "pipeline.microbatches",
)
BOOL_KEYS = (
    "model.recompute",
    "parallel.sequence_parallel",
    "parallel.dp_overlap",
    "parallel.tp_overlap",
    "pipeline.delay_wgrad",
)


def parse_space(items: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    """``["parallel.tensor=4,8", ...]`` -> ``{key: values}``, each value checked."""
    try:
        grid = parse_grid(items)
    except ValueError as exc:
        raise PlanError(str(exc).replace("--grid", "--space")) from None
    parsed = {}
    for axis in grid:
        if axis.key not in ALL_AXES:
            raise PlanError(
                f"--space {axis.key}: not an axis of the plan; allowed: " + ", ".join(ALL_AXES)
            )
        values = [
            _checked(axis.key, raw, value) for raw, value in zip(axis.raw, axis.values, strict=True)
        ]
        parsed[axis.key] = tuple(dict.fromkeys(values))  # a value given twice counts once
    return parsed


def _checked(key: str, raw: str, value: Any) -> Any:
    """One value of an axis, or PlanError saying what the axis allows."""
    if key in COUNT_KEYS:
        ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1 << 20
        allowed = "whole numbers from 1 to 1048576"
    elif key in BOOL_KEYS:
        ok, allowed = isinstance(value, bool), "true, false"
    elif key == "parallel.zero_stage":
        ok = value in (0, 1, 2, 3) and not isinstance(value, bool)
        allowed = "0, 1, 2, 3"
    elif key == "model.partition":
        ok, allowed = value in ("even", "balanced"), "even, balanced"
    else:  # pipeline.schedule
        ok = isinstance(value, str) and (value in POLICIES or value in AUTO_POLICIES)
        allowed = ", ".join([*POLICIES, *AUTO_POLICIES])
    if not ok:
        raise PlanError(f"--space {key}: {raw!r} is not allowed; allowed: {allowed}")
    return value


__all__ = [
    "ALL_AXES",
    "AXIS_ATTRIBUTES",
    "DELAY_AXIS",
    "EXPERT_AXIS",
    "BOOL_KEYS",
    "COUNT_KEYS",
    "Candidate",
    "PlanError",
    "parse_space",
]
