"""How a mixture-of-experts router spreads tokens over experts, and what that does to the
expert-parallel ranks.

A MoE layer sends each of its ``T`` tokens to ``top_k`` of its ``E`` experts. With expert
parallelism over ``ep`` ranks, rank ``r`` holds ``E / ep`` experts and computes every
token-copy routed to them; the layer waits for its slowest rank, and that rank also
receives the most bytes in the dispatch all-to-all. So what matters is not the mean load
``T top_k / ep`` but the largest.

The router's preference is an expected share per expert (``expert_shares``):

* ``uniform``: ``1 / E`` each, the balanced router training aims for;
* ``zipf``: share of the ``i``-th most popular expert proportional to ``(i + 1)^-s``
  (``zipf_s``), the skew measured routers show before and without balancing losses;
* ``hot``: ``hot_experts`` experts take ``hot_fraction`` of the token-copies between them,
  the rest share what is left evenly;
* ``histogram``: measured per-expert counts or shares, normalised.

A microbatch's loads are drawn from those shares (``expert_loads``): ``T top_k``
token-copies over ``E`` experts, multinomially. A real router picks ``top_k`` distinct
experts per token; the multinomial lets a token pick one expert twice, which changes the
loads only where one expert's share nears ``1 / top_k`` (shares are capped there).

A capacity factor ``c`` (GShard, Switch Transformer) caps each expert at
``ceil(c T top_k / E)`` token-copies and drops the rest (``capacity_limited``).
Redundant experts (DeepSeek-V3's expert-parallel load balancer, EPLB) copy the hottest
experts onto extra slots so their load is split, then pack the slots onto ranks so the
ranks' expected loads are as even as the packing allows (``balanced_placement``).

Everything is seeded: the same ``Routing`` and seed give the same loads.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

KINDS = ("uniform", "zipf", "hot", "histogram")


@dataclass(frozen=True, slots=True)
class Routing:
    """The router's preference over experts (see the module doc for the kinds)."""

    kind: str = "uniform"
    zipf_s: float = 1.0
    hot_fraction: float = 0.0
    hot_experts: int = 1
    histogram: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"routing kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not (self.zipf_s >= 0 and math.isfinite(self.zipf_s)):
            raise ValueError(f"zipf_s must be a finite number >= 0, got {self.zipf_s}")
        if not 0 <= self.hot_fraction <= 1:
            raise ValueError(f"hot_fraction must be within [0, 1], got {self.hot_fraction}")
        if self.hot_experts < 1:
            raise ValueError(f"hot_experts must be >= 1, got {self.hot_experts}")
        if self.kind == "histogram":
            counts = self.histogram
            if not counts or any(not (c >= 0 and math.isfinite(c)) for c in counts):
                raise ValueError("a histogram routing needs finite counts >= 0, one per expert")
            if sum(counts) <= 0:
                raise ValueError("a histogram routing needs at least one count above 0")


@dataclass(frozen=True, slots=True)
class Placement:
    """Physical expert slots on expert-parallel ranks: slot ``j`` on rank ``rank[j]`` runs
    expert ``expert[j]`` and receives ``fraction[j]`` of that expert's token-copies (an
    expert copied onto ``n`` slots gives each ``1 / n``)."""

    expert: np.ndarray
    rank: np.ndarray
    fraction: np.ndarray
    ranks: int = field(default=1)

    def rank_loads(self, loads: np.ndarray) -> np.ndarray:
        """Token-copies each rank computes, from each expert's ``loads``."""
        per_slot = np.asarray(loads, dtype=np.float64)[self.expert] * self.fraction
        return np.bincount(self.rank, weights=per_slot, minlength=self.ranks)


def expert_shares(routing: Routing, experts: int, top_k: int = 1) -> np.ndarray:
    """Each expert's expected share of the token-copies (sums to 1), no expert above
    ``1 / top_k`` (a token picks distinct experts): the excess is spread over the others."""
    _check_experts(experts, top_k)
    if routing.kind == "uniform":
        shares = np.full(experts, 1.0 / experts)
    elif routing.kind == "zipf":
        shares = np.arange(1, experts + 1, dtype=np.float64) ** -routing.zipf_s
    elif routing.kind == "hot":
        shares = _hot_shares(routing, experts)
    else:
        shares = np.asarray(routing.histogram, dtype=np.float64)
        if len(shares) != experts:
            raise ValueError(f"the histogram has {len(shares)} counts for {experts} experts")
    return _capped(shares / shares.sum(), 1.0 / top_k)


def _hot_shares(routing: Routing, experts: int) -> np.ndarray:
    hot = min(routing.hot_experts, experts)
    if hot == experts:
        return np.full(experts, 1.0 / experts)
    shares = np.full(experts, (1.0 - routing.hot_fraction) / (experts - hot))
    shares[:hot] = routing.hot_fraction / hot
    return shares


def _capped(shares: np.ndarray, cap: float) -> np.ndarray:
    """``shares`` with none above ``cap``, the excess given to the rest in proportion."""
    shares = shares.copy()
    for _ in range(len(shares)):
        over = shares > cap * (1 + 1e-12)
        if not over.any():
            break
        excess = float((shares[over] - cap).sum())
        shares[over] = cap
        free = ~over & (shares < cap)
        if not free.any():
            break
        shares[free] += excess * shares[free] / shares[free].sum()
    return shares


def expert_loads(
    routing: Routing, experts: int, top_k: int, tokens: int, rng: np.random.Generator
) -> np.ndarray:
    """Token-copies routed to each expert in one microbatch of ``tokens`` tokens: a draw of
    ``tokens * top_k`` copies over ``expert_shares``."""
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    shares = expert_shares(routing, experts, top_k)
    return rng.multinomial(tokens * top_k, shares).astype(np.int64)


def capacity(tokens: int, top_k: int, experts: int, capacity_factor: float) -> int:
    """Token-copies one expert may take: ``ceil(capacity_factor * tokens * top_k / E)``."""
    if not capacity_factor > 0:
        raise ValueError(f"capacity_factor must be > 0, got {capacity_factor}")
    return math.ceil(capacity_factor * tokens * top_k / experts)


def capacity_limited(
    loads: np.ndarray, tokens: int, top_k: int, capacity_factor: float | None
) -> tuple[np.ndarray, int]:
    """The loads each expert keeps under ``capacity_factor`` (None: no limit), and the
    token-copies dropped."""
    loads = np.asarray(loads, dtype=np.int64)
    if capacity_factor is None:
        return loads, 0
    limit = capacity(tokens, top_k, len(loads), capacity_factor)
    kept = np.minimum(loads, limit)
    return kept, int((loads - kept).sum())


def contiguous_placement(experts: int, ranks: int) -> Placement:
    """Megatron-LM's layout: rank ``r`` holds experts ``r E/ep .. (r+1) E/ep - 1``."""
    _check_ranks(experts, ranks)
    expert = np.arange(experts, dtype=np.int64)
    return Placement(expert, expert // (experts // ranks), np.ones(experts), ranks)


def balanced_placement(shares: np.ndarray, ranks: int, redundant: int = 0) -> Placement:
    """EPLB-style: give ``redundant`` extra slots, one at a time, to the expert whose load per
    copy is largest; then pack the slots, heaviest first, onto the rank with the least load
    that still has room (each rank takes ``(E + redundant) / ranks`` slots)."""
    shares = np.asarray(shares, dtype=np.float64)
    experts = len(shares)
    if redundant < 0 or (experts + redundant) % ranks:
        raise ValueError(
            f"experts + redundant ({experts} + {redundant}) must be a multiple of {ranks} ranks"
        )
    copies = np.ones(experts, dtype=np.int64)
    heap = [(-share, e) for e, share in enumerate(shares.tolist())]
    heapq.heapify(heap)
    for _ in range(redundant):
        _, e = heapq.heappop(heap)
        copies[e] += 1
        heapq.heappush(heap, (-shares[e] / copies[e], e))
    slot_expert = np.repeat(np.arange(experts, dtype=np.int64), copies)
    slot_load = shares[slot_expert] / copies[slot_expert]
    per_rank = (experts + redundant) // ranks
    order = np.argsort(-slot_load, kind="stable")
    rank_of = np.empty(len(slot_expert), dtype=np.int64)
    open_ranks = [(0.0, r) for r in range(ranks)]
    filled = [0] * ranks
    for slot in order.tolist():
        load, r = heapq.heappop(open_ranks)
        rank_of[slot] = r
        filled[r] += 1
        if filled[r] < per_rank:
            heapq.heappush(open_ranks, (load + float(slot_load[slot]), r))
    return Placement(slot_expert, rank_of, 1.0 / copies[slot_expert], ranks)


def imbalance(rank_loads: np.ndarray) -> float:
    """The slowest rank's load over the mean (1: perfectly even; 0 loads: 1)."""
    rank_loads = np.asarray(rank_loads, dtype=np.float64)
    mean = float(rank_loads.mean()) if len(rank_loads) else 0.0
    return float(rank_loads.max()) / mean if mean > 0 else 1.0


def _check_experts(experts: int, top_k: int) -> None:
    if experts < 1:
        raise ValueError(f"experts must be >= 1, got {experts}")
    if not 1 <= top_k <= experts:
        raise ValueError(f"top_k must be within [1, experts={experts}], got {top_k}")


def _check_ranks(experts: int, ranks: int) -> None:
    if ranks < 1 or experts % ranks:
        raise ValueError(f"{ranks} expert-parallel ranks must divide the {experts} experts")


__all__ = [
    "KINDS",
    "Placement",
    "Routing",
    "balanced_placement",
    "capacity",
    "capacity_limited",
    "contiguous_placement",
    "expert_loads",
    "expert_shares",
    "imbalance",
]
