"""From a scenario's model and cluster sections to what the engine needs.

Users describe "a GPT with 48 layers of hidden 8192 on 4 nodes of 8 H100s over NVLink and
NDR InfiniBand"; this module turns that into the engine's inputs:

* ``batch_sizes``: microbatches and samples per microbatch, from ``model.global_batch``
  (split over ``parallel.data`` replicas) or the pipeline section;
* ``topology``: which link joins two pipeline devices (one ``hardware.link`` for all, or
  nodes of ``gpus_per_node`` GPUs with an intra- and an inter-node link);
* ``model_costs``: per-stage durations and sizes from the transformer's FLOPs and the GPU,
  the end-of-step data-parallel all-reduce, static memory and MFU inputs.

Every problem is a ScenarioError naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from pipesim.cluster.hardware import UnknownProfileError, build_topology, gpu_profile, link_profile
from pipesim.cluster.model import (
    Efficiency,
    TransformerModel,
    data_parallel_allreduce_ms,
    partition_layers,
    stage_costs,
    time_loads,
)
from pipesim.cluster.parallel import data_parallel_link
from pipesim.cluster.pass_time import (
    TensorParallel,
    exposed_data_parallel_ms,
    optimizer_step_ms,
    with_parameter_gathers,
)
from pipesim.cluster.transformer import model_flops_per_step, static_memory
from pipesim.scenario.schema import LinkSpec, ScenarioError, ScenarioSpec
from pipesim.schedules.ir import Schedule
from pipesim.schedules.posts import REDUCE_GRAD, UNSHARD
from pipesim.sim.costs import Costs
from pipesim.sim.links import IDEAL, Link, Topology
from pipesim.sim.metrics import Accounting

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True, slots=True)
class BatchSizes:
    microbatches: int
    microbatch_size: int


@dataclass(frozen=True, slots=True)
class ModelCosts:
    costs: Costs
    accounting: Accounting
    tail_ms: tuple[float, ...] | None


def batch_sizes(spec: ScenarioSpec, source: str) -> BatchSizes:
    """Microbatches m and microbatch size b; with a global batch G over n replicas, G = m b n."""
    pipe, model = spec.pipeline, spec.model
    size = pipe.microbatch_size
    if model is not None and model.microbatch_size is not None:
        if (
            "microbatch_size" in pipe.model_fields_set
            and pipe.microbatch_size != model.microbatch_size
        ):
            raise ScenarioError(
                f"{source}: model.microbatch_size: {model.microbatch_size} disagrees with "
                f"pipeline.microbatch_size {pipe.microbatch_size}; give one of them"
            )
        size = model.microbatch_size
    global_batch = model.global_batch if model is not None else None
    if global_batch is None:
        if pipe.microbatches is None:
            raise ScenarioError(
                f"{source}: pipeline.microbatches: required (or give model.global_batch)"
            )
        return BatchSizes(pipe.microbatches, size)
    replicas = spec.parallel.data
    size_given = "microbatch_size" in pipe.model_fields_set or model.microbatch_size is not None
    if pipe.microbatches is not None and not size_given:
        per_microbatch, rest = divmod(global_batch, pipe.microbatches * replicas)
        if rest or per_microbatch == 0:
            raise ScenarioError(
                f"{source}: pipeline.microbatches: model.global_batch={global_batch} does not split "
                f"into {pipe.microbatches} microbatches x {replicas} replicas"
            )
        return BatchSizes(pipe.microbatches, per_microbatch)
    microbatches, rest = divmod(global_batch, size * replicas)
    if rest or microbatches == 0 or (pipe.microbatches not in (None, microbatches)):
        raise ScenarioError(
            f"{source}: model.global_batch: {global_batch} is not microbatches x microbatch_size "
            f"({size}) x parallel.data ({replicas})"
            + (f" with microbatches={pipe.microbatches}" if pipe.microbatches else "")
        )
    return BatchSizes(microbatches, size)


def _link(choice: str | LinkSpec | None, variant: str, field: str, source: str) -> Link | None:
    if choice is None:
        return None
    if isinstance(choice, LinkSpec):
        return Link(choice.latency_us, choice.bandwidth_gbps, "custom", choice.gap_us)
    if choice == "ideal":
        return IDEAL
    try:
        return link_profile(choice, variant)
    except UnknownProfileError as exc:
        raise ScenarioError(f"{source}: hardware.{field}: {exc}") from None


def _node_links(spec: ScenarioSpec, source: str) -> tuple[Link, Link]:
    """The links inside a node and between nodes; ``hardware.link`` stands in for either
    when it is not given."""
    hw = spec.hardware
    link = _link(hw.link, hw.link_variant, "link", source)
    intra = _link(hw.intra_node_link, hw.link_variant, "intra_node_link", source)
    inter = _link(hw.inter_node_link, hw.link_variant, "inter_node_link", source)
    return intra or link, inter or link


def gpus_per_node(spec: ScenarioSpec, devices: int) -> int:
    """``hardware.gpus_per_node``, or every GPU of the job when no node size is given (all
    devices then sit on one node)."""
    par = spec.parallel
    return spec.hardware.gpus_per_node or devices * par.tensor * par.data


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


def topology(spec: ScenarioSpec, schedule: Schedule, source: str) -> Topology:
    """One link for every pair, or a cluster of nodes.

    With ``gpus_per_node`` (or a ``placement``) devices sit on nodes; without, every device
    sits on one node, and ``intra_node_link``, when given, joins them. With tensor
    parallelism t and data parallelism n laid out as Megatron-LM does (tensor ranks
    innermost, then data, then pipeline), pipeline device d's first GPU is ``d * t * n``, so
    it sits on node ``d * t * n // gpus_per_node``.
    """
    hw, par, devices = spec.hardware, spec.parallel, schedule.devices
    intra, inter = _node_links(spec, source)
    if hw.gpus_per_node is None and hw.placement is None:
        if hw.inter_node_link is not None:
            raise ScenarioError(
                f"{source}: hardware.inter_node_link: needs hardware.gpus_per_node or "
                "hardware.placement (without them all devices sit on one node)"
            )
        if hw.pcie_switch_share is None:
            return Topology(devices, default=intra, comm_overlap=hw.comm_overlap)
    per_node = gpus_per_node(spec, devices)
    nodes = hw.placement
    if nodes is None:
        nodes = [d * par.tensor * par.data // per_node for d in range(devices)]
    try:
        return build_topology(
            devices,
            max(per_node // (par.tensor * par.data), 1),
            intra,
            inter,
            placement=nodes,
            pcie_switch_share=hw.pcie_switch_share,
            comm_overlap=hw.comm_overlap,
            pairs=communicating_pairs(schedule),
        )
    except ValueError as exc:
        raise ScenarioError(f"{source}: hardware: {exc}") from None


def check_tensor_parallel(spec: ScenarioSpec, source: str) -> None:
    """Tensor parallelism splits every attention head group and the MLP across ``t`` GPUs of
    one node (Megatron-LM): ``t`` divides the heads and the FFN width, and the node."""
    m, t = spec.model, spec.parallel.tensor
    if t == 1:
        return
    for name, size in (("heads", m.heads), ("ffn_hidden", m.ffn_hidden or 4 * m.hidden)):
        if size % t:
            raise ScenarioError(
                f"{source}: parallel.tensor: {t} does not divide model.{name} ({size}); "
                f"allowed: {_divisors(size)}"
            )
    per_node = spec.hardware.gpus_per_node
    if per_node is not None and per_node % t:
        raise ScenarioError(
            f"{source}: parallel.tensor: {t} tensor-parallel GPUs do not fit in a node of "
            f"hardware.gpus_per_node={per_node}; allowed: {_divisors(per_node)}"
        )


def _divisors(number: int) -> str:
    if number > 4096:
        return f"a divisor of {number}"
    found = [k for k in range(1, number + 1) if number % k == 0]
    return ", ".join(map(str, found[:12])) + (", ..." if len(found) > 12 else "")


def model_costs(
    spec: ScenarioSpec, schedule: Schedule, microbatch_size: int, source: str
) -> ModelCosts:
    """Costs, end-of-step tail and accounting for a scenario with a ``model`` section.

    The tail of each device is its optimizer step plus the data-parallel gradient
    reduction it waits for (all of it, or with ``parallel.dp_overlap`` what outlasts its
    last backward and first forward). Forward-only (``pipeline.mode: forward``, inference)
    counts forward FLOPs for MFU, keeps the weights only in static memory (no gradients, no
    optimizer states) and has no tail.
    """
    hw, par = spec.hardware, spec.parallel
    if hw.gpu is None:
        raise ScenarioError(f"{source}: hardware.gpu: required with a model section")
    gpu = gpu_profile(hw.gpu)
    intra, _ = _node_links(spec, source)
    efficiency = _efficiency(spec)
    # "balanced" balances stage times (TP communication aside)
    tp = TensorParallel(
        par.tensor, 0.0, par.sequence_parallel, par.tp_overlap, efficiency.tensor_overlap_fraction
    )
    model, partition = _model_and_partition(
        spec,
        schedule.model_stages,
        source,
        lambda model: time_loads(model, microbatch_size, gpu, efficiency, tp),
    )
    costs = stage_costs(
        model,
        partition,
        microbatch_size,
        gpu,
        efficiency,
        tensor=par.tensor,
        tensor_link=intra if par.tensor > 1 else None,
        sequence_parallel=par.sequence_parallel,
        tensor_overlap=par.tp_overlap,
    )
    training = spec.pipeline.mode == "train"
    stages_on: list[list[int]] = [[] for _ in range(schedule.devices)]
    for stage, device in enumerate(schedule.placement):
        stages_on[device].append(schedule.model_stage(stage))
    static = static_memory(
        model,
        partition,
        par.data,
        par.zero_stage,
        par.tensor,
        training,
        pipelined=not _reduces_every_backward(schedule),
    )
    tail = None
    if training:
        costs, tail = _step_tail(spec, schedule, (model, partition), costs, stages_on, source)
    global_batch = schedule.microbatches * microbatch_size * par.data
    accounting = Accounting(
        static_memory_bytes=tuple(sum(static[k].total_bytes for k in s) for s in stages_on),
        memory_capacity_bytes=gpu.memory_bytes,
        replicas=par.data,
        flops_per_step=model_flops_per_step(model, global_batch, forward_only=not training),
        peak_flops=gpu.peak_tflops * 1e12 * schedule.devices * par.tensor * par.data,
    )
    return ModelCosts(costs, accounting, tail)


def _efficiency(spec: ScenarioSpec) -> Efficiency:
    eff = spec.model.efficiency
    return Efficiency(
        eff.max_fraction,
        eff.half_tokens,
        eff.launch_overhead_ms,
        attention_fraction=eff.attention_fraction,
        memory_fraction=eff.memory_fraction,
        tensor_overlap_fraction=eff.tensor_overlap_fraction,
    )


def _step_tail(
    spec: ScenarioSpec,
    schedule: Schedule,
    split: tuple[TransformerModel, tuple[int, ...]],
    costs: Costs,
    stages_on: list[list[int]],
    source: str,
) -> tuple[Costs, tuple[float, ...] | None]:
    """Each device's end-of-step work: optimizer step and exposed gradient reduction (a ring
    inside a node; across nodes, reduced inside each node first when a node holds several
    replicas). With torch's REDUCE_GRAD posts in the schedule, the reduction goes to them,
    stage by stage, and the optimizer step with them (``_at_reduce_grad_posts``). Under
    ZeRO-3 every forward and backward also gathers its stage's parameters over the same
    group, charged to the stage costs (``with_parameter_gathers``), or, in torch's lowered
    form, to its UNSHARD posts (one gather each, on the gather stream), and the step's
    reduction is the reduce-scatter alone; without a pipeline every backward
    reduce-scatters its own gradients, and nothing is left for the end of the step."""
    par, (model, partition) = spec.parallel, split
    gpu = gpu_profile(spec.hardware.gpu)
    optimizer = optimizer_step_ms(
        model, partition, gpu, _efficiency(spec), par.data, par.zero_stage, par.tensor
    )
    reduction, compute = (0.0,) * len(partition), costs  # compute: before any gathers
    if par.data > 1:
        (intra, inter), per_node = _node_links(spec, source), gpus_per_node(spec, schedule.devices)
        link = data_parallel_link(par.tensor, par.data, per_node, intra, inter)
        # Replicas tensor-innermost: a node holds per_node / tensor of them, or all of them
        inside = par.tensor * par.data <= per_node  # data_parallel_link's test
        sharing = 1 if inside else math.gcd(par.data, per_node // par.tensor)
        reduction = data_parallel_allreduce_ms(
            model,
            partition,
            par.data,
            link,
            par.tensor,
            ranks_per_node=sharing,
            intra_node_link=intra,
        )
        if par.zero_stage == 3:
            # An all-gather (or a reduce-scatter) is half a ring all-reduce: n - 1 of its
            # 2 (n - 1) steps. Every pass gathers its weights; the step only reduce-scatters.
            reduction = tuple(r / 2 for r in reduction)
            if any(post.kind == UNSHARD for placed in schedule.posts for _, post in placed):
                costs = replace(costs, unshard_ms=reduction)  # torch's posts say where
            elif _reduces_every_backward(schedule):
                costs = with_parameter_gathers(
                    costs, reduction, par.dp_overlap, partition, reduction
                )
                reduction = (0.0,) * len(reduction)
            else:  # torch.distributed.pipelining: one reduce-scatter, at REDUCE_GRAD
                costs = with_parameter_gathers(costs, reduction, par.dp_overlap, partition)
    if schedule.has_reduce_grad_posts:  # torch's REDUCE_GRAD posts place them, stage
        return _at_reduce_grad_posts(schedule, costs, reduction, optimizer, stages_on), None
    tail = []
    for stages in stages_on:
        exposed = exposed_data_parallel_ms(
            sum(reduction[k] for k in stages),
            sum(compute.forward_ms[k] for k in stages),
            sum(compute.backward_ms[k] for k in stages),
            par.dp_overlap,
            gather_weights=par.zero_stage < 3,
        )
        tail.append(sum(optimizer[k] for k in stages) + exposed)
    return costs, (tuple(tail) if any(tail) else None)


def _reduces_every_backward(schedule: Schedule) -> bool:
    """Whether ZeRO reduce-scatters the gradients after every backward: without a pipeline
    (one device, no torch posts) FSDP (torchtitan) and DeepSpeed do; under a pipelining
    runtime gradients accumulate unsharded until the step's one reduction (REDUCE_GRAD)."""
    return schedule.devices == 1 and not schedule.posts


def _at_reduce_grad_posts(
    schedule: Schedule,
    costs: Costs,
    reduction: tuple[float, ...],
    optimizer: tuple[float, ...],
    stages_on: list[list[int]],
) -> Costs:
    """Costs for torch's lowered form, whose REDUCE_GRAD posts place each stage's gradient
    reduction (``Costs.reduce_grad_ms``) and leave the engine no end-of-step tail. torch
    steps the optimizer after the schedule, once a rank's last reduction is done, so each
    device's optimizer steps join the last REDUCE_GRAD it posts."""
    times = list(reduction)
    for device, placed in enumerate(schedule.posts):
        reductions = [post.stage for _, post in placed if post.kind == REDUCE_GRAD]
        if reductions:
            last = schedule.model_stage(reductions[-1])
            times[last] += sum(optimizer[k] for k in stages_on[device])
    return replace(costs, reduce_grad_ms=tuple(times))


def _model_and_partition(
    spec: ScenarioSpec,
    stages: int,
    source: str,
    loads_of: Callable[[TransformerModel], tuple[int, int, int]] | None = None,
) -> tuple[TransformerModel, tuple[int, ...]]:
    """The scenario's model and its layers split over ``stages``; ``"balanced"`` equalises
    ``loads_of(model)`` (``partition_layers``'s ``loads``), by default FLOPs."""
    m = spec.model
    try:
        model = TransformerModel(
            layers=m.layers,
            hidden=m.hidden,
            heads=m.heads,
            seq_len=m.seq_len,
            vocab=m.vocab,
            ffn_hidden=m.ffn_hidden,
            kv_heads=m.kv_heads,
            mlp=m.mlp,
            dtype_bytes=DTYPE_BYTES[m.dtype],
            recompute=m.recompute,
            tied_embeddings=m.tied_embeddings,
            flash_attention=m.flash_attention,
        )
        balanced = loads_of is not None and m.partition == "balanced"
        return model, partition_layers(
            model, stages, m.partition, loads=loads_of(model) if balanced else None
        )
    except ValueError as exc:
        raise ScenarioError(f"{source}: model: {exc}") from None
