"""Schedule search: orders found for the real costs under a memory limit (zb-auto, v-auto).

A layer between the engine and the cluster models: it builds candidate schedules, runs
each on the engine, and keeps the fastest whose peak activation memory fits.

The front: the searched policies' names and what a search gives back or raises
(``pipesim.search.result``), the heuristic search (``search_schedule``,
``minimum_limit_bytes``: ``pipesim.search.auto``) and the exact mode (``exact_schedule``:
``pipesim.search.exact``). Each name is imported from its module on first use (PEP 562),
so a scenario with a fixed policy checks its name without loading the search itself.
"""

from pipesim.schedules.lazy import lazy_front

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


__getattr__, __dir__ = lazy_front(globals(), _PUBLIC)

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
