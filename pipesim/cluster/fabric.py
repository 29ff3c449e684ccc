"""The network above the node: pods, their oversubscription, and where each group sits.

A large training cluster is not one flat network. NVIDIA's DGX SuperPOD (reference
architecture for DGX H100, docs.nvidia.com/dgx-superpod/reference-architecture-scalable-
infrastructure-h100) builds it from scalable units of 32 nodes whose GPUs hang off
rail-optimised leaf switches (GPU i of every node on rail i), joined by spine switches
without oversubscription. Meta's 24,576-GPU H100 clusters (The Llama 3 Herd of Models,
arXiv 2407.21783, section 3.3.1; glennklockwood.com/garden/systems/meta's-h100-clusters)
are a three-layer Clos of 8 pods of 3,072 GPUs (384 nodes), non-blocking inside a pod and
oversubscribed 1:7 above it. ``Fabric`` says which: ``kind`` (``rail-optimized`` or
``fat-tree``), ``nodes_per_pod`` (a scalable unit, an AI zone) and ``oversubscription``,
the ratio of a pod's links down to its links up: what leaves a pod runs at the network
link's bandwidth divided by it.

Which traffic leaves a pod depends on where each rank sits. Ranks are numbered as
Megatron-LM numbers them (megatron/core/parallel_state.py, ``RankGenerator``, default
``order="tp-cp-ep-dp-pp"``): the first name of ``order`` varies fastest, so with the
default the tensor-parallel ranks are neighbours, then context, then data, then pipeline
stages. Node ``r // gpus_per_node`` holds rank ``r``; pod ``node // nodes_per_pod`` holds
the node. ``group_span`` walks one group of a kind (the one holding rank 0; every group
of a kind is a shifted copy of it when the degrees and node sizes divide each other) and
counts how its members spread: per node, per pod, over pods.

A data-parallel all-reduce over such a group is priced as a topology-aware collective
library runs it (``allreduce_levels``), level by level: reduce-scatter inside the node
(``k`` members there, NVLink), then across the group's nodes inside one pod (``m`` of
them, the network link at full rate, each member its own NIC), then all-reduce the
``1 / (k m)`` share each GPU then holds across the ``P`` pods at the reduced rate, and
gather back down. Without pods (or with one) this is the two-level collective of
``pipesim.cluster.parallel.hierarchical_allreduce_ms``; the levels above the node each
move ``1 / k`` (and ``1 / (k m)``) of the bytes. ``kind`` decides nothing in the price:
in a rail-optimised fabric, traffic between GPUs of different rails is moved onto the
destination's rail over NVLink first (NCCL's PXN), so both kinds carry a group's traffic
at the network link's rate inside a pod; the explanation names which.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from pipesim.sim.links import Link

KINDS = ("rail-optimized", "fat-tree")
DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")  # Megatron-LM's names, fastest first by default
DEFAULT_ORDER = "tp-cp-ep-dp-pp"  # Megatron-LM's default; without cp and ep: tp-dp-pp
TRAFFIC = {  # what the groups of each kind send, in words; gradients over cp x dp
    ("tp",): "tensor-parallel all-reduce",
    ("cp",): "context-parallel exchange",
    ("ep",): "expert-parallel all-to-all",
    ("cp", "dp"): "data-parallel gradient reduction",
}
GROUP_NAMES = {
    "tp": "tensor-parallel",
    "cp": "context-parallel",
    "ep": "expert-parallel",
    "dp": "data-parallel",
    "pp": "pipeline",
}


class FabricError(ValueError):
    """A layout that does not fit the fabric: ``field`` (as a scenario names it) and why."""

    def __init__(self, field: str, message: str) -> None:
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True, slots=True)
class Fabric:
    """The network above the node (module docstring). ``nodes_per_pod`` None: every node
    in one pod; ``oversubscription`` >= 1 divides the bandwidth of what leaves a pod."""

    kind: str = "fat-tree"
    nodes_per_pod: int | None = None
    oversubscription: float = 1.0
    order: str = DEFAULT_ORDER

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r}; allowed: {', '.join(KINDS)}")
        if not self.oversubscription >= 1:
            raise ValueError(f"oversubscription must be >= 1, got {self.oversubscription}")
        if self.nodes_per_pod is not None and self.nodes_per_pod < 1:
            raise ValueError(f"nodes_per_pod must be >= 1, got {self.nodes_per_pod}")
        check_order(self.order)

    def slow_link(self, inter_node_link: Link) -> Link:
        """The link traffic that leaves a pod sees: the network link at 1/oversubscription
        of its bandwidth, its latency unchanged."""
        if self.oversubscription == 1:
            return inter_node_link
        return Link(
            inter_node_link.latency_us,
            inter_node_link.bandwidth_gbps / self.oversubscription,
            f"{inter_node_link.name} above the pod (1:{self.oversubscription:g})",
            inter_node_link.gap_us,
        )


def check_order(order: str) -> tuple[str, ...]:
    """``"tp-cp-dp-pp"`` as its names; an unknown or repeated name is a ValueError."""
    names = tuple(order.split("-"))
    for name in names:
        if name not in DIMENSIONS:
            raise ValueError(
                f"unknown dimension {name!r} in {order!r}; allowed: {', '.join(DIMENSIONS)}, "
                "joined by '-' (e.g. tp-cp-dp-pp)"
            )
    repeated = [name for name, count in Counter(names).items() if count > 1]
    if repeated:
        raise ValueError(f"{repeated[0]!r} appears twice in {order!r}")
    return names


@dataclass(frozen=True, slots=True)
class RankLayout:
    """Every rank's place: each dimension's degree and stride (rank distance between two
    neighbours of a group of that kind), the node size and the fabric."""

    degrees: dict[str, int]
    strides: dict[str, int]
    gpus_per_node: int
    fabric: Fabric

    @property
    def gpus(self) -> int:
        return math.prod(self.degrees.values())

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def pod(self, rank: int) -> int:
        per_pod = self.fabric.nodes_per_pod
        return 0 if per_pod is None else self.node(rank) // per_pod


def rank_layout(fabric: Fabric, degrees: dict[str, int], gpus_per_node: int) -> RankLayout:
    """The layout of ``degrees`` (``{"tp": 8, "dp": 2048, "pp": 1}``; missing names are 1)
    under ``fabric.order``. A used dimension (degree > 1) the order leaves out, or nodes
    that do not split into whole pods, is a FabricError naming the field."""
    names = check_order(fabric.order)
    full = {name: int(degrees.get(name, 1)) for name in DIMENSIONS}
    missing = [n for n in DIMENSIONS if full[n] > 1 and n not in names]
    if missing:
        raise FabricError(
            "hardware.topology.order",
            f"{fabric.order!r} leaves out {missing[0]} ({GROUP_NAMES[missing[0]]} degree "
            f"{full[missing[0]]}); name every dimension in use, e.g. {DEFAULT_ORDER}",
        )
    strides, stride = dict.fromkeys(DIMENSIONS, 1), 1
    for name in names:
        strides[name] = stride
        stride *= full[name]
    layout = RankLayout(full, strides, gpus_per_node, fabric)
    per_pod = fabric.nodes_per_pod
    if per_pod is not None and layout.nodes > per_pod and layout.nodes % per_pod:
        raise FabricError(
            "hardware.topology.nodes_per_pod",
            f"{layout.nodes} nodes ({layout.gpus} GPUs, {gpus_per_node} per node) do not "
            f"split into pods of {per_pod}; allowed: a divisor of {layout.nodes}, or at "
            f"least {layout.nodes} (one pod)",
        )
    return layout


@dataclass(frozen=True, slots=True)
class GroupSpan:
    """How one group of a kind spreads: ``ranks`` members, ``per_node`` of them on each of
    its nodes, ``nodes_per_pod`` of those nodes in each of its ``pods`` (uneven spreads
    counted by their common divisor, so ``per_node * nodes_per_pod * pods == ranks``),
    and the ``nodes`` it touches."""

    kind: str
    ranks: int
    per_node: int
    nodes_per_pod: int
    pods: int
    nodes: int

    @property
    def crosses_nodes(self) -> bool:
        return self.nodes > 1

    @property
    def crosses_pods(self) -> bool:
        return self.pods > 1


def group_span(layout: RankLayout, *kinds: str) -> GroupSpan:
    """The spread of the group of ``kinds`` (one, or several taken together, as
    ``"cp", "dp"``) that holds rank 0 (module docstring)."""
    ranks = [0]
    for kind in kinds:
        stride = layout.strides[kind]
        ranks = [r + j * stride for r in ranks for j in range(layout.degrees[kind])]
    size = len(ranks)
    per_node = math.gcd(*Counter(map(layout.node, ranks)).values())
    in_pods = Counter(map(layout.pod, ranks)).values()
    nodes_per_pod = math.gcd(*(count // per_node for count in in_pods))
    pods = size // (per_node * nodes_per_pod)
    nodes = len(set(map(layout.node, ranks)))
    return GroupSpan("-".join(kinds), size, per_node, nodes_per_pod, pods, nodes)


@dataclass(frozen=True, slots=True)
class Level:
    """One level of a hierarchical all-reduce: ``ranks`` members over ``link``, each
    holding ``1 / share`` of the buffer (``share`` 1: all of it)."""

    ranks: int
    link: Link
    share: int
    crosses_pods: bool = False


def allreduce_levels(span: GroupSpan, intra: Link, inter: Link, fabric: Fabric) -> list[Level]:
    """The levels of an all-reduce over ``span``'s group (module docstring): in the node,
    across the group's nodes of a pod, across pods at the reduced rate. A level of one
    rank is left out."""
    k, m, pods = span.per_node, span.nodes_per_pod, span.pods
    if not span.crosses_nodes:
        return [Level(span.ranks, intra, 1)]
    levels = [
        Level(k, intra, 1),
        Level(m, inter, k),
        Level(pods, fabric.slow_link(inter), k * m, True),
    ]
    return [level for level in levels if level.ranks > 1]


def pipeline_pods(layout: RankLayout, devices: int) -> tuple[int, ...]:
    """The pod of each pipeline device's first GPU (tensor rank 0 of data replica 0)."""
    stride = layout.strides["pp"]
    return tuple(layout.pod(d * stride) for d in range(devices))


def pipeline_nodes(layout: RankLayout, devices: int) -> tuple[int, ...]:
    """The node of each pipeline device's first GPU."""
    stride = layout.strides["pp"]
    return tuple(layout.node(d * stride) for d in range(devices))


def crossings(layout: RankLayout, devices: int) -> list[str]:
    """What crosses pods, in words: each group kind whose group spans several pods, and
    the pipeline's neighbouring stages that sit in different pods."""
    fabric, lines = layout.fabric, []
    rate = "" if fabric.oversubscription == 1 else f" at 1/{fabric.oversubscription:g} bandwidth"
    for kinds, traffic in TRAFFIC.items():
        span = group_span(layout, *kinds)
        if span.crosses_pods:
            lines.append(
                f"{traffic} crosses {span.pods} pods ({span.nodes} nodes, {fabric.kind}){rate}"
            )
    pods = pipeline_pods(layout, devices)
    hops = sum(1 for a, b in zip(pods, pods[1:], strict=False) if a != b)
    if hops:
        lines.append(f"{hops} of {devices - 1} pipeline hops cross pods{rate}")
    return lines


__all__ = [
    "DEFAULT_ORDER",
    "DIMENSIONS",
    "GROUP_NAMES",
    "KINDS",
    "Fabric",
    "FabricError",
    "GroupSpan",
    "Level",
    "RankLayout",
    "allreduce_levels",
    "check_order",
    "crossings",
    "group_span",
    "pipeline_nodes",
    "pipeline_pods",
    "rank_layout",
]
