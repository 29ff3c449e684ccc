"""A plan's result row: one scored candidate, its configuration and the step it gives.

A row is what the planner ranks, what the Pareto front is made of and what ``pipesim plan``
prints. ``to_dict`` is the row as ``--format json`` and ``--format csv`` write it: the
candidate's scenario keys (named as ``--space`` names them, in ``AXIS_ATTRIBUTES`` order, and
``parallel.expert`` for a MoE model),
then ``METRICS``, the evaluator that ran, and the peak memory of every device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipesim.analysis.plan.axes import ALL_AXES, Candidate
from pipesim.sim.fast import Evaluator

METRICS = ("step_time_ms", "tokens_per_second", "mfu", "peak_memory_bytes", "bubble_fraction")


@dataclass(frozen=True, slots=True)
class PlanRow:
    """One scored candidate and its simulated step (memory in bytes, on its fullest GPU
    unless ``_per_device``). ``equivalent``: how many other candidates of the same outcome
    ``distinct`` folded into this one (0 elsewhere; not part of the printed row)."""

    candidate: Candidate
    step_time_ms: float
    tokens_per_second: float | None
    mfu: float | None
    peak_memory_bytes: float
    bubble_fraction: float
    evaluator: Evaluator
    peak_memory_bytes_per_device: tuple[float, ...]
    equivalent: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON and CSV print it (see the module's docstring)."""
        return self.candidate.keys() | {
            "step_time_ms": self.step_time_ms,
            "tokens_per_second": self.tokens_per_second,
            "mfu": self.mfu,
            "peak_memory_bytes": self.peak_memory_bytes,
            "bubble_fraction": self.bubble_fraction,
            "evaluator": self.evaluator,
            "peak_memory_bytes_per_device": list(self.peak_memory_bytes_per_device),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlanRow:
        """The row ``to_dict`` gave (as read back from a plan's JSON)."""
        given = ALL_AXES.items()
        candidate = Candidate(**{attr: data[key] for key, attr in given if key in data})
        return cls(
            candidate,
            *(data[name] for name in METRICS),
            evaluator=Evaluator(data["evaluator"]),
            peak_memory_bytes_per_device=tuple(data["peak_memory_bytes_per_device"]),
        )


__all__ = ["METRICS", "PlanRow"]
