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

from dataclasses import dataclass

from pipesim.cluster.hardware import UnknownProfileError, build_topology, gpu_profile, link_profile
from pipesim.cluster.model import (
    Efficiency,
    TransformerModel,
    data_parallel_allreduce_ms,
    partition_layers,
    stage_costs,
)
from pipesim.cluster.parallel import data_parallel_link
from pipesim.cluster.transformer import model_flops_per_step, static_memory
from pipesim.scenario.schema import LinkSpec, ScenarioError, ScenarioSpec
from pipesim.schedules.ir import Schedule
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
        return Link(choice.latency_us, choice.bandwidth_gbps, "custom")
    if choice == "ideal":
        return IDEAL
    try:
        return link_profile(choice, variant)
    except UnknownProfileError as exc:
        raise ScenarioError(f"{source}: hardware.{field}: {exc}") from None


def topology(spec: ScenarioSpec, devices: int, source: str) -> Topology:
    """One link for every pair, or a cluster of nodes when ``gpus_per_node`` is given.

    With tensor parallelism t and data parallelism n laid out as Megatron-LM does (tensor
    ranks innermost, then data, then pipeline), pipeline device d's first GPU is
    ``d * t * n``, so it sits on node ``d * t * n // gpus_per_node``.
    """
    hw, par = spec.hardware, spec.parallel
    variant = hw.link_variant
    link = _link(hw.link, variant, "link", source)
    if hw.gpus_per_node is None and hw.pcie_switch_share is None and hw.placement is None:
        for name in ("intra_node_link", "inter_node_link"):
            if getattr(hw, name) is not None:
                raise ScenarioError(f"{source}: hardware.{name}: needs hardware.gpus_per_node")
        return Topology(devices, default=link, comm_overlap=hw.comm_overlap)
    per_node = hw.gpus_per_node or devices * par.tensor * par.data
    intra = _link(hw.intra_node_link, variant, "intra_node_link", source) or link
    inter = _link(hw.inter_node_link, variant, "inter_node_link", source) or link
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
        )
    except ValueError as exc:
        raise ScenarioError(f"{source}: hardware: {exc}") from None


def model_costs(
    spec: ScenarioSpec, schedule: Schedule, topo: Topology, microbatch_size: int, source: str
) -> ModelCosts:
    """Costs, all-reduce tail and accounting for a scenario with a ``model`` section."""
    m, hw, par = spec.model, spec.hardware, spec.parallel
    if hw.gpu is None:
        raise ScenarioError(f"{source}: hardware.gpu: required with a model section")
    gpu = gpu_profile(hw.gpu)
    try:
        model = TransformerModel(
            layers=m.layers,
            hidden=m.hidden,
            heads=m.heads,
            seq_len=m.seq_len,
            vocab=m.vocab,
            ffn_hidden=m.ffn_hidden,
            dtype_bytes=DTYPE_BYTES[m.dtype],
            recompute=m.recompute,
            tied_embeddings=m.tied_embeddings,
            flash_attention=m.flash_attention,
        )
        partition = partition_layers(model, schedule.model_stages, m.partition)
    except ValueError as exc:
        raise ScenarioError(f"{source}: model: {exc}") from None
    intra = _link(hw.intra_node_link, hw.link_variant, "intra_node_link", source) or topo.default
    efficiency = Efficiency(
        m.efficiency.max_fraction, m.efficiency.half_tokens, m.efficiency.launch_overhead_ms
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
    )
    stages_on = [
        [s for s in range(schedule.stages) if schedule.placement[s] == d]
        for d in range(schedule.devices)
    ]
    static = static_memory(model, partition, par.data, par.zero_stage, par.tensor)
    static_per_device = tuple(
        sum(static[schedule.model_stage(s)].total_bytes for s in stages) for stages in stages_on
    )
    tail = None
    if par.data > 1:
        inter = (
            _link(hw.inter_node_link, hw.link_variant, "inter_node_link", source) or topo.default
        )
        per_node = hw.gpus_per_node or schedule.devices * par.tensor * par.data
        link = data_parallel_link(par.tensor, par.data, per_node, intra, inter)
        per_stage = data_parallel_allreduce_ms(model, partition, par.data, link, par.tensor)
        tail = tuple(
            sum(per_stage[schedule.model_stage(s)] for s in stages) for stages in stages_on
        )
    gpus = schedule.devices * par.tensor * par.data
    global_batch = schedule.microbatches * microbatch_size * par.data
    accounting = Accounting(
        static_memory_bytes=static_per_device,
        memory_capacity_bytes=gpu.memory_bytes,
        replicas=par.data,
        flops_per_step=model_flops_per_step(model, global_batch),
        peak_flops=gpu.peak_tflops * 1e12 * gpus,
    )
    return ModelCosts(costs, accounting, tail)
