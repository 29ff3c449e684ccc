"""What one inference iteration costs on one pipeline stage.

An iteration of a serving engine (or one token step of a static decode pipeline) runs a
batch through every stage once. What it costs depends only on the batch's shape: how many
prompt tokens it computes (prefill, compute bound) and how many sequences it extends by
one token (decode, usually bound by the bytes it reads: the stage's weights and the KV
cache of every sequence).

The counts, per layer, with ``h`` the hidden size and ``P`` the layer's weights
(``pipesim.cluster.transformer.layer_parameters``):

* every token through the layer's matrices costs ``2 P`` FLOPs (one multiply-add per
  weight);
* every token attending over a context of ``c`` tokens costs ``4 h c`` FLOPs
  (``QK^T`` and ``scores x V``, all query heads: grouped-query attention shares keys and
  values between heads, not the work);
* every sequence's KV cache holds ``2 kv_heads head_dim`` elements per token per layer
  (keys and values), and a decode step reads all of them.

The stage holding the LM head (the last) adds ``2 h V`` FLOPs per sequence that emits a
token, and reads the ``V h`` head matrix once per iteration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pipesim.cluster.hardware import GpuProfile, gpu_profile
from pipesim.cluster.model import Efficiency, partition_layers
from pipesim.cluster.parallel import tensor_parallel_comm_ms
from pipesim.cluster.transformer import TransformerModel, layer_parameters, stage_parameters
from pipesim.sim.links import Link

TOKEN_ID_BYTES = 8  # a sampled token id travels as one int64 (torch's default index type)


@dataclass(frozen=True, slots=True)
class BatchShape:
    """One iteration's batch, as the cost model sees it.

    ``prefill_tokens``: prompt tokens computed this iteration (whole prompts or chunks).
    ``prefill_attention``: over those chunks, the sum of ``chunk_tokens * context`` where
    ``context`` is the sequence's length at the chunk's end (the attention's work).
    ``decode_seqs``: sequences extended by one token. ``decode_context``: the sum of their
    context lengths (the KV entries the step reads).
    """

    prefill_tokens: int = 0
    prefill_attention: int = 0
    decode_seqs: int = 0
    decode_context: int = 0

    @property
    def tokens(self) -> int:
        """Tokens whose activations cross each stage boundary."""
        return self.prefill_tokens + self.decode_seqs


def kv_heads_per_rank(model: TransformerModel, tensor: int = 1) -> int:
    """Key/value heads each tensor-parallel rank keeps: the heads split over the ranks, but
    never below one (with fewer KV heads than ranks each head is replicated, as Megatron-LM
    and vLLM do)."""
    if tensor < 1:
        raise ValueError(f"tensor must be >= 1, got {tensor=}")
    return max(1, math.ceil(model.kv_head_count / tensor))


def kv_cache_bytes_per_token(model: TransformerModel, tensor: int = 1) -> int:
    """KV-cache bytes one token of context takes on one GPU of a replica, whole model:
    ``2 * layers * kv_heads * head_dim * dtype_bytes`` (keys and values), the heads divided
    among ``tensor`` ranks (``kv_heads_per_rank``). Llama-2-70B in bf16 (80 layers, 8 KV
    heads of 128): 2 * 80 * 8 * 128 * 2 = 327,680 bytes with tensor=1."""
    return model.layers * _kv_bytes_per_token_per_layer(model, tensor)


def _kv_bytes_per_token_per_layer(model: TransformerModel, tensor: int) -> int:
    return 2 * kv_heads_per_rank(model, tensor) * model.head_dim * model.dtype_bytes


def stage_iteration_flops(
    model: TransformerModel, layers: int, shape: BatchShape, *, last: bool, emitting: int
) -> tuple[float, float]:
    """``(prefill FLOPs, decode FLOPs)`` of one iteration on a stage of ``layers`` layers
    (whole stage, before any tensor-parallel split); the LM head, on the last stage, goes
    with the part whose sequences emit: prefill for ``emitting`` finished prompts, decode
    for every decoding sequence."""
    linear = 2 * layer_parameters(model)
    attention = 4 * model.hidden
    prefill = layers * (linear * shape.prefill_tokens + attention * shape.prefill_attention)
    decode = layers * (linear * shape.decode_seqs + attention * shape.decode_context)
    if last:
        head = 2 * model.hidden * model.vocab
        prefill += head * emitting
        decode += head * shape.decode_seqs
    return float(prefill), float(decode)


def stage_read_bytes(
    model: TransformerModel, layers: int, shape: BatchShape, *, last: bool, tensor: int = 1
) -> float:
    """Bytes one GPU of the stage reads from memory in one iteration: its share of the
    layers' weights (and of the LM head on the last stage), plus the KV cache of every
    decoding sequence. The embedding table is only looked up (a row per token), so the
    first stage does not read it whole."""
    weights = layers * layer_parameters(model) + (model.vocab * model.hidden if last else 0)
    weight_bytes = weights * model.dtype_bytes / tensor
    kv_bytes = layers * _kv_bytes_per_token_per_layer(model, tensor) * shape.decode_context
    return weight_bytes + kv_bytes


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
) -> float:
    """Time (ms) of one iteration of a batch of ``shape`` through a stage of ``layers``
    layers on ``gpu``, split over ``tensor`` GPUs.

    A GPU is limited by two roofs: how fast it computes and how fast it reads memory. The
    iteration takes the longer of

    * compute: the prefill FLOPs at the efficiency curve ``efficiency.fraction(prefill
      tokens)`` (thin prompts run small, inefficient matrix multiplications), plus the decode
      FLOPs at ``efficiency.max_fraction`` (a decode step's matrices are as wide as the
      weights; it is its bytes, not its shape, that limit it);
    * memory: the weights and the KV cache the decoding sequences read
      (``stage_read_bytes``) over the GPU's memory bandwidth.

    A pure prefill is thus compute bound, a pure decode step of a small batch is bandwidth
    bound (one batch-1 step of a middle stage takes its weight bytes over the bandwidth), and
    a mixed batch (chunked prefill with decodes) pays its prefill's compute plus its decodes'
    compute, but reads the weights only once. On top come, with ``tensor > 1``, two ring
    all-reduces per layer of the batch's activations (``tensor_parallel_comm_ms`` over
    ``tensor_link``), and ``efficiency.launch_overhead_ms``.

    ``first`` marks the stage holding the embedding (a lookup: no FLOPs counted), ``last``
    the one holding the LM head, computed for every decoding sequence and for ``emitting``
    prompts that finish this iteration (each emits its first token).
    """
    gpu = gpu_profile(gpu) if isinstance(gpu, str) else gpu
    efficiency = Efficiency() if efficiency is None else efficiency
    del first  # the embedding lookup costs no FLOPs worth counting
    if tensor > 1 and tensor_link is None:
        raise ValueError(f"tensor parallelism ({tensor=}) needs tensor_link, the intra-node link")
    if shape.tokens == 0:
        return 0.0
    prefill_flops, decode_flops = stage_iteration_flops(
        model, layers, shape, last=last, emitting=emitting
    )
    peak = gpu.peak_tflops * 1e12
    compute_s = decode_flops / tensor / (peak * efficiency.max_fraction)
    if shape.prefill_tokens:
        compute_s += prefill_flops / tensor / (peak * efficiency.fraction(shape.prefill_tokens))
    memory_s = stage_read_bytes(model, layers, shape, last=last, tensor=tensor) / (
        gpu.memory_bandwidth_gbps * 1e9
    )
    total_ms = max(compute_s, memory_s) * 1e3 + efficiency.launch_overhead_ms
    if tensor > 1:
        message = stage_boundary_bytes(model, shape)
        total_ms += layers * tensor_parallel_comm_ms(message, tensor, tensor_link)
    return total_ms


def stage_boundary_bytes(model: TransformerModel, shape: BatchShape) -> float:
    """Activation bytes a batch sends to the next stage: one hidden vector per token,
    ``tokens * h * dtype_bytes``."""
    return float(shape.tokens * model.hidden * model.dtype_bytes)


def kv_capacity_tokens(
    model: TransformerModel,
    gpu: GpuProfile | str,
    *,
    tensor: int,
    pipeline: int,
    gpu_memory_utilization: float,
    workspace_bytes: float | None = None,
    partition: Sequence[int] | None = None,
) -> int:
    """Tokens of KV cache one replica (``tensor x pipeline`` GPUs) can hold.

    Like vLLM, each GPU gives ``memory * gpu_memory_utilization`` to the engine; its share of
    the weights (its stage's weights over ``tensor``) and ``workspace_bytes`` (activations of
    the largest batch, CUDA graphs; 0 when not given) come off first, and the rest holds KV
    entries of its stage's layers. Every stage keeps the KV of every token in flight for its
    own layers, so the stage with the least room per token (stages split as ``partition``
    says, evenly by default; the first and last heavier by the embedding and the LM head)
    limits the replica.

    Raises ValueError, naming the stage and the sizes, when a stage's weights do not fit.
    """
    gpu = gpu_profile(gpu) if isinstance(gpu, str) else gpu
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    partition = partition_layers(model, pipeline, "even" if partition is None else partition)
    budget = gpu.memory_bytes * gpu_memory_utilization - (workspace_bytes or 0.0)
    per_layer = _kv_bytes_per_token_per_layer(model, tensor)
    capacity = None
    for stage, (layers, params) in enumerate(
        zip(partition, stage_parameters(model, partition), strict=True)
    ):
        free = budget - params * model.dtype_bytes / tensor
        if free < layers * per_layer:
            raise ValueError(
                f"the weights of stage {stage} ({params * model.dtype_bytes / tensor / 2**30:.2f} "
                f"GiB per GPU at tensor={tensor}, pipeline={pipeline}) leave no room for a KV "
                f"cache in {gpu.name}'s {gpu.memory_bytes / 2**30:.0f} GiB x "
                f"{gpu_memory_utilization}; use more GPUs per replica"
            )
        tokens = int(free // (layers * per_layer))
        capacity = tokens if capacity is None else min(capacity, tokens)
    assert capacity is not None
    return capacity
