"""The all-to-all: every rank sends a share of its buffer to every other rank.

Expert parallelism's dispatch and combine (a MoE layer's token copies to the ranks that
hold their experts, and back) and Ulysses-style context parallelism re-shard a tensor
this way. NCCL runs it as grouped point-to-point sends and receives, priced outside its
tuner (``pipesim.cluster.collectives``); pipesim prices it with the tuner's ring constants
as ``n - 1`` pairwise rounds (``k - 1`` over NVLink, ``n - k`` over the network, for ``k``
ranks to a node) and the slower of the two byte streams a rank drives at once: what it
sends to the other ranks of its node over the intra-node link, and what it sends to other
nodes over its own network card. Each protocol is tried, as for the other collectives,
and the fastest kept. On links NCCL does not describe: one latency of the slowest link
used, plus the same byte streams.

``all_to_all_ms`` takes the buffer and splits it evenly (``1 / n`` to each rank);
``all_to_all_streams_ms`` takes the two streams as given, for traffic that is not spread
evenly (node-limited routing sends one copy of a token per node over the network and
forwards it inside the node: ``pipesim.cluster.expert_parallel``).
"""

from __future__ import annotations

import math

from pipesim.cluster.collectives import (
    BASE_LATENCY_US,
    HW_LATENCY_US,
    Algorithm,
    Group,
    GroupShape,
    fabric,
)
from pipesim.sim.links import Link


def all_to_all_ms(
    nbytes_per_rank: float,
    ranks: int,
    intra_link: Link,
    inter_link: Link | None = None,
    ranks_per_node: int | None = None,
) -> float:
    """An all-to-all in which every rank sends ``nbytes_per_rank`` in all, ``1 / ranks`` of it
    to each rank (itself included), in ms: ``(k - 1) / n`` of the buffer over the
    intra-node link and ``(n - k) / n`` of it over the rank's network card."""
    group = Group(ranks, intra_link, inter_link, ranks_per_node)
    n, k = group.ranks, group.per_node
    inter_bytes = (n - k) / n * nbytes_per_rank if inter_link is not None and n > k else 0.0
    return all_to_all_streams_ms((k - 1) / n * nbytes_per_rank, inter_bytes, group)


def all_to_all_streams_ms(intra_bytes: float, inter_bytes: float, group: Group) -> float:
    """An all-to-all over ``group`` in which each rank moves ``intra_bytes`` over the
    intra-node link and ``inter_bytes`` over its network card at the same time (ms; a group
    of one rank moves nothing)."""
    n, k = group.ranks, group.per_node
    if n == 1:
        return 0.0
    streams = [(intra_bytes, group.intra)]
    if group.inter is not None and n > k:
        streams.append((inter_bytes, group.inter))
    if any(fabric(link) is None for link in group.links):
        size = max(b / (link.bandwidth_gbps * 1e6) for b, link in streams)
        return max(link.latency_ms for link in group.links) + size
    shape = GroupShape.of(group)
    best = math.inf
    for p, _ in shape.protocols():
        factor = (0.5, 0.92, 1.0)[p]
        latency = BASE_LATENCY_US[Algorithm.RING][p]
        latency += (k - 1) * HW_LATENCY_US[shape.intra_hw][Algorithm.RING][p]
        latency += (n - k) * HW_LATENCY_US["net"][Algorithm.RING][p]
        size_us = max(b / (1e3 * link.bandwidth_gbps * factor) for b, link in streams)
        best = min(best, latency + size_us)
    return best / 1e3


__all__ = ["all_to_all_ms", "all_to_all_streams_ms"]
