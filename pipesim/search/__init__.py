"""Schedule search: orders found for the real costs under a memory limit (zb-auto, v-auto).

A layer between the engine and the cluster models: it builds candidate schedules, runs
each on the engine, and keeps the fastest whose peak activation memory fits.
"""

from pipesim.search.auto import (
    AUTO_POLICIES,
    SUMMARIES,
    SearchError,
    SearchResult,
    minimum_limit_bytes,
    search_schedule,
)

__all__ = [
    "AUTO_POLICIES",
    "SUMMARIES",
    "SearchError",
    "SearchResult",
    "minimum_limit_bytes",
    "search_schedule",
]
