"""Splitting layers of different weights into pipeline stages.

Where every layer weighs the same, ``pipesim.cluster.model`` balances stages by counting
layers. A model whose layers differ (DeepSeek-V3: 3 dense layers, then 58 MoE layers about
twice as heavy) needs the loads themselves: the stages take consecutive layers, and the
split should make the heaviest stage as light as can be. That is the linear partition
problem, solved here in two steps:

1. the least bottleneck ``B``: a binary search over integer loads, where a bottleneck is
   feasible if filling each stage in turn with as many layers as fit under it (leaving one
   for each later stage) reaches the end; filling greedily covers the longest prefix a
   stage can, so it fails only where every split does;
2. among the splits whose stages all stay under ``B``, the most even one: the least sum of
   squared stage loads, by dynamic programming over (stage, layers taken).

The first stage carries ``first_extra`` (the embedding), the last ``last_extra`` (the LM
head, the loss and any MTP modules); every stage holds at least one layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate


def balanced_split(
    per_layer: Sequence[int], stages: int, first_extra: int = 0, last_extra: int = 0
) -> tuple[int, ...]:
    """Layers per stage for layers of loads ``per_layer`` (in order) over ``stages``
    stages: the least bottleneck, and under it the most even split (module docstring)."""
    layers = len(per_layer)
    if stages < 1 or stages > layers:
        raise ValueError(f"need 1 <= stages <= layers, got {stages=}, {layers=}")
    if min(per_layer) < 0:
        raise ValueError(f"layer loads must be >= 0, got {min(per_layer)}")
    prefix = [0, *accumulate(per_layer)]
    extras = [0] * stages
    extras[0] += first_extra
    extras[-1] += last_extra
    low, high = 0, prefix[-1] + first_extra + last_extra
    while low < high:
        mid = (low + high) // 2
        if _fits(prefix, extras, mid):
            high = mid
        else:
            low = mid + 1
    return _most_even(prefix, extras, low)


def _fits(prefix: list[int], extras: list[int], bound: int) -> bool:
    """Whether every stage can stay at or under ``bound``, filled greedily."""
    layers, stages, taken = len(prefix) - 1, len(extras), 0
    for k, extra in enumerate(extras):
        most = layers - (stages - 1 - k)  # leave one layer for each later stage
        end = taken + 1
        if prefix[end] - prefix[taken] + extra > bound:
            return False
        while end < most and prefix[end + 1] - prefix[taken] + extra <= bound:
            end += 1
        taken = end
    return taken == layers


def _most_even(prefix: list[int], extras: list[int], bound: int) -> tuple[int, ...]:
    """The split under ``bound`` with the least sum of squared stage loads."""
    layers, stages = len(prefix) - 1, len(extras)
    # best[k][i]: (sum of squares, layers of stage k - 1) for stages 0..k-1 taking i layers
    best: list[dict[int, tuple[int, int]]] = [{0: (0, 0)}]
    for k, extra in enumerate(extras):
        row: dict[int, tuple[int, int]] = {}
        least = k + 1
        most = layers - (stages - 1 - k)
        for end in range(least, most + 1):
            for begin, (cost, _) in best[k].items():
                load = prefix[end] - prefix[begin] + extra
                if begin >= end or load > bound:
                    continue
                candidate = (cost + load * load, end - begin)
                if end not in row or candidate < row[end]:
                    row[end] = candidate
        best.append(row)
    counts, end = [], layers
    for k in range(stages, 0, -1):
        taken = best[k][end][1]
        counts.append(taken)
        end -= taken
    return tuple(reversed(counts))


__all__ = ["balanced_split"]
