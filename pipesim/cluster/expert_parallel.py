"""Expert parallelism: a MoE layer's experts spread over GPUs, and the all-to-alls that take
every token to its experts and back.

Megatron-Core (``--expert-model-parallel-size``, its "MoE" guide and
``megatron/core/parallel_state.py``) carves the expert-parallel groups out of the data-
and context-parallel ranks: ``ep`` ranks that hold the same layers hold ``E / ep`` routed
experts each, and every expert is replicated ``tensor x context x data / (ep x
expert_tensor)`` times (its expert data-parallel group, over which its gradients are
reduced). The dense parts (attention, router, shared experts) stay replicated over all
``data x context`` ranks. Ranks are numbered for the experts as Megatron-Core's second
rank generator numbers them: expert tensor ranks fastest, then expert-parallel ranks, then
the expert data-parallel ranks, then pipeline stages (``order`` "tp-cp-ep-dp-pp" with the
context dimension 1). With ``expert_tensor = tensor`` an EP group of ``ep <= gpus_per_node
/ tensor`` ranks sits inside one node; a larger one crosses ``ep tensor / gpus_per_node``
nodes, ``gpus_per_node / tensor`` of its ranks to each (``expert_group``).

A MoE layer on one GPU (Megatron-Core's ``MoEAlltoAllTokenDispatcher``): the router picks
``k`` experts for each of the GPU's ``T`` tokens, the dispatch all-to-all sends the ``T k``
token copies (``h`` elements each) to the ranks holding their experts, the experts compute,
and the combine all-to-all sends the results back, the same bytes. The backward's input
gradient runs both again, reversed. ``T`` is the microbatch's tokens on the GPU: ``b s /
context``, and ``1 / tensor`` of those with sequence parallelism (Megatron-Core requires it
with tensor parallelism in MoE training; without it pipesim lets every tensor-parallel rank
dispatch all ``T``). With ``ep`` ranks, ``1 / ep`` of a rank's copies stay on it under even
routing, so each all-to-all moves ``T k h dtype (ep - 1) / ep`` bytes off the rank, priced
as ``pipesim.cluster.all_to_all`` prices it over the group's links. The slowest rank
receives ``load_factor`` times the even share (``pipesim.cluster.expert_load``), and the
layer waits for it: the bytes scale by it. Expert tensor parallelism's gather of the
dispatched tokens inside the expert-tensor group is left out (its place is taken by the
MLP block's tensor-parallel collectives, which every layer counts).

Node-limited routing (DeepSeek-V3 technical report, section 3.2.2, and its ``M = 4``): a
token's copies go to at most ``M`` nodes; each copy crosses the network once per
destination node, to the GPU with the same in-node index, and is forwarded over NVLink to
the GPUs there that hold its experts. So with ``N`` nodes in the group, a token sends
``min(k, M, N) (N - 1) / N`` copies over the network (instead of ``k (N - 1) / N``), and
``(g - 1) / g`` of its ``k`` copies move over NVLink, ``g`` ranks to a node.

The all-to-alls are kept apart from the passes (``ExpertParallelCosts``): each stage's and
pass's share is named, then added to the passes (``with_all_to_all``: a lone pass runs
them exposed, as plain 1F1B does). ``pipesim.cluster.moe_parts`` cuts the passes into
attention, dispatch, experts and combine, so that an overlapped pair can hide one pass's
all-to-alls under the other's compute.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipesim.cluster.all_to_all import all_to_all_streams_ms
from pipesim.cluster.collectives import Group
from pipesim.cluster.expert_load import ExpertLoad, expected_load
from pipesim.cluster.fabric import (
    Fabric,
    FabricError,
    GroupSpan,
    RankLayout,
    group_span,
    rank_layout,
)
from pipesim.cluster.job import Job, JobError
from pipesim.cluster.moe import ExpertSplit, MoE, expert_pass_ms
from pipesim.cluster.shape import TransformerModel
from pipesim.cluster.static_memory import ExpertSharding
from pipesim.cluster.transformer import stage_blocks, stage_parameters
from pipesim.sim.costs import Costs


@dataclass(frozen=True, slots=True)
class AllToAll:
    """One dispatch (or combine) of one MoE layer on one GPU at even load: the bytes it
    moves over the intra-node link and over its network card, and the group."""

    intra_bytes: float
    inter_bytes: float
    group: Group

    def ms(self, load_factor: float = 1.0) -> float:
        """Its time (ms) on the rank that receives ``load_factor`` times the even share."""
        if load_factor == 1.0:
            return all_to_all_streams_ms(self.intra_bytes, self.inter_bytes, self.group)
        scaled = (self.intra_bytes * load_factor, self.inter_bytes * load_factor)
        return all_to_all_streams_ms(*scaled, self.group)


@dataclass(frozen=True, slots=True)
class ExpertParallelCosts:
    """What expert parallelism adds to a job's stages (module docstring), kept by name.

    ``forward_ms[k]`` and ``backward_input_ms[k]``: the all-to-alls inside stage ``k``'s F
    and I (and B), ``layers[k]`` MoE layers of dispatch and combine each (with
    recomputation I runs the forward's again); ``experts_ms[k]``: the stage's routed-expert
    GEMMs (F, I, W) at even load, of which the passes hold ``load.load_factor`` times;
    ``buffer_bytes``: one dispatch's send and receive buffers, held at once."""

    degree: int
    tensor: int
    moe: MoE
    span: GroupSpan
    load: ExpertLoad
    all_to_all: AllToAll
    tokens: float  # each GPU's tokens routed per microbatch
    layers: tuple[int, ...]
    forward_ms: tuple[float, ...]
    backward_input_ms: tuple[float, ...]
    experts_ms: tuple[tuple[float, float, float], ...]
    buffer_bytes: float
    recompute: bool

    def placement(self) -> str:
        """Where one EP group sits, in words."""
        span = self.span
        if not span.crosses_nodes:
            return f"EP {self.degree} inside one node"
        pods = f", {span.pods} pods" if span.crosses_pods else ""
        return f"EP {self.degree} over {span.nodes} nodes ({span.per_node} per node{pods})"


def dispatch_tokens(job: Job) -> float:
    """``T``, the tokens one GPU routes per microbatch (module docstring)."""
    par, model = job.parallel, _model(job)
    tokens = job.batch.microbatch_size * model.seq_len / par.context
    return tokens / par.tensor if par.sequence_parallel else tokens


def expert_split(job: Job) -> ExpertSplit:
    """How one GPU runs the routed experts: EP degree, expert tensor parallelism and the
    slowest rank's expected load."""
    par, moe = job.parallel, _model(job).moe
    if moe is None or (par.expert == 1 and par.expert_tensor in (None, par.tensor)):
        load = ExpertLoad() if moe is None else expected_load(moe, 1, dispatch_tokens(job))
        return ExpertSplit(load_factor=load.load_factor)
    load = expected_load(moe, par.expert, dispatch_tokens(job))
    return ExpertSplit(par.expert, par.experts_tensor, load.load_factor)


def expert_group(job: Job, devices: int) -> tuple[GroupSpan, Group]:
    """Where one EP group sits (Megatron-Core's expert rank order, module docstring) and
    the group its all-to-alls run over: the intra-node link inside a node, each rank's
    network card across nodes, at the rate the fabric leaves above a pod."""
    hw = job.hardware
    span = group_span(_expert_layout(job, devices), "ep")
    intra, inter = hw.node_links()
    if span.crosses_pods:
        inter = (hw.fabric or Fabric()).slow_link(inter)
    return span, Group(span.ranks, intra, inter, span.per_node)


def expert_data_span(job: Job, devices: int) -> GroupSpan:
    """Where one expert's replicas sit: the group its gradients are reduced over."""
    return group_span(_expert_layout(job, devices), "dp")


def _expert_layout(job: Job, devices: int) -> RankLayout:
    """Every rank's place as the experts number them (module docstring)."""
    par, hw = job.parallel, job.hardware
    if (par.tensor * par.context * par.data) % (par.expert * par.experts_tensor):
        raise JobError(
            "parallel.expert",
            f"expert x expert_tensor ({par.expert} x {par.experts_tensor}) must divide "
            f"tensor x context x data ({par.tensor} x {par.context} x {par.data})",
        )
    degrees = {"tp": par.experts_tensor, "ep": par.expert, "dp": par.expert_data, "pp": devices}
    try:
        return rank_layout(hw.fabric or Fabric(), degrees, job.gpus_per_node(devices))
    except FabricError as exc:
        raise JobError(exc.field, exc.message) from None


def layer_all_to_all(job: Job, span: GroupSpan, group: Group) -> AllToAll:
    """One dispatch of one MoE layer on one GPU at even load (module docstring)."""
    model = _model(job)
    moe = model.moe
    copies = dispatch_tokens(job) * moe.top_k * model.hidden * model.dtype_bytes
    n, g = span.ranks, span.per_node
    limit = moe.max_nodes_per_token
    if limit is None or not span.crosses_nodes:
        return AllToAll((g - 1) / n * copies, (n - g) / n * copies, group)
    nodes = n // g
    reached = min(moe.top_k, limit, nodes)
    network = reached * (nodes - 1) / nodes * copies / moe.top_k
    return AllToAll((g - 1) / g * copies, network, group)


def moe_layers(model: TransformerModel, partition: tuple[int, ...]) -> tuple[int, ...]:
    """MoE blocks of each stage: its MoE layers, and on the last the MTP modules' blocks
    where they are MoE layers."""
    counts, start, last = [], 0, len(partition) - 1
    for k, layers in enumerate(partition):
        blocks = stage_blocks(model, layers, start=start, last=k == last)
        counts.append(sum(n for n, view in blocks if view.moe is not None))
        start += layers
    return tuple(counts)


def expert_parallel_costs(
    job: Job, devices: int, partition: tuple[int, ...]
) -> ExpertParallelCosts | None:
    """Expert parallelism's part of each stage (None for a model without MoE layers)."""
    model, par = _model(job), job.parallel
    if model.moe is None:
        return None
    split = expert_split(job)
    span, group = expert_group(job, devices)
    a2a = layer_all_to_all(job, span, group)
    layers = moe_layers(model, partition)
    both = 2 * a2a.ms(split.load_factor)  # dispatch and combine
    forward = tuple(n * both for n in layers)
    again = 2 if model.recompute else 1
    moved = dispatch_tokens(job) * model.moe.top_k * model.hidden * model.dtype_bytes
    return ExpertParallelCosts(
        degree=par.expert,
        tensor=par.experts_tensor,
        moe=model.moe,
        span=span,
        load=expected_load(model.moe, par.expert, dispatch_tokens(job)),
        all_to_all=a2a,
        tokens=dispatch_tokens(job),
        layers=layers,
        forward_ms=forward,
        backward_input_ms=tuple(again * f for f in forward),
        experts_ms=_experts_ms(job, layers, replace(split, load_factor=1.0)),
        buffer_bytes=moved * (1 + split.load_factor) if par.expert > 1 else 0.0,
        recompute=model.recompute,
    )


def _experts_ms(
    job: Job, layers: tuple[int, ...], split: ExpertSplit
) -> tuple[tuple[float, float, float], ...]:
    """Each stage's routed-expert GEMMs (F, I, W) under ``split`` (with recomputation I
    runs the forward's again)."""
    model, par = _model(job), job.parallel
    tokens = job.batch.microbatch_size * (model.seq_len // par.context)
    one = expert_pass_ms(
        model.moe,
        model.hidden,
        model.mlp_matrices,
        tokens,
        job.hardware.gpu,
        job.efficiency,
        tensor=par.tensor,
        fp8=model.fp8,
        split=split,
    )
    again = one[0] if model.recompute else 0.0
    return tuple((n * one[0], n * (one[1] + again), n * one[2]) for n in layers)


def with_all_to_all(costs: Costs, ep: ExpertParallelCosts | None) -> Costs:
    """``costs`` with each stage's all-to-alls inside its F, I and B (exposed)."""
    if ep is None or ep.degree == 1:
        return costs
    add = ep.backward_input_ms
    return replace(
        costs,
        forward_ms=tuple(f + a for f, a in zip(costs.forward_ms, ep.forward_ms, strict=True)),
        backward_ms=tuple(b + a for b, a in zip(costs.backward_ms, add, strict=True)),
        backward_input_ms=tuple(i + a for i, a in zip(costs.backward_input_ms, add, strict=True)),
    )


def expert_sharding(job: Job, partition: tuple[int, ...]) -> ExpertSharding | None:
    """The routed experts' part of each stage's parameters (``ExpertSharding``), or None
    where every GPU holds every expert and splits it as the layers (what the whole-stage
    counts already say). ZeRO-3 with it is not modelled (a JobError)."""
    model, par = _model(job), job.parallel
    moe = model.moe
    if moe is None or (
        par.expert == 1 and par.experts_tensor == par.tensor and moe.redundant_experts == 0
    ):
        return None
    if par.zero_stage >= 3:
        raise JobError(
            "parallel.zero_stage",
            "ZeRO-3 (or FSDP) with expert parallelism or expert tensor parallelism is not "
            "modelled; allowed: 0, 1, 2",
        )
    each = moe.expert_parameters(model.hidden, model.mlp_matrices)
    layers = moe_layers(model, partition)
    return ExpertSharding(
        routed=tuple(n * moe.experts * each for n in layers),
        local=tuple(n * moe.expert_slots(par.expert) * each for n in layers),
        tensor=par.experts_tensor,
        replicas=par.expert_data,
    )


def buffer_bytes(ep: ExpertParallelCosts | None, stages_on: list[list[int]]) -> tuple:
    """Each device's all-to-all buffers (the largest one dispatch holds) where it runs MoE
    layers under expert parallelism; empty without."""
    if ep is None or not ep.buffer_bytes:
        return ()
    held = (any(ep.layers[k] for k in stages) for stages in stages_on)
    return tuple(ep.buffer_bytes if h else 0.0 for h in held)


def dense_parameters(
    model: TransformerModel, partition: tuple[int, ...], sharding: ExpertSharding
) -> tuple[float, ...]:
    """Each stage's parameters besides its routed experts (reduced over data x context)."""
    params = stage_parameters(model, partition)
    return tuple(p - r for p, r in zip(params, sharding.routed, strict=True))


def _model(job: Job) -> TransformerModel:
    if job.model is None:
        raise ValueError("the job has no model")
    return job.model


__all__ = [
    "AllToAll",
    "ExpertParallelCosts",
    "buffer_bytes",
    "dense_parameters",
    "dispatch_tokens",
    "expert_data_span",
    "expert_group",
    "expert_parallel_costs",
    "expert_sharding",
    "expert_split",
    "layer_all_to_all",
    "moe_layers",
    "with_all_to_all",
]
