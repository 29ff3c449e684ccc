"""Schedule search: orders found for the real costs under a memory limit (zb-auto, v-auto).

A layer between the engine and the cluster models: it builds candidate schedules, runs
each on the engine, and keeps the fastest whose peak activation memory fits.

The front: the searched policies' names and what a search gives back or raises
(``pipesim.search.result``), the heuristic search (``search_schedule``,
``minimum_limit_bytes``: ``pipesim.search.auto``) and the exact mode (``exact_schedule``:
``pipesim.search.exact``). Each name is imported from its module on first use (PEP 562),
so a scenario with a fixed policy checks its name without loading the search itself.
"""

import importlib

_PUBLIC = {
    "AUTO_POLICIES": "pipesim.search.result",
    "exact_schedule": "pipesim.search.exact",
    "ExactUnavailable": "pipesim.search.result",
    "FAMILIES": "pipesim.search.result",
    "minimum_limit_bytes": "pipesim.search.auto",
    "search_schedule": "pipesim.search.auto",
    "SearchError": "pipesim.search.result",
    "SearchResult": "pipesim.search.result",
    "SUMMARIES": "pipesim.search.result",
}


def __getattr__(name: str) -> object:
    """A public name, imported from its module on first use and kept here (PEP 562)."""
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(_PUBLIC[name]), name)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


__all__ = [
    "AUTO_POLICIES",
    "FAMILIES",
    "SUMMARIES",
    "ExactUnavailable",
    "SearchError",
    "SearchResult",
    "exact_schedule",
    "minimum_limit_bytes",
    "search_schedule",
]
