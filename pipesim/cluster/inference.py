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

Time follows kernel by kernel (``stage_iteration_ms``): each GEMM by its shape or its weight
reads (``pipesim.cluster.inference_gemms``), the attention by its FLOPs or its KV reads, a
fixed cost per kernel, and with tensor parallelism two all-reduces per layer as NCCL runs
them (``pipesim.cluster.parallel.tensor_parallel_comm_ms``, as in training).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pipesim.cluster.efficiency import step_gemm_fraction
from pipesim.cluster.hardware import GpuProfile, gpu_profile
from pipesim.cluster.inference_gemms import linear_layers_ms, lm_head_ms
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


# What a serving engine pays beyond its kernels' roofs, fitted on the calibration rows of
# tests/serving/data/published_serving.csv (refit: python -m tests.serving.published_serving
# --fit); every row, its source and its error are in docs/validation.md ("Serving"). The
# GEMMs' rates are training's (pipesim.cluster.gemm) and the all-reduces NCCL's
# (pipesim.cluster.collectives): nothing of theirs is fitted on these rows.
#
# Weights stream from HBM at 88 % of the data sheet's bandwidth: a read kernel reaches
# 1.80 of the 2.04 TB/s of an A100 80GB SXM (Nsight Compute agrees: 88 %), and the GTC talk
# cited there saw no kernel pass ~90 %
# (forums.developer.nvidia.com/t/trouble-to-reach-peak-bandwidth-of-a100/339083). One
# fraction for every GPU until the GPU profiles carry a measured one each.
ACHIEVABLE_BANDWIDTH_FRACTION = 0.88
# Kernels one Llama-style layer launches per iteration, all-reduces aside: RMSNorm, the
# fused QKV GEMM, rotary embedding with the KV-cache write, attention, the output GEMM,
# the residual add fused with the second RMSNorm, the fused gate/up GEMM, SiLU x up and
# the down GEMM (TensorRT-LLM and TurboMind fuse rotary with the cache write; vLLM's
# LlamaDecoderLayer launches them apart, 10).
DECODE_KERNELS_PER_LAYER = 9
# The fixed cost of one kernel without CUDA graphs (launch, ramp-up and tail), fitted, and
# inside a replayed CUDA graph (no launch from the host: ramp-up and tail only), fitted.
KERNEL_OVERHEAD_US = 9.75
GRAPH_KERNEL_OVERHEAD_US = 7.5
# Fused (flash) attention forward, causal, head width 128: FlashAttention-2 reaches 50-73 %
# of an A100's peak (Dao 2023, arXiv:2307.08691, abstract); provisional, not fitted.
PREFILL_ATTENTION_FRACTION = 0.6


@dataclass(frozen=True, slots=True)
class ServingCosts:
    """What one serving iteration costs beyond its rooflines, as a fit can set it.

    ``bandwidth_fraction`` of the GPU's memory bandwidth is what weight and KV reads reach.
    Every layer launches ``kernels_per_layer`` kernels, each a fixed ``kernel_overhead_us``
    (launch, ramp-up and tail: what dominates a small decode step); with ``cuda_graphs``
    (vLLM's default: decode steps replay a captured graph, prefills run eagerly) a pure
    decode step pays ``graph_kernel_overhead_us`` per kernel instead. With ``gemm_shapes``
    each GEMM is priced by its shape (``pipesim.cluster.inference_gemms``); without, the
    stage's GEMMs follow ``Efficiency``'s curve and the stage pays the longer of its two
    roofs. A prefill's attention runs at ``attention_fraction`` of the peak on
    ``causal_work`` of the FLOPs pipesim counts (a causal kernel skips the masked half of a
    whole prompt; a late chunk of a long prompt does nearly all of its count), or, with
    ``attention_fraction`` None, with the GEMMs.

    ``ROOFLINE`` is the bare roofs (pipesim's model before these costs were measured).
    """

    bandwidth_fraction: float = ACHIEVABLE_BANDWIDTH_FRACTION
    kernels_per_layer: int = DECODE_KERNELS_PER_LAYER
    kernel_overhead_us: float = KERNEL_OVERHEAD_US
    cuda_graphs: bool = False
    graph_kernel_overhead_us: float = GRAPH_KERNEL_OVERHEAD_US
    gemm_shapes: bool = True
    attention_fraction: float | None = PREFILL_ATTENTION_FRACTION
    causal_work: float = 0.5

    def __post_init__(self) -> None:
        for name in ("bandwidth_fraction", "attention_fraction", "causal_work"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        for name in ("kernels_per_layer", "kernel_overhead_us", "graph_kernel_overhead_us"):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")

    def read_bytes_per_s(self, gpu: GpuProfile) -> float:
        """The rate weights and KV entries are read at: ``bandwidth_fraction`` of the data
        sheet's bandwidth."""
        return gpu.memory_bandwidth_gbps * 1e9 * self.bandwidth_fraction

    def kernel_overhead_ms(self, layers: int, *, decode_only: bool = False) -> float:
        """The fixed cost of the kernels ``layers`` layers launch in one iteration; a
        ``decode_only`` iteration replays a CUDA graph when ``cuda_graphs`` is set."""
        graph = self.cuda_graphs and decode_only
        per_kernel_us = self.graph_kernel_overhead_us if graph else self.kernel_overhead_us
        return layers * self.kernels_per_layer * per_kernel_us / 1e3


ROOFLINE = ServingCosts(
    bandwidth_fraction=1.0,
    kernel_overhead_us=0.0,
    graph_kernel_overhead_us=0.0,
    gemm_shapes=False,
    attention_fraction=None,
    causal_work=1.0,
)


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
    serving: ServingCosts | None = None,
) -> float:
    """Time (ms) of one iteration of a batch of ``shape`` through a stage of ``layers``
    layers on ``gpu``, split over ``tensor`` GPUs.

    A GPU has two roofs, its compute and its memory reads; its kernels run one by one:

    * each linear layer's GEMM over all the batch's tokens (prompt tokens and one per
      decoding sequence; the LM head, on the last stage, over the tokens that sample), at
      the longer of its math by shape and its weight reads
      (``pipesim.cluster.inference_gemms``);
    * the attention: a prefill's at ``serving.attention_fraction`` of the peak on the work
      a causal flash kernel does, a decode step's at the longer of its FLOPs and the KV
      cache its sequences read (at ``serving.read_bytes_per_s``).

    A small decode step thus costs its reads, a long prompt its math, and a mixed batch
    (chunked prefill with decodes) reads the weights once for all its tokens. On top: the
    fixed cost of every kernel (``serving.kernel_overhead_ms``), with ``tensor > 1`` two
    all-reduces per layer over ``tensor_link`` as training's tensor parallelism prices them
    (``tensor_parallel_comm_ms``), and ``efficiency.launch_overhead_ms``. With
    ``serving.gemm_shapes`` False (``ROOFLINE``) the stage pays the longer of its compute
    (GEMMs on ``efficiency``'s curve) and all its reads (``stage_read_bytes``) instead.

    ``first`` marks the stage holding the embedding (a lookup: no FLOPs counted), ``last``
    the one holding the LM head, computed for every decoding sequence and for ``emitting``
    prompts that finish this iteration (each emits its first token). ``serving`` None takes
    the calibrated ``ServingCosts()``; ``ROOFLINE`` gives the bare roofs.
    """
    gpu = gpu_profile(gpu) if isinstance(gpu, str) else gpu
    efficiency = Efficiency() if efficiency is None else efficiency
    serving = ServingCosts() if serving is None else serving
    del first  # the embedding lookup costs no FLOPs worth counting
    if tensor > 1 and tensor_link is None:
        raise ValueError(f"tensor parallelism ({tensor=}) needs tensor_link, the intra-node link")
    if shape.tokens == 0:
        return 0.0
    price = _kernels_ms if serving.gemm_shapes else _two_roofs_ms
    work_ms = price(model, layers, gpu, shape, last, emitting, efficiency, serving, tensor)
    total_ms = work_ms + efficiency.launch_overhead_ms
    total_ms += serving.kernel_overhead_ms(layers, decode_only=not shape.prefill_tokens)
    if tensor > 1:
        message = stage_boundary_bytes(model, shape)
        total_ms += layers * tensor_parallel_comm_ms(message, tensor, tensor_link)
    return total_ms


def _kernels_ms(
    model: TransformerModel,
    layers: int,
    gpu: GpuProfile,
    shape: BatchShape,
    last: bool,
    emitting: int,
    efficiency: Efficiency,
    serving: ServingCosts,
    tensor: int,
) -> float:
    """The iteration's GEMMs and attention on one of the stage's ``tensor`` GPUs, each at
    the roof it hits (``stage_iteration_ms``)."""
    read = serving.read_bytes_per_s(gpu)
    kwargs = {"tensor": tensor, "read_bytes_per_s": read}
    gemms_ms = linear_layers_ms(model, layers, shape.tokens, gpu, efficiency, **kwargs)
    if last:
        gemms_ms += lm_head_ms(model, emitting + shape.decode_seqs, gpu, efficiency, **kwargs)
    if serving.attention_fraction is None:
        rate = gpu.gemm_tflops * 1e12 * step_gemm_fraction(efficiency, gpu)
    else:
        rate = gpu.peak_tflops * 1e12 * serving.attention_fraction
    per_pair = layers * 4 * model.hidden / tensor  # FLOPs per (query, key) pair
    prefill_s = per_pair * shape.prefill_attention * serving.causal_work / rate
    kv_bytes = layers * _kv_bytes_per_token_per_layer(model, tensor) * shape.decode_context
    decode_s = max(per_pair * shape.decode_context / rate, kv_bytes / read)
    return gemms_ms + (prefill_s + decode_s) * 1e3


def _two_roofs_ms(
    model: TransformerModel,
    layers: int,
    gpu: GpuProfile,
    shape: BatchShape,
    last: bool,
    emitting: int,
    efficiency: Efficiency,
    serving: ServingCosts,
    tensor: int,
) -> float:
    """The longer of the stage's compute and its reads (ms), the model before GEMMs were
    priced by shape: decode FLOPs at ``efficiency.max_fraction`` of the peak, prefill GEMMs
    on ``efficiency.fraction`` of the prompt tokens, prefill attention on its causal share
    at its own rate (or, with ``serving.attention_fraction`` None, with the GEMMs)."""
    prefill_flops, decode_flops = stage_iteration_flops(
        model, layers, shape, last=last, emitting=emitting
    )
    peak = gpu.peak_tflops * 1e12
    compute_s = decode_flops / tensor / (peak * efficiency.max_fraction)
    if shape.prefill_tokens:
        gemm_rate = peak * efficiency.fraction(shape.prefill_tokens)
        attention = layers * 4 * model.hidden * shape.prefill_attention
        if serving.attention_fraction is None:
            compute_s += prefill_flops / tensor / gemm_rate
        else:
            compute_s += (prefill_flops - attention) / tensor / gemm_rate
            attention_rate = peak * serving.attention_fraction
            compute_s += attention * serving.causal_work / tensor / attention_rate
    read_bytes = stage_read_bytes(model, layers, shape, last=last, tensor=tensor)
    return max(compute_s, read_bytes / serving.read_bytes_per_s(gpu)) * 1e3


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
