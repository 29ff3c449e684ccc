"""A job's stage costs: from one ``Job`` (``pipesim.cluster.job``) to what the engine needs.

``split_layers`` cuts the model into the schedule's stages; ``model_costs`` gives every
stage's durations and sizes from the transformer's FLOPs and the GPU, each device's
end-of-step work (optimizer step and data-parallel gradient reduction), static memory and
the MFU inputs. Every problem is a ``JobError`` naming the part of the job.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipesim.cluster.context_parallel import context_link, local_model
from pipesim.cluster.expert_parallel import (
    ExpertParallelCosts,
    buffer_bytes,
    expert_parallel_costs,
    expert_sharding,
    expert_split,
    with_all_to_all,
)
from pipesim.cluster.job import Job, JobError
from pipesim.cluster.model import (
    TransformerModel,
    is_layout,
    partition_layers,
    stage_costs,
    time_loads,
)
from pipesim.cluster.moe_parts import moe_stage_parts
from pipesim.cluster.pass_time import (
    TensorParallel,
    exposed_data_parallel_ms,
    optimizer_step_ms,
    with_parameter_gathers,
)
from pipesim.cluster.replica_comms import (
    gradient_group,
    gradient_reduction_ms,
    zero3_unit_collectives,
)
from pipesim.cluster.static_memory import static_memory
from pipesim.cluster.transformer import model_flops_per_step
from pipesim.schedules.ir import Schedule
from pipesim.schedules.posts import REDUCE_GRAD, UNSHARD
from pipesim.sim.costs import Costs
from pipesim.sim.metrics import Accounting


@dataclass(frozen=True, slots=True)
class ModelCosts:
    costs: Costs
    accounting: Accounting
    tail_ms: tuple[float, ...] | None
    optimizer_ms: tuple[float, ...] | None = None  # the optimizer step's part of tail_ms
    expert_parallel: ExpertParallelCosts | None = None  # MoE: all-to-alls, loads (in costs)


def split_layers(job: Job, stages: int, by_time: bool = False) -> tuple[int, ...]:
    """The job's layers split over ``stages`` (``partition_layers``). ``"balanced"``
    equalises FLOPs, or with ``by_time`` stage times (``time_loads``: the memory-bound work
    and the tensor-parallel setting counted, as training runs them)."""
    model, par = _model(job), job.parallel
    try:
        loads = None
        if by_time and job.partition == "balanced":
            tp = TensorParallel(
                par.tensor,
                0.0,  # "balanced" balances stage times, TP communication aside
                par.sequence_parallel,
                par.tp_overlap,
                job.efficiency.tensor_overlap_fraction,
            )
            size = job.batch.microbatch_size
            local = local_model(model, par.context)  # what one context rank runs
            loads = time_loads(local, size, job.hardware.gpu, job.efficiency, tp, expert_split(job))
        return partition_layers(model, stages, job.partition, loads=loads)
    except ValueError as exc:
        field = "model.pipeline_layout" if is_layout(job.partition) else "model"
        raise JobError(field, str(exc)) from None


def model_costs(job: Job, schedule: Schedule) -> ModelCosts:
    """Costs, end-of-step tail and accounting of a job with a model, run by ``schedule``
    (``job.batch.microbatch_size`` samples per microbatch).

    The tail of each device is its optimizer step plus the data-parallel gradient
    reduction it waits for (``_step_tail``). Forward-only (``job.training`` False,
    inference) counts forward FLOPs for MFU, keeps the weights only in static memory (no
    gradients, no optimizer states) and has no tail. A MoE model's expert parallelism
    (``pipesim.cluster.expert_parallel``) adds its all-to-alls to the passes, its buffers
    to the peak memory, and keeps both by name (``ModelCosts.expert_parallel``).
    """
    par, size, gpu = job.parallel, job.batch.microbatch_size, job.hardware.gpu
    if gpu is None:
        raise JobError("hardware.gpu", "required with a model section")
    partition = split_layers(job, schedule.model_stages, by_time=True)
    model = _model(job)
    costs, experts = _pass_costs(job, schedule, partition)
    stages_on: list[list[int]] = [[] for _ in range(schedule.devices)]
    for stage, device in enumerate(schedule.placement):
        stages_on[device].append(schedule.model_stage(stage))
    static = static_memory(
        model,
        partition,
        gradient_group(job),
        par.zero_stage,
        par.tensor,
        job.training,
        pipelined=not _reduces_every_backward(schedule),
        optimizer=par.optimizer,
        experts=expert_sharding(job, partition),
    )
    tail = optimizer = None
    if job.training:
        costs, tail, optimizer = _step_tail(job, schedule, partition, costs, stages_on)
    global_batch = schedule.microbatches * size * par.data
    accounting = Accounting(
        static_memory_bytes=tuple(sum([static[k].total_bytes for k in s]) for s in stages_on),
        memory_capacity_bytes=gpu.memory_bytes,
        runtime_memory_bytes=job.hardware.runtime_bytes,
        fragmentation=job.hardware.fragmentation,
        memory_headroom=job.hardware.memory_headroom,
        replicas=par.data,
        flops_per_step=model_flops_per_step(model, global_batch, forward_only=not job.training),
        peak_flops=gpu.peak_tflops * 1e12 * schedule.devices * par.tensor * gradient_group(job),
        transient_bytes=buffer_bytes(experts, stages_on),
    )
    return ModelCosts(costs, accounting, tail, optimizer, experts)


def _pass_costs(
    job: Job, schedule: Schedule, partition: tuple[int, ...]
) -> tuple[Costs, ExpertParallelCosts | None]:
    """Every stage's passes (``pipesim.cluster.model.stage_costs``) with its expert-parallel
    all-to-alls in them and, under expert parallelism, their sub-layer parts
    (``pipesim.cluster.moe_parts``), and those all-to-alls by name."""
    hw, par = job.hardware, job.parallel
    intra, inter = hw.node_links()
    per_node = job.gpus_per_node(schedule.devices)
    costs = stage_costs(
        _model(job),
        partition,
        job.batch.microbatch_size,
        hw.gpu,
        job.efficiency,
        tensor=par.tensor,
        tensor_link=intra if par.tensor > 1 else None,
        sequence_parallel=par.sequence_parallel,
        tensor_overlap=par.tp_overlap,
        context=par.context,
        context_mode=par.context_mode,
        context_link=context_link(par.tensor, par.context, per_node, intra, inter),
        scatter_gather=par.pipeline_scatter_gather,
        expert_split=expert_split(job),
    )
    experts = expert_parallel_costs(job, schedule.devices, partition)
    exposed = with_all_to_all(costs, experts)
    parts = moe_stage_parts(_model(job), partition, job.batch.microbatch_size, costs, experts)
    return (exposed if parts is None else replace(exposed, moe_parts=parts)), experts


def _model(job: Job) -> TransformerModel:
    if job.model is None:
        raise ValueError("the job has no model")
    return job.model


def _step_tail(
    job: Job,
    schedule: Schedule,
    partition: tuple[int, ...],
    costs: Costs,
    stages_on: list[list[int]],
) -> tuple[Costs, tuple[float, ...] | None, tuple[float, ...] | None]:
    """Each device's end-of-step work and the optimizer step's part of it: optimizer step and
    exposed gradient reduction (NCCL's all-reduce over the replicas, in buckets, level by level as the fabric places them: ``pipesim.cluster.replica_comms``). With
    torch's REDUCE_GRAD posts in the schedule, the reduction goes to them, stage by stage,
    and the optimizer step with them (``_at_reduce_grad_posts``). Under ZeRO-3 every
    forward and backward also gathers its stage's parameters over the same group, layer by
    layer (``pipesim.cluster.replica_comms``), charged to the stage costs
    (``with_parameter_gathers``), or, in torch's lowered form, to its UNSHARD posts (on the
    gather stream), and the step's reduction is the layer-by-layer reduce-scatter; without
    a pipeline every backward reduce-scatters its own gradients, and nothing is left for
    the end of the step. Overlapped communication slows what it hides under by
    ``Efficiency.overlap_slowdown``."""
    par, model, slowdown = job.parallel, _model(job), job.efficiency.overlap_slowdown
    group = gradient_group(job)
    optimizer = optimizer_step_ms(
        model,
        partition,
        job.hardware.gpu,
        job.efficiency,
        group,
        par.zero_stage,
        par.tensor,
        optimizer=par.optimizer,
        experts=expert_sharding(job, partition),
    )
    reduction, compute = (0.0,) * len(partition), costs  # compute: before any gathers
    if group > 1 and par.zero_stage < 3:
        reduction = gradient_reduction_ms(job, schedule, partition)
    elif group > 1:
        costs, reduction = _zero3_costs(job, schedule, partition, costs)
    if schedule.has_reduce_grad_posts:  # torch's REDUCE_GRAD posts place them, stage
        return _at_reduce_grad_posts(schedule, costs, reduction, optimizer, stages_on), None, None
    tail, steps = [], []
    forward, backward = compute.forward_ms, compute.backward_ms
    for stages in stages_on:  # sums over lists: the same additions, in the same order
        exposed = exposed_data_parallel_ms(
            sum([reduction[k] for k in stages]),
            sum([forward[k] for k in stages]),
            sum([backward[k] for k in stages]),
            par.dp_overlap,
            gather_weights=par.zero_stage < 3,
            slowdown=slowdown,
        )
        steps.append(sum([optimizer[k] for k in stages]))
        tail.append(steps[-1] + exposed)
    if not any(tail):
        return costs, None, None
    return costs, tuple(tail), tuple(steps)


def _zero3_costs(
    job: Job, schedule: Schedule, partition: tuple[int, ...], costs: Costs
) -> tuple[Costs, tuple[float, ...]]:
    """ZeRO-3's stage costs and the reduction left for the end of the step: every pass
    gathers its weights, unit by unit, and the gradients are reduce-scattered unit by unit
    too, at the end of the step or after every backward (then nothing is left for it)."""
    overlap, slowdown = job.parallel.dp_overlap, job.efficiency.overlap_slowdown
    gathers, reduction, units = zero3_unit_collectives(job, schedule, partition)
    if any(post.kind == UNSHARD for placed in schedule.posts for _, post in placed):
        return replace(costs, unshard_ms=gathers), reduction  # torch's posts say where
    if _reduces_every_backward(schedule):
        costs = with_parameter_gathers(costs, gathers, overlap, units, reduction, slowdown=slowdown)
        return costs, (0.0,) * len(reduction)
    # torch.distributed.pipelining: one reduce-scatter, at REDUCE_GRAD
    return with_parameter_gathers(costs, gathers, overlap, units, slowdown=slowdown), reduction


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
    device's optimizer steps join the last REDUCE_GRAD it posts (``Costs.optimizer_ms``)."""
    steps = [0.0] * len(reduction)
    for device, placed in enumerate(schedule.posts):
        reductions = [post.stage for _, post in placed if post.kind == REDUCE_GRAD]
        if reductions:
            last = schedule.model_stage(reductions[-1])
            steps[last] += sum(optimizer[k] for k in stages_on[device])
    return replace(costs, reduce_grad_ms=tuple(reduction), optimizer_ms=tuple(steps))


__all__ = ["ModelCosts", "model_costs", "split_layers"]
