"""The rule variants the constructive heuristic is run under, in the order tried.

Each ``Rules`` (``pipesim.search.greedy``) is one way of breaking the heuristic's ties and
bounding its warm-up. No single variant is best everywhere: which one builds the fastest
order depends on the costs, the links and the memory limit, so the search runs many and
keeps the best. The first few are the most often useful (large problems try only those);
then the variants that, with them, build the best order of every case of
``benchmarks/bench_vs_zero_bubble.py``; then a systematic sweep of the rest.
"""

from __future__ import annotations

from pipesim.search.greedy import Rules

# Rule variants, the most often useful first; large problems try only the first few.
_FIRST = (Rules(0.0, True), Rules(1.0, True, 1), Rules(0.5, True), Rules(0.0, True, 0))
# Then those that, with the first four, build the best order of every case of
# benchmarks/bench_vs_zero_bubble.py: ZB-H2's staircase, 1F1B's alternation of F and I,
# the V's chunk 1 first, room kept for one or two chunk-1 forwards or none.
_COVER = (
    Rules(0.5, True, 0, forward_first=True, slope=2),
    Rules(1.0, True, 0, True, 1, forward_first=True, wait_deep=True),
    Rules(0.0, True, None, reserve=1, forward_first=True, wait_deep=True),
    Rules(1.0, True, 0, reserve=1, forward_first=True, wait_deep=True),
    Rules(0.5, True, None, True, wait_deep=True),
    Rules(0.5, True, 0),
    Rules(1.0, True, None, True, 1, forward_first=True),
    Rules(0.0, True, None, reserve=1, forward_first=True),
    Rules(1.0, True, 0, True, free_first=True, forward_first=True),
    Rules(1.0, True, None, True, 0, free_first=True, forward_first=True),
    Rules(1.0, True, None, reserve=0, forward_first=True),
    Rules(0.0, True, 0, reserve=1, forward_first=True, wait_deep=True),
    Rules(0.0, True, None, reserve=1, forward_first=True, wait_deep=True, reserve_idle=True),
    Rules(1.0, True, None, True, 1, forward_first=True, wait_deep=True, reserve_idle=True),
    Rules(1.0, True, None, True, 2, forward_first=True, wait_deep=True, reserve_idle=True),
    Rules(0.5, True, 0, False, 2, forward_first=True, wait_deep=True, reserve_idle=True),
)
_REST = (
    tuple(
        Rules(fill_ratio, deep_first, extra)
        for extra in (None, 0, 1, 2)
        for fill_ratio, deep_first in (
            (0.0, True),
            (1.0, True),
            (0.5, True),
            (float("inf"), True),
            (0.0, False),
            (1.0, False),
        )
    )
    + tuple(
        Rules(fill_ratio, True, extra, shallow, reserve, free, forward)
        for reserve in (1, None, 0)
        for free in (True, False)
        for forward in (False, True)
        for extra in (None, 0)
        for shallow in (True, False)
        for fill_ratio in (0.0, 1.0, 0.5)
    )
    + tuple(
        Rules(fill_ratio, True, extra, slope=2, forward_first=forward)
        for extra in (0, 1)
        for forward in (False, True)
        for fill_ratio in (0.0, 1.0, 0.5, float("inf"))
    )
    + tuple(
        Rules(fill_ratio, True, extra, shallow, reserve, forward_first=forward, wait_deep=True)
        for reserve in (None, 1)
        for forward in (False, True)
        for extra in (None, 0)
        for shallow in (True, False)
        for fill_ratio in (0.0, 1.0, 0.5)
    )
    + tuple(
        Rules(
            fill_ratio,
            True,
            extra,
            shallow,
            reserve,
            forward_first=True,
            wait_deep=wait,
            reserve_idle=True,
        )
        for reserve in (1, 2)
        for wait in (True, False)
        for extra in (None, 0)
        for shallow in (True, False)
        for fill_ratio in (0.0, 1.0, 0.5)
    )
)
RULES = tuple(dict.fromkeys(_FIRST + _COVER + _REST))


def v_only(rules: Rules) -> bool:
    """Whether ``rules`` differ from the defaults only where a device holds two stages."""
    return rules.reserve is not None or rules.shallow_inputs or rules.wait_deep


__all__ = ["RULES", "v_only"]
