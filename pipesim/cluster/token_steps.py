"""Token generation through a pipeline: the costs of every token step, from a ``Job``.

A decode schedule (``pipesim.schedules.decode``) runs token step ``t`` on device ``s`` as
virtual stage ``t p + s``. From the job's model, GPU and tensor parallelism, step 0 is the
prefill of ``b`` prompts of ``prompt_tokens`` tokens and step ``t`` a decode step of ``b``
sequences at context ``prompt_tokens + t``, both as ``pipesim.cluster.inference`` costs
them, the hidden states of every token crossing each boundary; the last device sends only
the sampled token ids back to device 0 (``b`` int64 values). Static memory is the weights
and the KV cache of every sequence at its final length.
"""

from __future__ import annotations

from pipesim.cluster.inference import (
    TOKEN_ID_BYTES,
    BatchShape,
    kv_cache_bytes_per_token,
    stage_boundary_bytes,
    stage_iteration_flops,
    stage_iteration_ms,
)
from pipesim.cluster.job import Job
from pipesim.cluster.job_costs import split_layers
from pipesim.cluster.static_memory import static_memory
from pipesim.cluster.transformer import TransformerModel
from pipesim.schedules.ir import Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.metrics import Accounting


def token_step_messages(
    forward: list[float], sent: list[float], p: int, group_size: int, overhead_ms: float
) -> Costs:
    """Forward-only costs of the ``p * T`` virtual stages of a decode schedule from their
    durations and boundary bytes; the last device's message is the sampled token ids."""
    token_ids = float(group_size * TOKEN_ID_BYTES)
    sent = [token_ids if (s + 1) % p == 0 else b for s, b in enumerate(sent)]
    zeros = (0.0,) * len(forward)
    return Costs(
        forward_ms=tuple(forward),
        backward_ms=zeros,
        backward_input_ms=zeros,
        backward_weight_ms=zeros,
        activation_bytes=tuple(sent),
        activation_memory_bytes=zeros,
        weight_grad_memory_bytes=zeros,
        overhead_ms=overhead_ms,
    )


def token_step_costs(
    job: Job, schedule: Schedule, tokens: int, prompt_tokens: int
) -> tuple[Costs, Accounting]:
    """Costs of every token step of a decode schedule (``pipesim.schedules.decode``) and
    its accounting, for groups of ``job.batch.microbatch_size`` requests that each
    generate ``tokens`` tokens after a prompt of ``prompt_tokens`` (module docstring)."""
    par, gpu, group_size = job.parallel, job.hardware.gpu, job.batch.microbatch_size
    p, steps, prompt = schedule.devices, tokens, prompt_tokens
    model, partition = job.model, split_layers(job, p)
    intra, _ = job.hardware.node_links()
    efficiency = job.efficiency
    tp_link = intra if par.tensor > 1 else None
    forward, sent, group_flops = [], [], 0.0
    for step in range(steps):
        shape = _step_shape(step, group_size, prompt)
        emitting = group_size if step == 0 else 0
        for s, layers in enumerate(partition):
            forward.append(
                stage_iteration_ms(
                    model,
                    layers,
                    gpu,
                    shape,
                    first=s == 0,
                    last=s == p - 1,
                    tensor=par.tensor,
                    tensor_link=tp_link,
                    efficiency=efficiency,
                    emitting=emitting,
                )
            )
            sent.append(stage_boundary_bytes(model, shape))
            group_flops += sum(
                stage_iteration_flops(model, layers, shape, last=s == p - 1, emitting=emitting)
            )
    costs = token_step_messages(forward, sent, p, group_size, 0.0)
    groups = schedule.microbatches
    # the last sampled token is never run through the model: its key and value are not kept
    final_context = prompt + steps - 1
    static = _static_memory(model, partition, par.tensor, groups * group_size, final_context)
    accounting = Accounting(
        static_memory_bytes=static,
        memory_capacity_bytes=gpu.memory_bytes,
        runtime_memory_bytes=job.hardware.runtime_bytes,
        fragmentation=job.hardware.fragmentation,
        memory_headroom=job.hardware.memory_headroom,
        # MFU counts what the costs run: every step's layers, its attention over the
        # context so far, and the LM head where a token is sampled
        flops_per_step=group_flops * groups,
        peak_flops=gpu.peak_tflops * 1e12 * p * par.tensor,
    )
    return costs, accounting


def _step_shape(step: int, group_size: int, prompt: int) -> BatchShape:
    """Step 0: the group's prompts; step t: one token per sequence at context prompt + t."""
    if step == 0:
        return BatchShape(
            prefill_tokens=group_size * prompt, prefill_attention=group_size * prompt * prompt
        )
    return BatchShape(decode_seqs=group_size, decode_context=group_size * (prompt + step))


def _static_memory(
    model: TransformerModel,
    partition: tuple[int, ...],
    tensor: int,
    sequences: int,
    final_context: int,
) -> tuple[float, ...]:
    """Static memory per device: its weights and the KV cache of every sequence at its
    final length (the prompt and every token but the last), for its layers."""
    weights = static_memory(model, partition, tensor=tensor, training=False)
    kv_per_layer = kv_cache_bytes_per_token(model, tensor) / model.layers
    return tuple(
        w.total_bytes + layers * kv_per_layer * final_context * sequences
        for w, layers in zip(weights, partition, strict=True)
    )


__all__ = ["token_step_costs", "token_step_messages"]
