"""What the data-parallel replicas send each other at the end of a step, per stage.

The gradients of each stage are all-reduced over the replicas that hold the same weights
(``gradient_reduction_ms``), level by level as the fabric places them; under ZeRO-3 every
pass gathers its weights and the gradients are reduce-scattered, one layer at a time
(``zero3_unit_collectives``). Both read only the model, the split of its layers, the
parallel sizes and the hardware, so a planner's candidates that differ in anything else
(the batch, the ZeRO stage's memory, overlap settings) share one result: each is
remembered by value (``pipesim.cluster.memo``).
"""

from __future__ import annotations

import math
from dataclasses import replace

from pipesim.cluster.collectives import Collective, Group, collective_ms
from pipesim.cluster.expert_parallel import dense_parameters, expert_data_span, expert_sharding
from pipesim.cluster.fabric import Fabric, GroupSpan, allreduce_levels, group_span
from pipesim.cluster.job import Job
from pipesim.cluster.memo import by_value
from pipesim.cluster.model import TransformerModel, data_parallel_allreduce_ms
from pipesim.cluster.parallel import megatron_bucket_params
from pipesim.cluster.transformer import stage_layer_groups, stage_parameters
from pipesim.schedules.ir import Schedule


def gradient_group(job: Job) -> int:
    """The ranks that hold one stage's same weights and reduce (and ZeRO-shard) its
    gradients: data x context (Megatron-LM's data-parallel group with context parallelism)."""
    return job.parallel.data * job.parallel.context


def _model(job: Job) -> TransformerModel:
    if job.model is None:
        raise ValueError("the job has no model")
    return job.model


def gradient_reduction_ms(
    job: Job, schedule: Schedule, partition: tuple[int, ...]
) -> tuple[float, ...]:
    """Each stage's data-parallel gradient all-reduce over Megatron-LM's data-parallel
    group with context parallelism: every context rank of every replica (they saw
    different tokens), ``_reduction_over`` its span. Under expert parallelism the routed
    experts' gradients are reduced apart, over each expert's own replicas (Megatron-Core's
    expert data-parallel group), and the rest over data x context.

    It reads neither the batch nor how communication overlaps compute, so the jobs that
    differ only in those share one (``_reduction_of``, remembered by value)."""
    par = job.parallel
    alike = replace(par, dp_overlap=False, tp_overlap=False, sequence_parallel=False)
    return _reduction_of(replace(job, batch=None, parallel=alike), schedule.devices, partition)


@by_value  # a planner asks again for every candidate that shares it
def _reduction_of(job: Job, devices: int, partition: tuple[int, ...]) -> tuple[float, ...]:
    """``gradient_reduction_ms`` of a job on ``devices`` pipeline stages."""
    span = group_span(job.rank_layout(devices), "cp", "dp")
    sharding = expert_sharding(job, partition)
    if sharding is None:
        return _reduction_over(job, span, partition, job.parallel.tensor)
    dense = dense_parameters(_model(job), partition, sharding)
    experts_span = expert_data_span(job, devices)
    return tuple(
        a + b
        for a, b in zip(
            _reduction_over(job, span, partition, job.parallel.tensor, dense),
            _reduction_over(job, experts_span, partition, sharding.tensor, sharding.local),
            strict=True,
        )
    )


def _reduction_over(
    job: Job,
    span: GroupSpan,
    partition: tuple[int, ...],
    tensor: int,
    parameters: tuple[float, ...] | None = None,
) -> tuple[float, ...]:
    """The all-reduce of each stage's gradients (``parameters``, split ``tensor`` ways;
    None: all of the stage's) over the group ``span`` places, level by level
    (``pipesim.cluster.fabric.allreduce_levels``): a ring inside one node; across nodes,
    reduced inside each node first when a node holds several replicas, then across the
    group's nodes of a pod, then across pods at the bandwidth the fabric leaves above them.
    Each level is one ``data_parallel_allreduce_ms`` over its ranks and link, of the share
    of the gradients each GPU holds there (the bytes of ``tensor * share`` GPUs' split)."""
    model, hw = _model(job), job.hardware
    intra, inter = hw.node_links()
    if not span.crosses_pods:  # in one node, or in one pod: NVLink, then the network
        sharing = span.per_node if span.crosses_nodes else 1
        return data_parallel_allreduce_ms(
            model,
            partition,
            span.ranks,
            inter if span.crosses_nodes else intra,
            tensor,
            ranks_per_node=sharing,
            intra_node_link=intra,
            parameters=parameters,
        )
    total = [0.0] * len(partition)
    for level in allreduce_levels(span, intra, inter, hw.fabric or Fabric()):
        part = data_parallel_allreduce_ms(  # each bucket of the whole group, level by level
            model,
            partition,
            level.ranks,
            level.link,
            tensor * level.share,
            bucket_params=megatron_bucket_params(span.ranks) / level.share,
            parameters=parameters,
        )
        total = [t + p for t, p in zip(total, part, strict=True)]
    return tuple(total)


def zero3_unit_collectives(
    job: Job, schedule: Schedule, partition: tuple[int, ...]
) -> tuple[tuple[float, ...], tuple[float, ...], tuple[int, ...]]:
    """ZeRO-3's all-gather and reduce-scatter per stage, and the units each is issued in.

    FSDP (one unit per transformer block, as torchtitan and Megatron-FSDP wrap them) and
    DeepSpeed's ZeRO-3 (one fetch per submodule) gather and reduce-scatter one layer at a
    time, so a stage of ``L`` layers issues ``L`` collectives of one layer's weights (its
    ``1 / tensor`` share), each paying its own latency, plus one for the embedding or the LM
    head it holds. The group is the stage's data-parallel replicas, placed as for the
    gradient reduction (tensor ranks innermost: in one node, or ``gcd`` of them to a node)."""
    (intra, inter), per_node = job.hardware.node_links(), job.gpus_per_node(schedule.devices)
    group = (gradient_group(job), intra, inter, per_node)
    return _unit_collectives(_model(job), partition, job.parallel.tensor, group)


@by_value  # a planner asks again for every candidate that shares it
def _unit_collectives(
    model: TransformerModel, partition: tuple[int, ...], tensor: int, placed: tuple
) -> tuple[tuple[float, ...], tuple[float, ...], tuple[int, ...]]:
    """``zero3_unit_collectives`` of ``model`` split ``tensor`` ways, over the group
    ``placed``: (ranks, link inside a node, link between nodes, GPUs per node)."""
    ranks, intra, inter, per_node = placed
    inside = tensor * ranks <= per_node
    sharing = ranks if inside else math.gcd(ranks, max(per_node // tensor, 1))
    group = Group(ranks, intra, inter, sharing)
    layer_groups = stage_layer_groups(model, partition)  # (count, parameters) per kind

    def unit_bytes(params: float) -> float:
        return params / tensor * model.dtype_bytes

    def per_stage(kind: Collective) -> tuple[float, ...]:
        return tuple(
            sum((n * collective_ms(kind, unit_bytes(each), group) for n, each in kinds), 0.0)
            + (collective_ms(kind, extra, group) if extra > 0 else 0.0)
            for kinds, extra in zip(layer_groups, extras, strict=True)
        )

    extras = [  # the embedding's and the LM head's bytes, counted in whole parameters
        unit_bytes(params - sum(n * each for n, each in kinds))
        for kinds, params in zip(layer_groups, stage_parameters(model, partition), strict=True)
    ]
    units = tuple(
        max(sum(n for n, _ in kinds) + (extra > 0), 1)
        for kinds, extra in zip(layer_groups, extras, strict=True)
    )
    return per_stage(Collective.ALL_GATHER), per_stage(Collective.REDUCE_SCATTER), units


__all__ = ["gradient_group", "gradient_reduction_ms", "zero3_unit_collectives"]
