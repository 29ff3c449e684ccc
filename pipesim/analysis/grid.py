"""A sweep's grid as the command line gives it: ``--grid key.path=v1,v2,...``, each value
read as YAML, into typed axes. Its own module: the planner reads ``--space`` the same way
without loading the sweep (and pandas behind it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from pipesim.analysis.errors import SweepError
from pipesim.scenario.load import load_yaml
from pipesim.scenario.schema import ScenarioError


@dataclass(frozen=True, slots=True)
class GridAxis:
    """One key of a grid and its values, each kept as typed (raw text) and parsed."""

    key: str
    raw: tuple[str, ...]
    values: tuple[Any, ...]


def parse_grid(items: Sequence[str]) -> tuple[GridAxis, ...]:
    """``["pipeline.microbatches=4,8", ...]`` -> axes. Values are YAML (``4`` is an int);
    commas inside brackets belong to the value (``costs.forward_ms=[1,2],[2,1]``)."""
    axes: list[GridAxis] = []
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise SweepError(
                f"--grid {item!r}: expected key.path=v1,v2,..., e.g. pipeline.microbatches=4,8,16"
            )
        if any(axis.key == key for axis in axes):
            raise SweepError(f"--grid {key}: given twice; list all its values in one --grid")
        raw = tuple(part.strip() for part in _split_top_level(text))
        if any(not part for part in raw):
            raise SweepError(f"--grid {item!r}: an empty value")
        try:
            values = tuple(load_yaml(part) for part in raw)  # YAML 1.2, as --set reads
        except (yaml.YAMLError, ScenarioError, RecursionError):
            raise SweepError(f"--grid {item!r}: a value is not valid YAML") from None
        for part, value in zip(raw, values, strict=True):
            if _infinities(value) > len(_INFINITY.findall(part)):
                raise SweepError(
                    f"--grid {key}: {part}: a number too large to hold (the largest is about "
                    "1.8e308); write .inf for infinity"
                )
        axes.append(GridAxis(key, raw, values))
    return tuple(axes)


_INFINITY = re.compile(r"[-+]?\.(?:inf|Inf|INF)\b")  # YAML 1.2's spellings of infinity


def _infinities(value: Any) -> int:
    """How many infinite numbers ``value`` holds: one more than its text spells as ``.inf``
    is a number too large to hold (``1e400``), which YAML reads as infinity."""
    if isinstance(value, float):
        return int(math.isinf(value))
    if isinstance(value, list):
        return sum(_infinities(item) for item in value)
    if isinstance(value, dict):
        return sum(_infinities(item) for item in value.values())
    return 0


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in text:
        if char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


__all__ = ["GridAxis", "parse_grid"]
