"""What one inference iteration costs on one pipeline stage.

An iteration of a serving engine (or one token step of a static decode pipeline) runs a
batch through every stage once. What it costs depends only on the batch's shape
(``pipesim.cluster.inference_costs.BatchShape``): how many prompt tokens it computes
(prefill, compute bound) and how many sequences it extends by one token (decode, usually
bound by the bytes it reads: the stage's weights and the KV cache of every sequence).

Time follows kernel by kernel (``stage_iteration_ms``): each GEMM by its shape or its weight
reads (``pipesim.cluster.inference_gemms``), the attention by its FLOPs or its KV reads
(``pipesim.cluster.inference_attention``: grouped-query or multi-head latent attention), a
MoE layer's routed experts by the experts the batch touches
(``pipesim.cluster.inference_moe``), a fixed cost per kernel, with tensor parallelism two
all-reduces per layer as NCCL runs them (``pipesim.cluster.parallel
.tensor_parallel_comm_ms``, as in training), and with expert parallelism each MoE layer's
dispatch and combine all-to-alls. ``pipesim.cluster.inference_roofs`` holds the two-roof
model (``ROOFLINE``) and the FLOP and byte counts; ``pipesim.cluster.inference_memory``
the KV cache's capacity.
"""

from __future__ import annotations

import functools

from pipesim.cluster.efficiency import step_gemm_fraction
from pipesim.cluster.hardware import GpuProfile, gpu_profile
from pipesim.cluster.inference_attention import (
    decode_pair_flops,
    kv_bytes_per_token_per_layer,
    kv_cache_bytes_per_token,
    kv_heads_per_rank,
    prefill_pair_flops,
)
from pipesim.cluster.inference_costs import (
    ACHIEVABLE_BANDWIDTH_FRACTION,
    DECODE_KERNELS_PER_LAYER,
    GRAPH_KERNEL_OVERHEAD_US,
    KERNEL_OVERHEAD_US,
    MOE_EXTRA_KERNELS_PER_LAYER,
    PREFILL_ATTENTION_FRACTION,
    ROOFLINE,
    TOKEN_ID_BYTES,
    BatchShape,
    ServingCosts,
    StageSlice,
)
from pipesim.cluster.inference_gemms import linear_layers_ms, lm_head_ms
from pipesim.cluster.inference_memory import kv_capacity_tokens
from pipesim.cluster.inference_moe import (
    expert_all_to_all_ms,
    experts_tensor,
    routed_experts_ms,
    stage_layer_kinds,
)
from pipesim.cluster.inference_roofs import stage_iteration_flops, stage_read_bytes, two_roofs_ms
from pipesim.cluster.model import Efficiency
from pipesim.cluster.parallel import tensor_parallel_comm_ms
from pipesim.cluster.transformer import TransformerModel
from pipesim.sim.links import Link


def stage_iteration_ms(
    model: TransformerModel,
    layers: int,
    gpu: GpuProfile | str,
    shape: BatchShape,
    *,
    first: bool,
    last: bool,
    tensor: int = 1,
    tensor_link: Link | None = None,
    efficiency: Efficiency | None = None,
    emitting: int = 0,
    serving: ServingCosts | None = None,
    start: int = 0,
    expert: int = 1,
) -> float:
    """Time (ms) of one iteration of a batch of ``shape`` through a stage of ``layers``
    layers (from the model's layer ``start``) on ``gpu``, split over ``tensor`` GPUs, a MoE
    layer's routed experts over ``expert`` of them (``expert`` divides ``tensor``).

    A GPU's kernels run one by one, each at the longer of its math and its reads: every
    linear layer's GEMM over all the batch's tokens (``pipesim.cluster.inference_gemms``;
    a MoE layer's routed experts as grouped GEMMs over the experts the batch touches,
    ``routed_experts_ms``; the LM head on the last stage over the tokens that sample), a
    prefill's attention at ``serving.attention_fraction`` of the peak on the work a causal
    flash kernel does, a decode step's attention at the longer of its FLOPs and its KV
    reads. A small decode step thus costs its reads, a long prompt its math. On top: the
    fixed cost of every kernel (``serving.kernel_overhead_ms``), with ``tensor > 1`` two
    all-reduces per layer over ``tensor_link`` (``tensor_parallel_comm_ms``), with
    ``expert > 1`` each MoE layer's dispatch and combine over it
    (``expert_all_to_all_ms``), and ``efficiency.launch_overhead_ms``. With
    ``serving.gemm_shapes`` False (``ROOFLINE``) the stage pays the longer of its compute
    and all its reads (``two_roofs_ms``) instead.

    ``first`` marks the stage holding the embedding (a lookup: no FLOPs counted), ``last``
    the one holding the LM head, computed for every decoding sequence and for ``emitting``
    prompts that finish this iteration. ``serving`` None takes the calibrated
    ``ServingCosts()``.
    """
    gpu = gpu_profile(gpu) if isinstance(gpu, str) else gpu
    efficiency = Efficiency() if efficiency is None else efficiency
    serving = ServingCosts() if serving is None else serving
    del first  # the embedding lookup costs no FLOPs worth counting
    if tensor > 1 and tensor_link is None:
        raise ValueError(f"tensor parallelism ({tensor=}) needs tensor_link, the intra-node link")
    experts_tensor(tensor, expert)  # expert parallelism must divide the stage's GPUs
    if shape.tokens == 0:
        return 0.0
    stage = StageSlice(model, layers, start, gpu, efficiency, serving, tensor, expert)
    if serving.gemm_shapes:
        work_ms = _kernels_ms(stage, shape, last, emitting)
    else:
        work_ms = two_roofs_ms(stage, shape, last=last, emitting=emitting)
    overhead_ms = efficiency.launch_overhead_ms + serving.kernel_overhead_ms(
        layers, decode_only=not shape.prefill_tokens, moe_layers=stage.moe_layers
    )
    return work_ms + overhead_ms + _communication_ms(stage, shape.tokens, tensor_link)


# An iteration's GEMMs and collectives depend on its token count alone, which repeats from
# one iteration to the next: both are kept per (stage, tokens), as pipesim.cluster.gemm
# keeps its GEMMs.
@functools.lru_cache(maxsize=1 << 14)
def _communication_ms(stage: StageSlice, tokens: int, link: Link | None) -> float:
    """Each layer's two tensor-parallel all-reduces and each MoE layer's dispatch and
    combine of ``tokens`` tokens, over the stage's intra-node ``link``."""
    total_ms = 0.0
    if stage.tensor > 1:
        message = float(tokens * stage.model.hidden * stage.model.dtype_bytes)
        total_ms += stage.layers * tensor_parallel_comm_ms(message, stage.tensor, link)
    if stage.expert > 1 and stage.moe_layers:
        split = {"tensor": stage.tensor, "expert": stage.expert}
        total_ms += stage.moe_layers * expert_all_to_all_ms(stage.model, tokens, link, **split)
    return total_ms


@functools.lru_cache(maxsize=1 << 14)
def _layer_gemms_ms(stage: StageSlice, tokens: int) -> float:
    """The GEMMs of the stage's layers over ``tokens`` tokens on one GPU (ms): each kind of
    layer's linear layers, and a MoE layer's routed experts."""
    model, gpu, efficiency = stage.model, stage.gpu, stage.efficiency
    kwargs = {"tensor": stage.tensor, "read_bytes_per_s": stage.serving.read_bytes_per_s(gpu)}
    total_ms = 0.0
    for count, view in stage_layer_kinds(model, stage.layers, stage.start):
        total_ms += linear_layers_ms(view, count, tokens, gpu, efficiency, **kwargs)
        if view.moe is not None:
            experts_ms = routed_experts_ms(
                view, tokens, gpu, efficiency, expert=stage.expert, **kwargs
            )
            total_ms += count * experts_ms
    return total_ms


def _kernels_ms(stage: StageSlice, shape: BatchShape, last: bool, emitting: int) -> float:
    """The iteration's GEMMs and attention on one of the stage's ``tensor`` GPUs, each at
    the roof it hits (``stage_iteration_ms``)."""
    model, gpu, efficiency, serving = stage.model, stage.gpu, stage.efficiency, stage.serving
    tensor = stage.tensor
    read = serving.read_bytes_per_s(gpu)
    kwargs = {"tensor": tensor, "read_bytes_per_s": read}
    gemms_ms = _layer_gemms_ms(stage, shape.tokens)
    if last:
        gemms_ms += lm_head_ms(model, emitting + shape.decode_seqs, gpu, efficiency, **kwargs)
    if serving.attention_fraction is None:
        rate = gpu.gemm_tflops * 1e12 * step_gemm_fraction(efficiency, gpu)
    else:
        rate = gpu.peak_tflops * 1e12 * serving.attention_fraction
    layers = stage.layers
    prefill_flops = layers * prefill_pair_flops(model) / tensor * shape.prefill_attention
    prefill_s = prefill_flops * serving.causal_work / rate
    decode_flops = layers * decode_pair_flops(model) / tensor * shape.decode_context
    kv_bytes = layers * kv_bytes_per_token_per_layer(model, tensor) * shape.decode_context
    decode_s = max(decode_flops / rate, kv_bytes / read)
    return gemms_ms + (prefill_s + decode_s) * 1e3


def stage_boundary_bytes(model: TransformerModel, shape: BatchShape) -> float:
    """Activation bytes a batch sends to the next stage: one hidden vector per token,
    ``tokens * h * dtype_bytes``."""
    return float(shape.tokens * model.hidden * model.dtype_bytes)


__all__ = [
    "ACHIEVABLE_BANDWIDTH_FRACTION",
    "DECODE_KERNELS_PER_LAYER",
    "GRAPH_KERNEL_OVERHEAD_US",
    "KERNEL_OVERHEAD_US",
    "MOE_EXTRA_KERNELS_PER_LAYER",
    "PREFILL_ATTENTION_FRACTION",
    "ROOFLINE",
    "TOKEN_ID_BYTES",
    "BatchShape",
    "ServingCosts",
    "StageSlice",
    "kv_cache_bytes_per_token",
    "kv_capacity_tokens",
    "kv_heads_per_rank",
    "stage_boundary_bytes",
    "stage_iteration_flops",
    "stage_iteration_ms",
    "stage_read_bytes",
]
