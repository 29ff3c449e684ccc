"""What a schedule search is asked for and what it gives back: the searched policies
(``zb-auto``, ``v-auto``) with their chunk counts, summaries and the fixed recipes of their
families; ``SearchResult``, the order found and what finding it took; and the errors a
search raises.

Kept apart from the search itself (``pipesim.search.auto``, ``pipesim.search.exact``), so a
scenario that names a fixed policy checks its name and reads its report without loading
the search.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.schedules.ir import Schedule

AUTO_POLICIES = {"zb-auto": 1, "v-auto": 2}  # name -> virtual stages (chunks per device)
SUMMARIES = {
    "zb-auto": "searched zero-bubble order for the real costs under a memory limit (1 stage/GPU)",
    "v-auto": "searched V-shape zero-bubble order for the real costs under a memory limit",
}
FAMILIES = {
    "zb-auto": ("1f1b", "zb-h1", "zb-h2", "eager-1f1b"),
    "v-auto": ("zbv", "v-half", "v-min"),
}


class SearchError(ValueError):
    """A search that cannot be run: unknown policy, wrong sizes, a limit nothing can meet."""


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The schedule found and what it took to find it."""

    schedule: Schedule
    makespan_ms: float
    peak_activation_bytes: float  # the largest over devices
    limit_bytes: float
    candidates: int
    seconds: float
    source: str  # the starting recipe, "heuristic", or "improved from <recipe>"
    lower_bound_ms: float = 0.0  # no valid order within the limit is faster (search.bound)
    lower_bound_part: str = ""  # which part of the bound gives it
    mode: str = "heuristic"  # or "exact": the constraint program ran after the heuristic
    optimal: bool | None = None  # exact mode: whether no order is proven faster
    heuristic_makespan_ms: float | None = None  # exact mode: the heuristic's own order's

    @property
    def gap(self) -> float:
        """How much slower the order found is than the lower bound (0: optimal)."""
        return _gap(self.makespan_ms, self.lower_bound_ms)

    @property
    def heuristic_gap(self) -> float:
        """How much slower the heuristic's own order is than the lower bound."""
        heuristic = self.heuristic_makespan_ms
        return _gap(self.makespan_ms if heuristic is None else heuristic, self.lower_bound_ms)


def _gap(makespan_ms: float, bound_ms: float) -> float:
    return 0.0 if bound_ms <= 0 else makespan_ms / bound_ms - 1


class ExactUnavailable(SearchError):
    """The exact mode was asked for but OR-Tools is not installed."""
