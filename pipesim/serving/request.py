"""A request as the workload makes it and every serving module passes it on."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Request:
    """One request: when it arrives (seconds from the start), its prompt length and how
    many tokens it will generate. ``id`` is its position in arrival order."""

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
