"""The end of a training step: each device's data-parallel all-reduce and optimizer step.

With data parallelism, a step is not over when the pipeline flushes: each device still
reduces its gradients across its data-parallel replicas, then steps its optimizer. Where
the reduction waits for the flush (``after_flush``: every device done computing), the
tail only adds a constant, the longest device's, and the order that flushes first wins.
Where it overlaps the cool-down (``parallel.dp_overlap``), each device starts its tail as
soon as its own last action ends, so the step ends at ``max over d of (last end on d +
tail_ms[d])``: an order that lets the device with the longest reduction finish its ``W``
passes early can win even if its pipeline flushes later. The engine runs the same rule
(``simulate(tail_ms=..., tail_after_flush=...)``); this object carries it to the search.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Tail:
    """End-of-step work per device, as the engine counts it.

    ``tail_ms[d]``: the all-reduce plus the optimizer step of device d (ms);
    ``after_flush``: whether it waits for every device (False: ``dp_overlap``, it starts
    when the device's own last action ends); ``optimizer_ms[d]``: the optimizer's part of
    ``tail_ms[d]`` (it only splits the rows of the trace, not the time).
    """

    tail_ms: tuple[float, ...]
    after_flush: bool = True
    optimizer_ms: tuple[float, ...] | None = None

    @property
    def longest_ms(self) -> float:
        return max((max(t, 0.0) for t in self.tail_ms), default=0.0)

    def engine_options(self) -> dict:
        """The keyword arguments that make ``simulate`` run this tail."""
        return {
            "tail_ms": self.tail_ms,
            "tail_after_flush": self.after_flush,
            "optimizer_ms": self.optimizer_ms,
        }

    def step_ms(self, device_ends_ms: Sequence[float]) -> float:
        """The step's end when device d's last action ends at ``device_ends_ms[d]``."""
        flush = max(device_ends_ms, default=0.0)
        if self.after_flush:
            return flush + self.longest_ms
        ends = (end + max(t, 0.0) for end, t in zip(device_ends_ms, self.tail_ms, strict=True))
        return max(flush, *ends)


def engine_options(tail: Tail | None) -> dict:
    """``simulate``'s keyword arguments for ``tail`` (none without one)."""
    return {} if tail is None else tail.engine_options()


__all__ = ["Tail", "engine_options"]
