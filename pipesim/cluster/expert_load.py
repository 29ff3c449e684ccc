"""How much more than its even share the slowest expert-parallel rank computes.

A MoE layer waits for its slowest expert-parallel rank: the one whose experts received the
most token copies computes longest, and receives the most bytes in the dispatch. With
``ep`` ranks each sending the copies of its own ``T`` tokens, ``T k`` of them, the even
share of a rank is ``T k``; ``load_factor`` is the slowest rank's copies over that.

For the deterministic step (``pipesim run``) the loads are the router's expected shares
(``pipesim.cluster.routing.expert_shares``): each rank sends ``share_e T k`` copies to
expert ``e``, of which the capacity factor keeps at most ``ceil(c T k / E)`` (GShard's
capacity, applied where the copies are routed, on each sending rank, as Megatron-Core's
``--moe-expert-capacity-factor`` does); the experts sit on the ranks contiguously
(Megatron-LM's layout) or, with redundant experts, as DeepSeek-V3's load balancer packs
them (``balanced_placement`` on the expected shares). So

    load_factor = max over ranks of the kept copies it receives / (T k)
    imbalance = that maximum / the mean over ranks of the kept copies
    dropped_fraction = copies over capacity / (T k)

and ``load_factor = imbalance (1 - dropped_fraction)``. Uniform routing without drops
gives exactly 1.

For a Monte Carlo step each MoE layer's loads are drawn instead (``drawn_load_factors``):
the ``ep T k`` copies of the group multinomially over the shares, capped at ``ep`` times
one rank's capacity (the sending ranks' caps taken together), placed as above.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipesim.cluster.moe import MoE
from pipesim.cluster.routing import (
    Placement,
    balanced_placement,
    capacity,
    contiguous_placement,
    expert_shares,
    imbalance,
)


@dataclass(frozen=True, slots=True)
class ExpertLoad:
    """The slowest rank's copies over the even share, the imbalance over ranks (max over
    mean) and the share of the copies dropped over capacity (module docstring)."""

    load_factor: float = 1.0
    imbalance: float = 1.0
    dropped_fraction: float = 0.0


def placement(moe: MoE, ranks: int) -> Placement:
    """Where the experts sit: contiguous, or balanced on the expected shares with the
    redundant experts."""
    if moe.redundant_experts == 0:
        return contiguous_placement(moe.experts, ranks)
    shares = expert_shares(moe.routing, moe.experts, moe.top_k)
    return balanced_placement(shares, ranks, moe.redundant_experts)


def expected_load(moe: MoE, ranks: int, tokens: float) -> ExpertLoad:
    """The expected loads of one MoE layer whose ``ranks`` expert-parallel ranks each route
    ``tokens`` tokens (module docstring)."""
    copies = tokens * moe.top_k
    even = moe.routing.kind == "uniform" and moe.redundant_experts == 0
    alone = ranks == 1 and moe.capacity_factor is None  # one rank computes every copy
    if copies <= 0 or alone or (even and not _drops_evenly(moe, tokens)):
        return ExpertLoad()
    shares = expert_shares(moe.routing, moe.experts, moe.top_k)
    sent = shares * copies
    kept = sent
    if moe.capacity_factor is not None:
        kept = np.minimum(sent, capacity(tokens, moe.top_k, moe.experts, moe.capacity_factor))
    dropped = float((sent - kept).sum()) / copies
    loads = placement(moe, ranks).rank_loads(kept * ranks)
    return ExpertLoad(float(loads.max()) / copies, imbalance(loads), dropped)


def _drops_evenly(moe: MoE, tokens: float) -> bool:
    """Whether uniform routing drops copies: a capacity below the even load."""
    if moe.capacity_factor is None:
        return False
    limit = capacity(tokens, moe.top_k, moe.experts, moe.capacity_factor)
    return limit < tokens * moe.top_k / moe.experts


def drawn_load_factors(
    moe: MoE, ranks: int, tokens: float, layers: int, rng: np.random.Generator
) -> np.ndarray:
    """One draw of ``load_factor`` for each of ``layers`` MoE layers (module docstring)."""
    shares = expert_shares(moe.routing, moe.experts, moe.top_k)
    copies = tokens * moe.top_k
    loads = rng.multinomial(round(copies * ranks), shares, size=layers).astype(np.float64)
    if moe.capacity_factor is not None:
        cap = capacity(tokens, moe.top_k, moe.experts, moe.capacity_factor) * ranks
        loads = np.minimum(loads, cap)
    where = placement(moe, ranks)
    onto = np.zeros((len(where.expert), ranks))
    onto[np.arange(len(where.expert)), where.rank] = where.fraction
    rank_loads = loads[:, where.expert] @ onto
    return rank_loads.max(axis=1) / copies


__all__ = ["ExpertLoad", "drawn_load_factors", "expected_load", "placement"]
