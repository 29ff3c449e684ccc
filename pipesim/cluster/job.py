"""One job, as the cost model reads it: the model, its parallel layout and the hardware.

A user describes "a GPT with 48 layers of hidden 8192, tensor-parallel over 8 GPUs, on
nodes of 8 H100s over NVLink and NDR InfiniBand". A ``Job`` holds exactly that, as plain
frozen data: the model's shape (``TransformerModel``) and how its layers are split over
the pipeline stages (``partition``), the parallel layout (tensor, data, ZeRO stage and
what overlaps), the hardware (GPU, links, GPUs per node, placement, PCIe sharing), how fast
the GPU runs (``Efficiency``) and the batch sizes. ``pipesim.scenario`` builds it once from
a scenario file; ``pipesim.cluster.job_costs`` derives stage costs from it and
``topology`` the links between pipeline devices.

A job the cost model cannot lay out raises ``JobError``, whose ``field`` names the part of
the job as a scenario file names it (``hardware.gpu``, ``model``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pipesim.cluster.efficiency import Efficiency
from pipesim.cluster.fabric import Fabric, FabricError, RankLayout, pipeline_nodes, rank_layout
from pipesim.cluster.hardware import (
    DEFAULT_FRAGMENTATION,
    DEFAULT_MEMORY_HEADROOM,
    DEFAULT_RUNTIME_BYTES,
    GpuProfile,
    build_topology,
)
from pipesim.cluster.optimizers import DEFAULT_OPTIMIZER
from pipesim.cluster.transformer import TransformerModel
from pipesim.schedules.ir import Schedule
from pipesim.sim.links import IDEAL, Link, Topology


class JobError(ValueError):
    """A job that cannot be laid out: ``field`` (as a scenario names it) and what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True, slots=True)
class ParallelLayout:
    """How the replicas of the pipeline split the work besides pipelining: ``tensor`` GPUs
    per stage (Megatron-LM's tensor parallelism, optionally with sequence parallelism and
    its communication overlapped, ``tp_overlap``), ``data`` replicas with ZeRO stage
    ``zero_stage`` and their gradient reduction overlapped with the backward
    (``dp_overlap``), and ``context`` GPUs sharing every sequence (context parallelism,
    ``context_mode`` ``ring`` or ``all-to-all``: ``pipesim.cluster.context_parallel``).
    Ranks are ordered as Megatron-LM orders them: tensor, context, data, pipeline. A MoE
    model's routed experts are spread over ``expert`` ranks carved out of the data x
    context ranks, each split ``expert_tensor`` ways (None: ``tensor``), as Megatron-Core
    lays them out (``pipesim.cluster.expert_parallel``)."""

    tensor: int = 1
    data: int = 1
    zero_stage: int = 0
    sequence_parallel: bool = False
    tp_overlap: bool = False
    dp_overlap: bool = False
    context: int = 1
    context_mode: str = "ring"
    optimizer: str = DEFAULT_OPTIMIZER  # pipesim.cluster.optimizers; zero_stage is its own
    pipeline_scatter_gather: bool = False  # each TP rank sends 1/tensor of a stage's output
    expert: int = 1
    expert_tensor: int | None = None

    @property
    def experts_tensor(self) -> int:
        """The experts' tensor parallelism: ``expert_tensor``, or ``tensor`` where not set."""
        return self.expert_tensor or self.tensor

    @property
    def expert_data(self) -> int:
        """Replicas of each routed expert, over which its gradients are reduced (Megatron-
        Core's expert data parallelism): ``tensor x context x data / (expert x
        expert_tensor)``, ``data x context / expert`` where the experts split as the
        layers do."""
        ranks = self.tensor * self.context * self.data
        return max(ranks // (self.expert * self.experts_tensor), 1)


@dataclass(frozen=True, slots=True)
class Hardware:
    """The GPU and the links: ``link`` joins any two GPUs unless ``intra_node_link`` (inside
    a node) or ``inter_node_link`` (between nodes) is given. Nodes hold ``gpus_per_node``
    GPUs, or devices sit on the nodes ``placement`` names; ``pcie_switch_share`` GPUs share
    one PCIe switch's upstream link. ``comm_overlap: False`` keeps a sender busy until its
    message has arrived. ``runtime_bytes``, ``fragmentation`` and ``memory_headroom``: the
    memory a process holds besides its tensors and what the OOM check keeps free
    (``pipesim.cluster.hardware``, "Runtime memory"). ``fabric``: the network above the
    node (pods, oversubscription, rank order; ``pipesim.cluster.fabric``), None for one
    non-blocking network with Megatron-LM's default rank order."""

    gpu: GpuProfile | None = None
    link: Link = IDEAL
    intra_node_link: Link | None = None
    inter_node_link: Link | None = None
    gpus_per_node: int | None = None
    placement: tuple[int, ...] | None = None
    pcie_switch_share: int | None = None
    comm_overlap: bool = True
    runtime_bytes: float = DEFAULT_RUNTIME_BYTES
    fragmentation: float = DEFAULT_FRAGMENTATION
    memory_headroom: float = DEFAULT_MEMORY_HEADROOM
    fabric: Fabric | None = None

    def node_links(self) -> tuple[Link, Link]:
        """The links inside a node and between nodes; ``link`` stands in for either when
        it is not given."""
        return self.intra_node_link or self.link, self.inter_node_link or self.link


@dataclass(frozen=True, slots=True)
class BatchSizes:
    """Microbatches per step and samples per microbatch."""

    microbatches: int
    microbatch_size: int


@dataclass(frozen=True, slots=True)
class Job:
    """A training or inference job (module docstring). ``partition`` is ``"even"``,
    ``"balanced"`` or the layers of each stage; ``training: False`` runs forward only.
    ``batch`` is None where no step is run (a serving deployment)."""

    hardware: Hardware
    model: TransformerModel | None = None
    partition: str | tuple[int, ...] = "even"
    parallel: ParallelLayout = ParallelLayout()
    efficiency: Efficiency = Efficiency()
    batch: BatchSizes | None = None
    training: bool = True

    def gpus_per_node(self, devices: int) -> int:
        """``hardware.gpus_per_node``, or every GPU of the job when no node size is given
        (all ``devices`` then sit on one node, with their tensor and data ranks)."""
        par = self.parallel
        return self.hardware.gpus_per_node or devices * par.tensor * par.context * par.data

    def rank_layout(self, devices: int) -> RankLayout:
        """Where every rank of the job sits (``pipesim.cluster.fabric.rank_layout``) with
        ``devices`` pipeline stages; a layout that does not fit the fabric is a JobError."""
        hw, par = self.hardware, self.parallel
        if hw.fabric is not None and hw.gpus_per_node is None:
            raise JobError("hardware.topology", "needs hardware.gpus_per_node")
        degrees = {
            "tp": par.tensor,
            "cp": getattr(par, "context", 1),
            "dp": par.data,
            "pp": devices,
        }
        try:
            per_node = hw.gpus_per_node or math.prod(degrees.values())
            return rank_layout(hw.fabric or Fabric(), degrees, per_node)
        except FabricError as exc:
            raise JobError(exc.field, exc.message) from None


def communicating_pairs(schedule: Schedule) -> set[tuple[int, int]]:
    """The directed device pairs a schedule sends over: neighbouring stages of each chain,
    activations forward and gradients back."""
    pairs = set()
    for chain in schedule.chains:
        for stage in chain.stages[:-1]:
            src, dst = schedule.placement[stage], schedule.placement[stage + 1]
            if src != dst:
                pairs |= {(src, dst), (dst, src)}
    return pairs


def topology(job: Job, schedule: Schedule) -> Topology:
    """One link for every pair, or a cluster of nodes.

    With ``gpus_per_node`` (or a ``placement``) devices sit on nodes; without, every device
    sits on one node, and ``intra_node_link``, when given, joins them. Ranks are laid out
    in the fabric's rank order (Megatron-LM's by default: tensor ranks innermost, then
    data, then pipeline), so with tensor parallelism t and data parallelism n pipeline
    device d's first GPU is ``d * t * n`` and sits on node ``d * t * n // gpus_per_node``.
    Neighbouring stages in different pods of an oversubscribed fabric talk over the slower
    link above the pod (``pipesim.cluster.fabric``).
    """
    hw, devices = job.hardware, schedule.devices
    layout = job.rank_layout(devices)  # checks the fabric against the job
    intra, inter = hw.node_links()
    if hw.gpus_per_node is None and hw.placement is None:
        if hw.inter_node_link is not None:
            raise JobError(
                "hardware.inter_node_link",
                "needs hardware.gpus_per_node or hardware.placement (without them all "
                "devices sit on one node)",
            )
        if hw.pcie_switch_share is None:
            return Topology(devices, default=intra, comm_overlap=hw.comm_overlap)
    per_node = job.gpus_per_node(devices)
    nodes = hw.placement or pipeline_nodes(layout, devices)
    pairs = communicating_pairs(schedule)
    try:
        built = build_topology(
            devices,
            max(per_node // layout.strides["pp"], 1),
            intra,
            inter,
            placement=nodes,
            pcie_switch_share=hw.pcie_switch_share,
            comm_overlap=hw.comm_overlap,
            pairs=pairs,
        )
    except ValueError as exc:
        raise JobError("hardware", str(exc)) from None
    return _above_the_pods(built, hw, nodes, pairs)


def _above_the_pods(
    built: Topology, hw: Hardware, nodes: Sequence[int], pairs: set[tuple[int, int]]
) -> Topology:
    """``built`` with the slower link on every pair whose devices sit in different pods."""
    fabric = hw.fabric
    if fabric is None or fabric.nodes_per_pod is None or fabric.oversubscription == 1:
        return built
    slow = fabric.slow_link(hw.node_links()[1])
    per_pod = fabric.nodes_per_pod
    crossing = {
        (src, dst): slow for src, dst in pairs if nodes[src] // per_pod != nodes[dst] // per_pod
    }
    return replace(built, links={**built.links, **crossing}) if crossing else built


__all__ = [
    "BatchSizes",
    "Hardware",
    "Job",
    "JobError",
    "ParallelLayout",
    "communicating_pairs",
    "topology",
]
