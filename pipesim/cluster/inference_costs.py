"""One serving iteration as the cost model sees it: the batch's shape, and what the
iteration costs beyond its kernels' roofs.

``BatchShape`` says how many prompt tokens an iteration computes and how many sequences it
extends by one token; ``ServingCosts`` holds what a serving engine pays beyond the roofs of
its kernels (the bandwidth its reads reach, a fixed cost per kernel), fitted on published
serving latencies. ``pipesim.cluster.inference`` prices an iteration from both.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.cluster.efficiency import Efficiency
from pipesim.cluster.gpus import GpuProfile
from pipesim.cluster.shape import TransformerModel

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
# What a MoE layer launches beyond those (vLLM's fused MoE path, its MLP's up, activation and
# down kernels now the experts' grouped ones): the router's GEMM, the top-k softmax, the
# sort of token copies by expert (moe_align_block_size) and the sum of each token's k
# results. Counted, not fitted: no MoE row is in the calibration set.
MOE_EXTRA_KERNELS_PER_LAYER = 4
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
    Every layer launches ``kernels_per_layer`` kernels (a MoE layer ``moe_extra_kernels``
    more), each a fixed ``kernel_overhead_us`` (launch, ramp-up and tail: what dominates a
    small decode step); with ``cuda_graphs`` (vLLM's default: decode steps replay a
    captured graph, prefills run eagerly) a pure decode step pays ``graph_kernel_overhead_us`` per kernel instead. With ``gemm_shapes``
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
    moe_extra_kernels: int = MOE_EXTRA_KERNELS_PER_LAYER
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
        for name in (
            "kernels_per_layer",
            "moe_extra_kernels",
            "kernel_overhead_us",
            "graph_kernel_overhead_us",
        ):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")

    def read_bytes_per_s(self, gpu: GpuProfile) -> float:
        """The rate weights and KV entries are read at: ``bandwidth_fraction`` of the data
        sheet's bandwidth."""
        return gpu.memory_bandwidth_gbps * 1e9 * self.bandwidth_fraction

    def kernel_overhead_ms(
        self, layers: int, *, decode_only: bool = False, moe_layers: int = 0
    ) -> float:
        """The fixed cost of the kernels ``layers`` layers launch in one iteration, of which
        ``moe_layers`` launch ``moe_extra_kernels`` more each; a ``decode_only`` iteration
        replays a CUDA graph when ``cuda_graphs`` is set."""
        graph = self.cuda_graphs and decode_only
        per_kernel_us = self.graph_kernel_overhead_us if graph else self.kernel_overhead_us
        kernels = layers * self.kernels_per_layer + moe_layers * self.moe_extra_kernels
        return kernels * per_kernel_us / 1e3


ROOFLINE = ServingCosts(
    bandwidth_fraction=1.0,
    kernel_overhead_us=0.0,
    graph_kernel_overhead_us=0.0,
    gemm_shapes=False,
    attention_fraction=None,
    causal_work=1.0,
)


@dataclass(frozen=True, slots=True)
class StageSlice:
    """One pipeline stage as one of its GPUs runs it: ``layers`` layers of ``model`` from
    its layer ``start``, on ``gpu``, split over ``tensor`` GPUs (a MoE layer's routed
    experts over ``expert`` of them), priced with ``efficiency`` and ``serving``."""

    model: TransformerModel
    layers: int
    start: int
    gpu: GpuProfile
    efficiency: Efficiency
    serving: ServingCosts
    tensor: int = 1
    expert: int = 1

    @property
    def moe_layers(self) -> int:
        """How many of the stage's layers are MoE layers."""
        return self.model.layer_split(self.layers, self.start)[1]


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
]
