"""What tensor and data parallelism cost in communication.

In a ring all-reduce of ``B`` bytes over ``n`` ranks, each rank cuts its buffer into ``n``
pieces and passes pieces to its neighbour: ``n - 1`` steps reduce the pieces (reduce-scatter),
``n - 1`` more steps hand the reduced pieces around (all-gather). Each step moves ``B / n``
bytes over every link at once, so the bytes cost ``2 (n - 1) / n * B / bandwidth``, and each
step pays a latency. NCCL, which Megatron-LM, DeepSpeed and torch run their collectives on,
prices that latency per protocol and also runs trees and NVLink SHARP where they are faster;
``pipesim.cluster.collectives`` holds its model, and the functions here call it. On a link
NCCL does not describe (given by its numbers) the latency is the link's own, once per step:

    2 (n - 1) / n * B / bandwidth  +  2 (n - 1) * latency.

A reduce-scatter followed by an all-gather (sequence parallelism, ZeRO's distributed
optimizer) moves the same bytes in the same steps, but pays two base latencies and cannot use
NVLink SHARP.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.cluster.collectives import (
    Collective,
    Group,
    all_reduce_ms,
    collective_ms,
    fabric,
)
from pipesim.cluster.memo import by_value
from pipesim.cluster.transformer import TransformerModel, stage_parameters
from pipesim.sim.links import Link


def flat_group(ranks: int, link: Link) -> Group:
    """``ranks`` GPUs joined by one ``link``: one node, or, for a network link, one GPU on
    each of ``ranks`` nodes."""
    on_network = (fabric(link) or ("",))[0] == "net"
    return Group(ranks, link, link, 1) if on_network else Group(ranks, link)


def ring_allreduce_ms(nbytes: float, ranks: int, link: Link) -> float:
    """Time (ms) of an all-reduce of ``nbytes`` bytes over ``ranks`` ranks on ``link``, as
    NCCL runs it (``pipesim.cluster.collectives``; the plain ring on a link given by its
    numbers)."""
    if ranks < 1:
        raise ValueError(f"an all-reduce needs at least one rank, got {ranks=}")
    return collective_ms(Collective.ALL_REDUCE, nbytes, flat_group(ranks, link))


def hierarchical_allreduce_ms(
    nbytes: float, ranks: int, ranks_per_node: int, intra_link: Link, inter_link: Link
) -> float:
    """Time (ms) of an all-reduce over ``ranks`` GPUs that sit ``ranks_per_node`` to a node.

    NCCL runs one ring (or tree) through all of them: inside a node its steps go over
    ``intra_link``, between nodes over each GPU's own ``inter_link``, so the ``k`` network
    cards of a node carry the ring side by side and its bus bandwidth is the lesser of the
    intra-node link and ``k`` cards (``pipesim.cluster.collectives``). On links given by
    their numbers it is pipesim's two-level ring instead: the node reduce-scatters, the
    GPUs with the same share all-reduce it across the ``N = ranks / k`` nodes, the node
    all-gathers,

        2 (k-1)/k B / intra_bw  +  2 (N-1)/N (B/k) / inter_bw   (plus latencies).

    With one GPU per node it is the flat ring over ``inter_link``.
    """
    if ranks_per_node < 1 or ranks % ranks_per_node:
        raise ValueError(f"ranks_per_node must divide ranks, got {ranks=}, {ranks_per_node=}")
    return all_reduce_ms(nbytes, ranks, intra_link, inter_link, ranks_per_node)


def tensor_parallel_comm_ms(
    activation_bytes: float, tensor: int, link: Link, *, sequence_parallel: bool = False
) -> float:
    """Communication of one transformer layer in one pass (forward, or backward) under
    Megatron-style tensor parallelism of degree ``tensor``.

    The attention block and the MLP block each end (forward) or begin (backward) with an
    all-reduce of the layer's activation, ``b * s * h * dtype_bytes`` bytes, over the
    ``tensor`` GPUs of one node: two all-reduces per layer per pass. With
    ``sequence_parallel`` each all-reduce is a reduce-scatter and an all-gather of the same
    activation (Megatron-LM's sequence parallelism), each with its own latency.
    """
    group = flat_group(tensor, link)
    if not sequence_parallel:
        return 2 * collective_ms(Collective.ALL_REDUCE, activation_bytes, group)
    scatter = collective_ms(Collective.REDUCE_SCATTER, activation_bytes, group)
    return 2 * (scatter + collective_ms(Collective.ALL_GATHER, activation_bytes, group))


def megatron_bucket_params(data_parallel: int) -> float:
    """Megatron-LM's default gradient bucket, in parameters: with
    ``DistributedDataParallelConfig.bucket_size`` unset, ``max(40_000_000, 1_000_000 * dp)``
    (NVIDIA/Megatron-LM, megatron/core/distributed/distributed_data_parallel_config.py:
    larger data-parallel groups get larger buckets so their collectives stay bandwidth-bound)."""
    return float(max(40_000_000, 1_000_000 * data_parallel))


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


@by_value  # a planner asks again for every candidate that shares it
def data_parallel_allreduce_ms(
    model: TransformerModel,
    partition: Sequence[int],
    data_parallel: int,
    link: Link,
    tensor: int = 1,
    *,
    ranks_per_node: int = 1,
    intra_node_link: Link | None = None,
    bucket_params: float | None = None,
    parameters: Sequence[float] | None = None,
) -> tuple[float, ...]:
    """End-of-step gradient reduction per stage: each GPU's share of the stage's gradients
    (``params / tensor * dtype_bytes`` bytes) all-reduced over the ``data_parallel``
    replicas: a ring over ``link`` (pick it with ``pipesim.parallel.data_parallel_link``),
    or, when ``ranks_per_node`` replicas share a node, over ``intra_node_link`` inside the
    node and ``link`` across nodes (``hierarchical_allreduce_ms``).

    The gradients go in buckets of at most ``bucket_params`` parameters, one all-reduce
    each, so every bucket pays the collective's latency. The default is Megatron-LM's:
    ``DistributedDataParallelConfig.bucket_size`` unset means ``max(40_000_000, 1_000_000 *
    data_parallel)`` parameters (NVIDIA/Megatron-LM,
    megatron/core/distributed/distributed_data_parallel_config.py). torch's DDP buckets by
    bytes instead, ``bucket_cap_mb=25`` (torch/nn/parallel/distributed.py): pass
    ``25 * 2**20 / dtype_bytes``. ``parameters``: each stage's parameters to reduce, where
    not all of ``stage_parameters`` (expert parallelism reduces the routed experts apart)."""
    if ranks_per_node > 1 and intra_node_link is None:
        raise ValueError("ranks_per_node > 1 needs intra_node_link, the link inside a node")
    bucket = bucket_params or megatron_bucket_params(data_parallel)
    if bucket <= 0:
        raise ValueError(f"bucket_params must be > 0, got {bucket_params}")

    def reduce_ms(nbytes: float) -> float:
        if ranks_per_node > 1:
            return hierarchical_allreduce_ms(
                nbytes, data_parallel, ranks_per_node, intra_node_link, link
            )
        return ring_allreduce_ms(nbytes, data_parallel, link)

    times, alike = [], {}  # stages of one parameter count reduce alike
    for params in stage_parameters(model, partition) if parameters is None else parameters:
        if params not in alike:
            full, rest = divmod(params / tensor, bucket)
            rest_ms = reduce_ms(rest * model.dtype_bytes) if rest else 0.0
            alike[params] = full * reduce_ms(bucket * model.dtype_bytes) + rest_ms
        times.append(alike[params])
    return tuple(times)
