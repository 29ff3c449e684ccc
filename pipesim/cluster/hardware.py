"""Hardware profiles (interconnects and GPUs) and the topology built from them: which
link joins two devices, which devices share a node, which share a PCIe switch.

The link model itself (LogGP: bandwidth time queues, latency is a pure delay) lives in
``pipesim.sim.links``.

Profiles come in two variants. ``line-rate`` is what the data sheet promises: the signalling
rate of the wire and the smallest per-hop latency the communication library assumes.
``achievable`` is what a point-to-point benchmark measures between two GPUs with large
messages; use it to predict real runs, and ``line-rate`` to see the ceiling.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from pipesim.cluster.gpus import (  # noqa: F401  (re-exported: the GPU half of the profiles)
    GPU_PROFILES,
    GpuProfile,
    UnknownProfileError,
    gpu_profile,
)
from pipesim.sim.links import Link, Topology

# -- link profiles -------------------------------------------------------------------------
#
# Bandwidth is GB/s (1e9 bytes/s) in ONE direction; data sheets usually quote the sum of both.
# Latency is microseconds per hop. NCCL's own cost model (NVIDIA/nccl, src/graph/tuning.cc,
# table ``hwLat``, ring algorithm) gives a per-hop latency for each kind of hardware and
# protocol: NVLink 0.6 us (LL protocol) / 3.4 us (Simple), PCIe 1.0 / 5.7 us, network
# 2.7 / 14.0 us. LL is NCCL's low-latency protocol for tiny messages, so its figure is used as
# the line-rate latency; Simple carries the large messages a pipeline sends, so its figure is
# the achievable latency. NCCL does not tell InfiniBand from RoCE; neither does this table.
#
# Each row: variant -> (latency_us, bandwidth_gbps).
LINK_PROFILES: dict[str, dict[str, tuple[float, float]]] = {
    # NVLink 3 through NVSwitch (A100 SXM): 12 links x 25 GB/s per direction = 300 GB/s
    # (NVIDIA/nccl-tests#149, sjeaugey). Large-message busbw reaches ~230 GB/s (same thread;
    # NVIDIA/nccl-tests PR #189 reports ~235 GB/s on A100).
    "nvlink3": {
        "line-rate": (0.6, 300.0),  # tuning.cc NVLink LL; 12 x 25 GB/s
        "achievable": (3.4, 230.0),  # tuning.cc NVLink Simple; nccl-tests#149
    },
    # NVLink 4 through NVSwitch (H100/H200 SXM): 18 links, 900 GB/s both directions = 450 GB/s
    # per direction. p2pBandwidthLatencyTest measures 371-380 GB/s unidirectional on HGX H100
    # (NVIDIA/nccl#1264; 376 GB/s quoted there from another HGX H100).
    "nvlink4": {
        "line-rate": (0.6, 450.0),  # tuning.cc NVLink LL; 900 GB/s bidirectional / 2
        "achievable": (3.4, 380.0),  # tuning.cc NVLink Simple; NVIDIA/nccl#1264
    },
    # NVLink 5 through NVSwitch (B200): 18 links x 100 GB/s bidirectional = 1.8 TB/s, so
    # 900 GB/s per direction (HGX B200 specifications). No public point-to-point measurement
    # was found; the achievable figure applies NVLink 4's measured ratio (380 / 450 = 0.844).
    # NVLink 4 on the H800 SXM (the H100 for export markets): 8 links, 400 GB/s both
    # directions = 200 GB/s per direction (NVIDIA H800 product brief). No public point-to-point
    # measurement was found; the achievable figure applies NVLink 4's measured ratio.
    "nvlink4-h800": {
        "line-rate": (0.6, 200.0),  # tuning.cc NVLink LL; 400 GB/s bidirectional / 2
        "achievable": (3.4, 168.9),  # derived: 200 * 380 / 450, not measured
    },
    "nvlink5": {
        "line-rate": (0.6, 900.0),  # tuning.cc NVLink LL; 1.8 TB/s bidirectional / 2
        "achievable": (3.4, 760.0),  # derived: 900 * 380 / 450, not measured
    },
    # PCIe 4.0 x16: 16 GT/s x 16 lanes x 128b/130b / 8 = 31.5 GB/s per direction (PCIe 4.0
    # specification arithmetic). nvbandwidth measures 26.3 GB/s GPU-to-GPU over Gen4 without
    # NVLink, "almost 80% of full PCIe Gen 4" (NVIDIA/nvbandwidth#50).
    "pcie4": {
        "line-rate": (1.0, 31.5),  # tuning.cc PCI LL; 16 GT/s * 16 * 128/130 / 8
        "achievable": (5.7, 26.3),  # tuning.cc PCI Simple; NVIDIA/nvbandwidth#50
    },
    # PCIe 5.0 x16: 32 GT/s x 16 lanes x 128b/130b / 8 = 63.0 GB/s per direction. nvbandwidth
    # measures 52.8 GB/s device-to-host on H100 (NVIDIA/nvbandwidth#24).
    "pcie5": {
        "line-rate": (1.0, 63.0),  # tuning.cc PCI LL; 32 GT/s * 16 * 128/130 / 8
        "achievable": (5.7, 52.8),  # tuning.cc PCI Simple; NVIDIA/nvbandwidth#24
    },
    # InfiniBand HDR, one 200 Gb/s NIC per GPU: 25 GB/s. NCCL's maintainers "usually consider
    # 24GB/s is the peak performance per 200G NIC" (NVIDIA/nccl-tests#119).
    "ib-hdr": {
        "line-rate": (2.7, 25.0),  # tuning.cc NET LL; 200 Gb/s / 8
        "achievable": (14.0, 24.0),  # tuning.cc NET Simple; nccl-tests#119
    },
    # InfiniBand NDR, one 400 Gb/s NIC per GPU (ConnectX-7): 50 GB/s. Achievable scales the
    # 24 GB/s-per-200G rule above to 48 GB/s.
    "ib-ndr": {
        "line-rate": (2.7, 50.0),  # tuning.cc NET LL; 400 Gb/s / 8
        "achievable": (14.0, 48.0),  # nccl-tests#119 rule, 2 x 24 GB/s
    },
    # RoCE v2 at 400 Gb/s (ConnectX-7 Ethernet): 50 GB/s. perftest reaches 392 Gb/s = 49 GB/s
    # on one rail (NVIDIA/nccl#2409); 48 GB/s keeps the same rule as InfiniBand NDR.
    "roce-400": {
        "line-rate": (2.7, 50.0),  # tuning.cc NET LL; 400 Gb/s / 8
        "achievable": (14.0, 48.0),  # nccl-tests#119 rule; perftest 49 GB/s in nccl#2409
    },
}

LINK_VARIANTS = ("line-rate", "achievable")


def link_profile(name: str, variant: str = "achievable") -> Link:
    """The ``Link`` of a named interconnect, e.g. ``link_profile("nvlink4", "line-rate")``."""
    if name not in LINK_PROFILES:
        allowed = ", ".join(LINK_PROFILES)
        raise UnknownProfileError(f"unknown link profile {name!r}; allowed: {allowed}")
    if variant not in LINK_VARIANTS:
        allowed = ", ".join(LINK_VARIANTS)
        raise UnknownProfileError(f"unknown link variant {variant!r}; allowed: {allowed}")
    latency_us, bandwidth_gbps = LINK_PROFILES[name][variant]
    return Link(latency_us=latency_us, bandwidth_gbps=bandwidth_gbps, name=f"{name}/{variant}")


# -- Runtime memory ------------------------------------------------------------------------
#
# What a training or serving process holds on each GPU besides its tensors, and what the
# memory check keeps free (docs/validation.md, "Memory"):
#
# * ``DEFAULT_RUNTIME_BYTES``, fixed per GPU: the CUDA context (its kernels' code and the
#   driver's state; PyTorch's first CUDA call takes about 0.5-0.7 GiB on recent GPUs, as
#   reported on discuss.pytorch.org, "What is the reason for pytorch's GPU memory floor")
#   plus NCCL's communication buffers (NCCL_BUFFSIZE, 4 MiB by default, per channel and
#   peer: a few hundred MiB for a few communicators). 1 GiB in all.
# * ``DEFAULT_FRAGMENTATION``: the share of the allocated bytes the caching allocator holds
#   on top of them (reserved but not allocated, blocks split by size); a few percent in
#   PyTorch's memory snapshots of steady training steps. 3 %.
# * ``DEFAULT_MEMORY_HEADROOM``: the share of the GPU the OOM check keeps free for what no
#   model counts (cuBLAS workspaces, a peak between two of pipesim's instants). 5 %.
DEFAULT_RUNTIME_BYTES = float(2**30)
DEFAULT_FRAGMENTATION = 0.03
DEFAULT_MEMORY_HEADROOM = 0.05


# -- topology building ---------------------------------------------------------------------


def build_topology(
    devices: int,
    gpus_per_node: int,
    intra_node_link: Link | str,
    inter_node_link: Link | str,
    placement: Sequence[int] | None = None,
    pcie_switch_share: int | None = None,
    comm_overlap: bool = True,
    variant: str = "achievable",
    pairs: Iterable[tuple[int, int]] | None = None,
) -> Topology:
    """A cluster of nodes: fast links inside a node, a network between nodes.

    Device ``d`` sits on node ``d // gpus_per_node`` unless ``placement[d]`` names its node.
    A pair of devices on one node talks over ``intra_node_link``; a pair on different nodes
    over ``inter_node_link``. A link may be a ``Link`` or a profile name (``"nvlink4"``),
    looked up with ``variant``.

    ``pcie_switch_share=k`` models GPUs that hang, ``k`` at a time, off one PCIe switch whose
    single upstream link leads to the host. Number the devices of each node in order
    (local index 0, 1, ...); local indices ``[0, k)`` form group 0, ``[k, 2k)`` group 1, and
    so on. A directed pair (src, dst) on one node whose devices lie in *different* groups
    must leave src's switch through its upstream link, so every such pair with the same
    source group shares one queue, the channel ``"node{n}/pcie{g}/up"`` (g: src's group).
    Pairs inside one group go peer to peer through the switch and keep their own queue;
    pairs between nodes keep their own queue too. The shared channel models contention on
    the upstream direction only; the downstream link into dst's group is not queued.

    ``pairs`` names the directed pairs that will carry messages (a pipeline only talks to
    its neighbours); only those get an entry, so a large cluster costs O(pairs), not
    O(devices^2). Without it every pair is described.
    """
    if devices < 1 or gpus_per_node < 1:
        raise ValueError(
            f"devices and gpus_per_node must be >= 1, got {devices=}, {gpus_per_node=}"
        )
    nodes = _node_of_each_device(devices, gpus_per_node, placement)
    intra = _as_link(intra_node_link, variant)
    inter = _as_link(inter_node_link, variant)
    if pairs is None:
        pairs = ((src, dst) for src in range(devices) for dst in range(devices))
    pairs = [(src, dst) for src, dst in pairs if src != dst and nodes[src] == nodes[dst]]
    links = dict.fromkeys(pairs, intra)
    channels = {} if pcie_switch_share is None else _pcie_channels(nodes, pcie_switch_share, pairs)
    return Topology(
        devices=devices, default=inter, links=links, channels=channels, comm_overlap=comm_overlap
    )


def _node_of_each_device(
    devices: int, gpus_per_node: int, placement: Sequence[int] | None
) -> tuple[int, ...]:
    if placement is None:
        return tuple(d // gpus_per_node for d in range(devices))
    if len(placement) != devices:
        raise ValueError(
            f"placement has {len(placement)} entries, expected {devices} (one per device)"
        )
    for node, count in sorted(Counter(placement).items()):
        if count > gpus_per_node:
            raise ValueError(f"placement puts {count} devices on node {node}, but {gpus_per_node=}")
    return tuple(int(n) for n in placement)


def _pcie_channels(
    nodes: tuple[int, ...], share: int, pairs: list[tuple[int, int]]
) -> dict[tuple[int, int], str]:
    if share < 1:
        raise ValueError(f"pcie_switch_share must be >= 1, got {share}")
    seen: dict[int, int] = {}
    group = []
    for node in nodes:
        local = seen.get(node, 0)
        seen[node] = local + 1
        group.append(local // share)
    return {
        (src, dst): f"node{nodes[src]}/pcie{group[src]}/up"
        for src, dst in pairs
        if group[src] != group[dst]
    }


def _as_link(link: Link | str, variant: str) -> Link:
    return link if isinstance(link, Link) else link_profile(link, variant)
