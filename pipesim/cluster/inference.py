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
from dataclasses import dataclass, replace

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


# What a serving engine pays beyond the two roofs, fitted on the calibration rows of
# tests/serving/data/published_serving.csv (refit: python -m tests.serving.published_serving
# --fit); every row, its source and its error are in docs/validation.md ("Serving").
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
KERNEL_OVERHEAD_US = 10.0
GRAPH_KERNEL_OVERHEAD_US = 7.5
# One all-reduce of a few KB inside a node, as NCCL runs it (LL protocol, one step of
# latency rather than the ring's 2(n-1)), fitted on the tensor-parallel calibration rows:
# 11 us, below NCCL's own LL estimate (15 us on 8 GPUs, pipesim.cluster.collectives), as
# serving engines run their own one-shot all-reduce kernels for small messages; the faster
# of the two is taken (tensor_allreduce_ms).
SMALL_ALLREDUCE_LATENCY_US = 11.0
# A prefill GEMM over M prompt tokens streams its weights and then computes, the two in
# series: 2MP / (peak x max_fraction) + P x dtype / achieved bandwidth, which is the
# efficiency curve max_fraction x M / (M + M*) with M* the GPU's ridge point in tokens,
# peak x max_fraction x dtype / (2 x achieved bandwidth) (113 tokens on an A100, 218 on an
# H100). The scale on M* is fitted (training's Efficiency.half_tokens, 512, is an
# assumption its runs never test: they all use 4096 tokens or more per microbatch).
PREFILL_RIDGE_SCALE = 1.55
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
    decode step pays ``graph_kernel_overhead_us`` per kernel instead. Each tensor-parallel
    all-reduce of a small message costs ``allreduce_latency_us`` plus its bytes
    (``tensor_allreduce_ms``; None: the ring's latency only). A prefill's GEMMs follow the
    efficiency curve with its half point at ``prefill_ridge_scale`` times the GPU's ridge
    point in tokens (``prefill_half_tokens``; None: ``Efficiency.half_tokens``); its
    attention runs at ``attention_fraction`` of the peak on ``causal_work`` of the FLOPs
    pipesim counts (a causal kernel skips the masked half of a whole prompt; a late chunk of
    a long prompt does nearly all of its count), or, with ``attention_fraction`` None, with
    the GEMMs.

    ``ROOFLINE`` is the bare roofs (pipesim's model before these costs were measured).
    """

    bandwidth_fraction: float = ACHIEVABLE_BANDWIDTH_FRACTION
    kernels_per_layer: int = DECODE_KERNELS_PER_LAYER
    kernel_overhead_us: float = KERNEL_OVERHEAD_US
    cuda_graphs: bool = False
    graph_kernel_overhead_us: float = GRAPH_KERNEL_OVERHEAD_US
    allreduce_latency_us: float | None = SMALL_ALLREDUCE_LATENCY_US
    prefill_ridge_scale: float | None = PREFILL_RIDGE_SCALE
    attention_fraction: float | None = PREFILL_ATTENTION_FRACTION
    causal_work: float = 0.5

    def __post_init__(self) -> None:
        for name in ("bandwidth_fraction", "attention_fraction", "causal_work"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        names = ("kernels_per_layer", "kernel_overhead_us", "graph_kernel_overhead_us")
        for name in (*names, "prefill_ridge_scale"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")

    def prefill_half_tokens(
        self, gpu: GpuProfile, efficiency: Efficiency, dtype_bytes: int
    ) -> float:
        """Prompt tokens at which a prefill's GEMMs reach half of ``efficiency.max_fraction``:
        ``prefill_ridge_scale`` times the ridge point ``peak x max_fraction x dtype_bytes /
        (2 x bandwidth x bandwidth_fraction)``, or ``efficiency.half_tokens``."""
        if self.prefill_ridge_scale is None:
            return efficiency.half_tokens
        achieved = gpu.memory_bandwidth_gbps * 1e9 * self.bandwidth_fraction
        ridge = gpu.peak_tflops * 1e12 * efficiency.max_fraction * dtype_bytes / (2 * achieved)
        return self.prefill_ridge_scale * ridge

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
    allreduce_latency_us=None,
    prefill_ridge_scale=None,
    attention_fraction=None,
    causal_work=1.0,
)


def small_message_allreduce_ms(nbytes: float, ranks: int, link: Link, latency_us: float) -> float:
    """One all-reduce of ``nbytes`` over ``ranks`` GPUs of a node as NCCL runs small
    messages: a fixed ``latency_us`` (its low-latency protocol pays one step, not the
    ring's ``2(n-1)``) plus the ring's bytes, ``2(n-1)/n * nbytes`` over ``link``.

    Stands in until the shared collectives model (NCCL's algorithms and protocols by
    message size) prices it; ``tensor_allreduce_ms`` takes whichever is faster."""
    if ranks == 1:
        return 0.0
    bandwidth_ms = 2 * (ranks - 1) / ranks * nbytes / (link.bandwidth_gbps * 1e6)
    return latency_us / 1e3 + bandwidth_ms


def tensor_allreduce_ms(
    nbytes: float, ranks: int, link: Link, serving: ServingCosts | None = None
) -> float:
    """One layer's two tensor-parallel all-reduces of ``nbytes``: the ring
    (``tensor_parallel_comm_ms``), or, when faster, the small-message all-reduce at
    ``serving.allreduce_latency_us`` (None: the ring only), as NCCL picks its protocol."""
    serving = ServingCosts() if serving is None else serving
    ring = tensor_parallel_comm_ms(nbytes, ranks, link)
    if serving.allreduce_latency_us is None:
        return ring
    small = small_message_allreduce_ms(nbytes, ranks, link, serving.allreduce_latency_us)
    return min(ring, 2 * small)


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

    A GPU is limited by two roofs: how fast it computes and how fast it reads memory. The
    iteration takes the longer of

    * compute: the prefill's matrix multiplications at the efficiency curve
      ``efficiency.fraction`` with its half point at ``serving.prefill_half_tokens`` (a thin
      prompt's GEMMs stream their weights for little math), its attention at ``serving.attention_fraction`` on the work a
      causal flash kernel does, plus the decode FLOPs at ``efficiency.max_fraction`` (a
      decode step's matrices are as wide as the weights; its bytes, not its shape, limit it);
    * memory: the weights and the KV cache the decoding sequences read
      (``stage_read_bytes``) at ``serving.bandwidth_fraction`` of the GPU's bandwidth.

    A pure prefill is thus compute bound, a pure decode step of a small batch is bandwidth
    bound, and a mixed batch (chunked prefill with decodes) pays its prefill's compute plus
    its decodes' compute, but reads the weights only once. On top come the fixed cost of
    every kernel the stage launches (``serving.kernel_overhead_ms``), with ``tensor > 1``
    two all-reduces per layer of the batch's activations over ``tensor_link``
    (``tensor_allreduce_ms``), and ``efficiency.launch_overhead_ms``.

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
    compute_s = _compute_s(model, layers, gpu, shape, last, emitting, efficiency, serving, tensor)
    memory_s = stage_read_bytes(model, layers, shape, last=last, tensor=tensor) / (
        gpu.memory_bandwidth_gbps * 1e9 * serving.bandwidth_fraction
    )
    total_ms = max(compute_s, memory_s) * 1e3 + efficiency.launch_overhead_ms
    total_ms += serving.kernel_overhead_ms(layers, decode_only=not shape.prefill_tokens)
    if tensor > 1:
        message = stage_boundary_bytes(model, shape)
        total_ms += layers * tensor_allreduce_ms(message, tensor, tensor_link, serving)
    return total_ms


def _compute_s(
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
    """The iteration's compute time (s) on one of the stage's ``tensor`` GPUs: decode at
    the GEMM ceiling, prefill GEMMs on their curve, prefill attention on its causal share at
    its own rate (or, with ``serving.attention_fraction`` None, with the GEMMs)."""
    prefill_flops, decode_flops = stage_iteration_flops(
        model, layers, shape, last=last, emitting=emitting
    )
    peak = gpu.peak_tflops * 1e12
    compute_s = decode_flops / tensor / (peak * efficiency.max_fraction)
    if not shape.prefill_tokens:
        return compute_s
    half = serving.prefill_half_tokens(gpu, efficiency, model.dtype_bytes)
    curve = replace(efficiency, half_tokens=half)
    # a per-shape GEMM time (pipesim.cluster.gemm) would replace curve.fraction here
    gemm_fraction = curve.fraction(shape.prefill_tokens)
    if serving.attention_fraction is None:
        return compute_s + prefill_flops / tensor / (peak * gemm_fraction)
    attention = layers * 4 * model.hidden * shape.prefill_attention
    compute_s += (prefill_flops - attention) / tensor / (peak * gemm_fraction)
    attention_flops = attention * serving.causal_work
    return compute_s + attention_flops / tensor / (peak * serving.attention_fraction)


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
