"""Remembering pure cost functions by the value of their arguments.

A planner derives the costs of tens of thousands of candidates that share most of their
parts: the same split of layers, the same passes, the same static memory under another
ZeRO stage or schedule. The functions that compute those parts are pure, and their
arguments are frozen dataclasses, numbers and sequences, so each part can be computed
once and handed out again. ``by_value`` wraps such a function in an ``lru_cache`` that
takes a list argument as the tuple of its items (a list and a tuple of the same numbers
are the same split), so a caller may pass either.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

Result = TypeVar("Result")
ENTRIES = 1 << 12  # per function: a planner's distinct splits, passes or groups fit


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def by_value(function: Callable[..., Result]) -> Callable[..., Result]:
    """``function`` remembered by argument value (lists taken as tuples); its results must
    be immutable, since every caller with the same arguments gets the same object."""
    cached = functools.lru_cache(maxsize=ENTRIES)(function)

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Result:
        return cached(*map(_frozen, args), **{k: _frozen(v) for k, v in kwargs.items()})

    call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return call


__all__ = ["ENTRIES", "by_value"]
