"""Collectives as NCCL runs them: all-reduce, reduce-scatter, all-gather, broadcast.

NCCL prices every collective before it runs it, and runs the cheapest way it knows. For each
algorithm (ring; tree, for all-reduce; NVLink SHARP, NVLS, inside an NVSwitch node) and each
protocol (LL for tiny messages, LL128, Simple for large ones) its tuner keeps a latency and a
bandwidth, and takes the pair that finishes first:

    time = latency + bytes / algorithm_bandwidth

The latency is a base cost plus one hardware latency per step the algorithm takes (a ring
all-reduce over ``n`` ranks takes ``2 (n - 1)`` steps, a reduce-scatter or all-gather
``n - 1``; a tree ``2 (k - 1)`` inside the node and ``2 log2(N)`` across ``N`` nodes). The
algorithm bandwidth is the bus bandwidth times ``n / steps`` for a ring (``n / 2(n-1)`` for an
all-reduce, the familiar ``2(n-1)/n`` bus-bandwidth factor of nccl-tests), half of it for a
tree. LL moves 8 bytes of data in every 16 (and no more than a fixed ceiling), LL128 120 of
every 128, Simple all of it with the longest latency: a decode step's small all-reduce is an
LL ring, nearly all latency; a gradient bucket a Simple ring or tree, nearly all bandwidth.

Across nodes the ranks of a group sit ``k`` to a node, each with its own network card (a
rail-optimised cluster): the ring's bus bandwidth is the slower of the NVLink bandwidth and
the ``k`` cards together, and its steps that cross nodes pay the network's latency.

Every constant below is NCCL's own, from NVIDIA/nccl ``src/graph/tuning.cc`` at commit
5067397c2676d5aed50042fc39e5c8ee96eb0027 (``ncclTunerConstantsDefaults``,
``ncclTopoTuneModel``, ``ncclTopoGetAlgoTime``), except where a comment names a measurement.
Not modelled: CollNet and NVLS-tree (in-network reductions across nodes), PAT (one GPU per
node), the per-channel bandwidth caps (the channel count comes from NCCL's topology search).

A link NCCL does not know (one given by its numbers, or the ideal link) keeps pipesim's plain
ring: ``2 (n - 1)`` steps of the link's own latency and ``2 (n - 1) / n * B / bandwidth``,
reduced inside each node first and then across nodes.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from enum import StrEnum

from pipesim.sim.links import Link


class Collective(StrEnum):
    ALL_REDUCE = "all-reduce"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_GATHER = "all-gather"
    BROADCAST = "broadcast"


class Algorithm(StrEnum):
    RING = "ring"
    TREE = "tree"
    NVLS = "nvls"
    PLAIN = "plain"  # pipesim's ring on a link NCCL does not know


class Protocol(StrEnum):
    LL = "LL"
    LL128 = "LL128"
    SIMPLE = "Simple"


PROTOCOLS = (Protocol.LL, Protocol.LL128, Protocol.SIMPLE)

# tuning.cc baseLatencies (us), per protocol LL / LL128 / Simple; NVLS has none.
BASE_LATENCY_US = {
    Algorithm.TREE: (6.8, 14.0, 8.4),
    Algorithm.RING: (6.6, 14.0, 8.4),
    Algorithm.NVLS: (0.0, 0.0, 0.0),
}
# tuning.cc hwLatencies (us per step), per hardware, algorithm and protocol.
HW_LATENCY_US = {
    "nvlink": {
        Algorithm.TREE: (0.6, 1.25, 4.0),
        Algorithm.RING: (0.6, 1.9, 3.4),
        Algorithm.NVLS: (0.0, 0.0, 25.0),
    },
    "pci": {Algorithm.TREE: (1.0, 1.9, 4.0), Algorithm.RING: (1.0, 2.5, 5.7)},
    "net": {Algorithm.TREE: (5.0, 8.5, 14.0), Algorithm.RING: (2.7, 4.0, 14.0)},
}
# tuning.cc llMaxBws (GB/s): the LL protocol's ceiling in one node, by GPU generation, and
# across 2 or more nodes (Intel hosts; AMD hosts get less).
LL_MAX_BUSBW_NODE = {"ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
LL_MAX_BUSBW_TWO_NODES = 39.0
LL_MAX_BUSBW_NODES = 20.4
# tuning.cc getNetOverhead: 1 us per network post on Intel hosts, three times that for Simple.
NET_OVERHEAD_US = 1.0
# tuning.cc treeCorrectionFactor, per protocol, for messages of 64 B * 2**i (i < 23).
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5)
    + (0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6)
    + (0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0, 1.0),
    (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5)
    + (0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9, 0.9),
)
# NVLS all-reduce in one node: nccl-tests bus bandwidth ~480 GB/s on 8 H100s against ~370 GB/s
# for a ring (sjeaugey, NVIDIA/nccl-tests#212); NCCL's H800 numbers give the same ratio
# (215 GB/s on 200 GB/s links, NVIDIA/nccl#1374). Blackwell scales it by tuning.cc's
# nvlsEfficiency, 0.74 against Hopper's 0.85.
NVLS_BUSBW_GAIN = {"hopper": 480.0 / 370.0, "blackwell": 480.0 / 370.0 * 0.74 / 0.85}


@dataclass(frozen=True, slots=True)
class Choice:
    """The algorithm and protocol a collective runs with, and its time in milliseconds."""

    ms: float
    algorithm: Algorithm
    protocol: Protocol | None = None


@dataclass(frozen=True, slots=True)
class Group:
    """The ranks of one collective: ``ranks`` GPUs, ``ranks_per_node`` to a node, talking
    over ``intra`` inside a node and ``inter`` (one network card per GPU) between nodes."""

    ranks: int
    intra: Link
    inter: Link | None = None
    ranks_per_node: int | None = None

    def __post_init__(self) -> None:
        per_node = self.per_node
        if self.ranks < 1 or per_node < 1 or self.ranks % per_node:
            raise ValueError(f"ranks_per_node must divide ranks, got {self}")
        if self.nodes > 1 and self.inter is None:
            raise ValueError(f"{self.nodes} nodes need an inter-node link")

    @property
    def per_node(self) -> int:
        return self.ranks if self.ranks_per_node is None else self.ranks_per_node

    @property
    def nodes(self) -> int:
        return self.ranks // self.per_node

    @property
    def links(self) -> tuple[Link, ...]:
        used = (self.intra,) if self.per_node > 1 or self.nodes == 1 else ()
        return used + ((self.inter,) if self.nodes > 1 and self.inter is not None else ())


def fabric(link: Link) -> tuple[str, str] | None:
    """NCCL's hardware class of a link profile (``nvlink``, ``pci`` or ``net``) and the GPU
    generation it implies, or None for a link NCCL's tables do not describe."""
    profile = link.name.split("/")[0]
    if profile.startswith("nvlink"):
        generation = {"3": "ampere", "5": "blackwell"}.get(profile[6:7], "hopper")
        return "nvlink", generation
    if profile.startswith("pcie"):
        return "pci", "ampere" if profile.startswith("pcie4") else "hopper"
    if profile.startswith(("ib-", "roce")):
        return "net", "hopper"
    return None


@functools.lru_cache(maxsize=1 << 16)
def collective_choice(kind: Collective, nbytes: float, group: Group) -> Choice:
    """How NCCL runs ``kind`` on ``nbytes`` over ``group``, and how long it takes.

    ``nbytes`` is NCCL's count: the buffer of an all-reduce or a broadcast, the whole
    gathered buffer (all ranks' shares) of an all-gather or a reduce-scatter."""
    if group.ranks == 1:
        return Choice(0.0, Algorithm.RING)
    if any(fabric(link) is None for link in group.links):
        return Choice(_plain_ms(kind, nbytes, group), Algorithm.PLAIN)
    times = (
        (latency_us + nbytes / (1e3 * bandwidth * _tree_correction(a, kind, p, nbytes)), a, p)
        for a, p, latency_us, bandwidth in _candidates(kind, group)
    )
    us, algorithm, protocol = min(times, key=lambda t: t[0])
    return Choice(us / 1e3, algorithm, protocol)


def collective_ms(kind: Collective, nbytes: float, group: Group) -> float:
    """The time (ms) of ``collective_choice``."""
    return collective_choice(kind, nbytes, group).ms


def all_reduce_ms(
    nbytes: float,
    ranks: int,
    intra_link: Link,
    inter_link: Link | None = None,
    ranks_per_node: int | None = None,
) -> float:
    """An all-reduce of an ``nbytes`` buffer (ms)."""
    group = Group(ranks, intra_link, inter_link, ranks_per_node)
    return collective_ms(Collective.ALL_REDUCE, nbytes, group)


def reduce_scatter_ms(
    nbytes: float,
    ranks: int,
    intra_link: Link,
    inter_link: Link | None = None,
    ranks_per_node: int | None = None,
) -> float:
    """A reduce-scatter of an ``nbytes`` buffer into ``ranks`` shares (ms)."""
    group = Group(ranks, intra_link, inter_link, ranks_per_node)
    return collective_ms(Collective.REDUCE_SCATTER, nbytes, group)


def all_gather_ms(
    nbytes: float,
    ranks: int,
    intra_link: Link,
    inter_link: Link | None = None,
    ranks_per_node: int | None = None,
) -> float:
    """An all-gather whose gathered buffer holds ``nbytes`` (each rank gives ``nbytes /
    ranks``), in ms."""
    group = Group(ranks, intra_link, inter_link, ranks_per_node)
    return collective_ms(Collective.ALL_GATHER, nbytes, group)


@dataclass(frozen=True, slots=True)
class GroupShape:
    """What the tuner reads off a group: its sizes, hardware and the ceilings that follow."""

    ranks: int
    per_node: int
    nodes: int
    intra_hw: str
    generation: str
    bus_gbps: float  # Simple's bus bandwidth
    ll_max_gbps: float

    @classmethod
    def of(cls, group: Group) -> GroupShape:
        intra_hw, generation = fabric(group.intra) or ("net", "hopper")
        nodes = group.nodes
        if nodes == 1:
            ll_max = LL_MAX_BUSBW_NODE[generation]
        else:
            ll_max = LL_MAX_BUSBW_TWO_NODES if nodes == 2 else LL_MAX_BUSBW_NODES
        bus = _bus_bandwidth(group)
        return cls(group.ranks, group.per_node, nodes, intra_hw, generation, bus, ll_max)

    def protocols(self) -> tuple[tuple[int, Protocol], ...]:
        """LL128 only where the ranks of a node talk over NVLink (tuning.cc, LL128's
        pEnable: intra-node paths up to NVB)."""
        ll128 = self.intra_hw == "nvlink" or self.per_node == 1
        return tuple((p, q) for p, q in enumerate(PROTOCOLS) if ll128 or q != Protocol.LL128)


def _candidates(kind: Collective, group: Group):
    """(algorithm, protocol, latency_us, algorithm bandwidth GB/s) of every way NCCL's tuner
    considers, as ncclTopoTuneModel builds them."""
    shape = GroupShape.of(group)
    for p, protocol in shape.protocols():
        yield _ring(kind, shape, p, protocol)
        if kind == Collective.ALL_REDUCE:
            yield _tree(shape, p, protocol)
            if protocol == Protocol.SIMPLE and _has_nvls(shape):
                # NVLS: only Simple, its latency is NVLink's NVLS latency alone
                nvls_bus = shape.bus_gbps * NVLS_BUSBW_GAIN[shape.generation]
                n = shape.ranks
                latency = HW_LATENCY_US["nvlink"][Algorithm.NVLS][p]
                yield Algorithm.NVLS, protocol, latency, nvls_bus * n / (2 * (n - 1))


def _has_nvls(shape: GroupShape) -> bool:
    """NVLink SHARP: inside one NVSwitch node of Hopper or later (across nodes NCCL needs
    CollNet for it, not modelled)."""
    return shape.nodes == 1 and shape.intra_hw == "nvlink" and shape.generation in NVLS_BUSBW_GAIN


def _ring(kind: Collective, shape: GroupShape, p: int, protocol: Protocol):
    n, nodes = shape.ranks, shape.nodes
    steps = {Collective.ALL_REDUCE: 2 * (n - 1), Collective.BROADCAST: n}.get(kind, n - 1)
    hw = HW_LATENCY_US
    if kind == Collective.BROADCAST:  # pipelined: one step's latency
        latency = hw[shape.intra_hw if nodes == 1 else "net"][Algorithm.RING][p]
    else:
        crossings = 2 * (nodes - 1) if kind == Collective.ALL_REDUCE else nodes - 1
        overhead = (
            0.0 if nodes == 1 else NET_OVERHEAD_US * (3 if protocol == Protocol.SIMPLE else 1)
        )
        intra = max(hw[shape.intra_hw][Algorithm.RING][p], overhead)
        # with one rank per node every step is exposed: the network's tree latency
        inter = hw["net"][Algorithm.TREE if shape.per_node == 1 else Algorithm.RING][p]
        latency = (steps - crossings) * intra + crossings * inter
    bus = (min(shape.ll_max_gbps, 0.5 * shape.bus_gbps), 0.92 * shape.bus_gbps, shape.bus_gbps)[p]
    base = BASE_LATENCY_US[Algorithm.RING][p]
    return Algorithm.RING, protocol, base + latency, bus * n / steps


def _tree(shape: GroupShape, p: int, protocol: Protocol):
    """The tree all-reduce: up and down a chain inside each node and a binary tree of nodes;
    half the bus bandwidth (NCCL's tree ratio), LL at 1/3.8 of it, LL128 at 7/9 in a node
    and 120/128 across nodes."""
    hw = HW_LATENCY_US
    depth = math.floor(math.log2(shape.nodes))
    latency = (shape.per_node - 1) * hw[shape.intra_hw][Algorithm.TREE][p]
    latency += depth * hw["net"][Algorithm.TREE][p]
    bus = 0.92 * shape.bus_gbps
    if protocol == Protocol.LL:
        bus = min(bus / 3.8, shape.ll_max_gbps)
    elif protocol == Protocol.LL128:
        bus *= 7 / 9 if shape.nodes == 1 else 120 / 128
    base = BASE_LATENCY_US[Algorithm.TREE][p]
    return Algorithm.TREE, protocol, base + 2 * latency, 0.5 * bus


def _bus_bandwidth(group: Group) -> float:
    """The Simple protocol's bus bandwidth (GB/s): the intra-node link in one node; across
    nodes one network card per rank, ``k`` of them per node, bounded by NVLink."""
    if group.nodes == 1:
        return group.intra.bandwidth_gbps
    assert group.inter is not None
    cards = group.per_node * group.inter.bandwidth_gbps
    return cards if group.per_node == 1 else min(group.intra.bandwidth_gbps, cards)


def _tree_correction(
    algorithm: Algorithm, kind: Collective, protocol: Protocol, nbytes: float
) -> float:
    if algorithm != Algorithm.TREE or kind != Collective.ALL_REDUCE or nbytes < 64:
        return 1.0
    index = int(nbytes) >> 6
    log_size = index.bit_length() - 1
    if log_size >= 23:
        return 1.0
    return TREE_CORRECTION[PROTOCOLS.index(protocol)][log_size]


# -- pipesim's plain ring, for links NCCL does not describe ---------------------------------


def ring_ms(steps: int, ranks: int, nbytes: float, link: Link) -> float:
    """``steps`` ring steps over ``ranks`` ranks on ``link``: each pays the link's latency and
    moves ``nbytes / ranks`` (ms)."""
    latency_ms = steps * link.latency_us / 1000.0
    if math.isinf(link.bandwidth_gbps):
        return latency_ms
    return latency_ms + steps / ranks * nbytes / (link.bandwidth_gbps * 1e6)


def _plain_ms(kind: Collective, nbytes: float, group: Group) -> float:
    """The plain ring: an all-reduce in ``2 (n - 1)`` steps, inside each node first and then
    over the ``1 / k`` share each rank holds across nodes; a reduce-scatter or an all-gather
    is half of that (``n - 1`` of its steps); a broadcast a pipelined chain, ``n - 1``
    latencies and the buffer once."""
    if kind == Collective.BROADCAST:
        slowest = min(group.links, key=lambda link: link.bandwidth_gbps)
        size = 0.0 if math.isinf(slowest.bandwidth_gbps) else nbytes / slowest.bandwidth_gbps
        return (group.ranks - 1) * max(link.latency_ms for link in group.links) + size / 1e6
    k, nodes = group.per_node, group.nodes
    inside = ring_ms(2 * (k - 1), k, nbytes, group.intra) if k > 1 else 0.0
    across = 0.0
    if nodes > 1:
        assert group.inter is not None
        across = ring_ms(2 * (nodes - 1), nodes, nbytes / k, group.inter)
    total = inside + across
    return total if kind == Collective.ALL_REDUCE else total / 2
