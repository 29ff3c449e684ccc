"""What tensor and data parallelism cost in communication: the ring all-reduce.

In a ring all-reduce of ``B`` bytes over ``n`` ranks, each rank cuts its buffer into ``n``
pieces and passes pieces to its neighbour: ``n - 1`` steps reduce the pieces (reduce-scatter),
``n - 1`` more steps hand the reduced pieces around (all-gather). Each step moves ``B / n``
bytes over every link at once and pays the link's latency once, so the whole collective takes

    2 (n - 1) / n * B / bandwidth  +  2 (n - 1) * latency.

That is the cost NCCL's ring algorithm approaches for large messages and the one Megatron-LM
and DeepSpeed users reason with. A reduce-scatter followed by an all-gather (sequence
parallelism, ZeRO's distributed optimizer) moves exactly the same bytes in the same steps.
"""

from __future__ import annotations

import math

from pipesim.sim.links import Link


def ring_allreduce_ms(nbytes: float, ranks: int, link: Link) -> float:
    """Time (ms) of a ring all-reduce of ``nbytes`` bytes over ``ranks`` ranks on ``link``."""
    if ranks < 1:
        raise ValueError(f"an all-reduce needs at least one rank, got {ranks=}")
    if ranks == 1:
        return 0.0
    steps = 2 * (ranks - 1)
    latency_ms = steps * link.latency_us / 1000.0
    if math.isinf(link.bandwidth_gbps):
        return latency_ms
    return latency_ms + steps / ranks * nbytes / (link.bandwidth_gbps * 1e6)


def hierarchical_allreduce_ms(
    nbytes: float, ranks: int, ranks_per_node: int, intra_link: Link, inter_link: Link
) -> float:
    """Time (ms) of an all-reduce over ``ranks`` GPUs that sit ``ranks_per_node`` to a node.

    Done in two levels, as NCCL does across nodes: the ``k = ranks_per_node`` GPUs of a node
    reduce-scatter inside the node (each then holds ``B / k`` of the node's sum), the GPUs
    with the same share all-reduce it across the ``ranks / k`` nodes, each over its own
    network link, and the node all-gathers the result. The network carries ``1 / k`` of
    what a flat ring would put on it, and the ``k`` links of a node work in parallel:

        2 (k-1)/k B / intra_bw  +  2 (N-1)/N (B/k) / inter_bw   (plus latencies), N = n / k.

    With one GPU per node it is the flat ring over ``inter_link``.
    """
    if ranks_per_node < 1 or ranks % ranks_per_node:
        raise ValueError(f"ranks_per_node must divide ranks, got {ranks=}, {ranks_per_node=}")
    nodes = ranks // ranks_per_node
    inside = ring_allreduce_ms(nbytes, ranks_per_node, intra_link)
    return inside + ring_allreduce_ms(nbytes / ranks_per_node, nodes, inter_link)


def tensor_parallel_comm_ms(activation_bytes: float, tensor: int, link: Link) -> float:
    """Communication of one transformer layer in one pass (forward, or backward) under
    Megatron-style tensor parallelism of degree ``tensor``.

    The attention block and the MLP block each end (forward) or begin (backward) with an
    all-reduce of the layer's activation, ``b * s * h * dtype_bytes`` bytes, over the
    ``tensor`` GPUs of one node: two all-reduces per layer per pass.
    """
    return 2 * ring_allreduce_ms(activation_bytes, tensor, link)


def data_parallel_link(
    tensor: int,
    data_parallel: int,
    gpus_per_node: int,
    intra_node_link: Link,
    inter_node_link: Link,
) -> Link:
    """The link a data-parallel gradient all-reduce runs over.

    Ranks are laid out as Megatron-LM does by default: tensor-parallel ranks innermost, then
    data-parallel ranks, then pipeline stages. The ``data_parallel`` replicas of one stage
    then occupy ``tensor * data_parallel`` consecutive GPUs; they fit in one node when that
    is at most ``gpus_per_node``, otherwise the ring crosses nodes and the network link is
    its bottleneck.
    """
    if tensor * data_parallel <= gpus_per_node:
        return intra_node_link
    return inter_node_link
