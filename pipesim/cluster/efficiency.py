"""How much of a GPU's rates each kind of work reaches: the few numbers pipesim calibrates.

A GPU's data sheet gives two ceilings, dense tensor-core FLOP/s and memory bandwidth, and
benchmarks measure what the best kernels reach of them (``pipesim.cluster.gpus``). A real
training step reaches a fraction of those: matrix multiplications and fused attention a
good part of the FLOP/s, elementwise operators a fraction of the bandwidth. ``Efficiency``
holds those fractions; ``pipesim.cluster.pass_time`` divides each pass's FLOPs and bytes by
them (each GEMM by its shape's rate, ``pipesim.cluster.gemm``). The defaults are fitted to Megatron-LM's published H100 runs (``docs/validation.md``)
and checked on runs the fit did not see (``tests/cluster/test_published_runs.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.cluster.hardware import GpuProfile

# Fitted to five rows of Megatron-LM's H100 weak-scaling table (1.7B, 16B, 70B, 177B and
# 462B) and checked on six rows the fit did not see; the method, every row with its source
# and its error are in docs/validation.md (refit: python -m tests.cluster.published_runs --fit).
# GEMMs at 65 % of the bf16 peak on the serving path's curve (``max_fraction``, 643 TFLOP/s on
# an H100 SXM), memory-bound operators at 43 % of the HBM data sheet's bandwidth (the byte
# counts assume one read and one write per operator; real kernels move more), and 55 % of the
# tensor-parallel communication the GEMMs could cover hidden by Megatron-LM's
# --tp-comm-overlap (its kernels compete with the GEMMs for the GPU).
CALIBRATED_GEMM_FRACTION = 0.65
CALIBRATED_TENSOR_OVERLAP = 0.55
# The per-shape model (``pipesim.cluster.gemm``), provisional until the lead's refit: chosen
# so that the Megatron-LM H100 rows keep their errors (docs/validation.md, "Compute: per GPU
# and per GEMM shape"). Training GEMMs reach ``CALIBRATED_STEP_GEMM_FRACTION`` of each GPU's
# measured large-GEMM rate times their shape's efficiency; a dimension ``d`` of a GEMM's
# reduction costs ``d / (d + CALIBRATED_GEMM_HALF_DIM)`` (the prologue and epilogue of each
# tile are not amortised over a short K loop); the fused attention kernel runs at
# ``CALIBRATED_ATTENTION_FRACTION`` of the measured GEMM rate (0.65 x 989.4 / 792.1 on an
# H100 SXM: the rate the single-fraction fit gave it, 643 TFLOP/s on the score FLOPs as MFU
# counts them); memory-bound operators at ``CALIBRATED_MEMORY_FRACTION`` of the measured
# streaming bandwidth (0.43 x 3,350 / 3,082: the old fit's bytes per second on an H100).
CALIBRATED_STEP_GEMM_FRACTION = 0.74
CALIBRATED_GEMM_HALF_DIM = 64.0
CALIBRATED_ATTENTION_FRACTION: float | None = 0.81
CALIBRATED_MEMORY_FRACTION = 0.467
# Block-wise FP8 (DeepSeek-V3 section 3.3, 1 x 128 activation tiles and 128 x 128 weight
# blocks, each with its own scale; Transformer Engine's Float8BlockScaling) multiplies
# partial sums by the scales on the CUDA cores every 128-element K chunk, and its casts
# compute one amax per block: assumed 10 % slower than per-tensor scaling until measured.
CALIBRATED_FP8_BLOCKWISE_OVERHEAD = 0.10
# Communication hidden behind compute is not free: its kernels take SMs and memory bandwidth
# from the compute they overlap. Lee et al. 2025, "Characterizing Compute-Communication
# Overlap in GPU-Accelerated Distributed Deep Learning" (arXiv:2507.03114), measure an average
# 18.9 % compute slowdown under overlap (40 % at most) on A100 and H100 (and MI250/MI210).
# Provisional: not yet refitted on the calibration rows.
DEFAULT_OVERLAP_SLOWDOWN = 0.189


@dataclass(frozen=True, slots=True)
class Efficiency:
    """How much of the GPU's rates a pass achieves.

    A small microbatch gives thin matrix multiplications that cannot fill the GPU, so the
    achieved fraction of peak FLOP/s grows with the tokens per microbatch ``b * s`` and
    saturates:

        fraction(tokens) = max_fraction * tokens / (tokens + half_tokens)

    ``max_fraction`` is what large GEMMs reach; ``half_tokens`` is the microbatch size, in
    tokens, at which half of it is reached (512 is an assumption, not a measurement: the
    published runs all use 4096 tokens or more per microbatch, where the curve is nearly
    flat). ``half_tokens = 0`` gives a constant efficiency.

    That curve over ``gpu.peak_tflops`` is the serving path's GEMM rate
    (``pipesim.cluster.inference``) and ``compute_ms``'s. A training pass prices each GEMM
    by its shape instead (``pipesim.cluster.gemm.gemm_ms``): the GPU's measured large-GEMM
    rate times the shape's tile and wave efficiency, times ``gemm_half_dim``'s small-
    dimension penalty, times ``gemm_fraction`` (what a real step keeps of a benchmark's rate:
    clocks under power draw, communication kernels sharing the SMs). ``fp8_blockwise_overhead``
    is the extra time of a block-wise-scaled FP8 GEMM over a per-tensor-scaled one.

    ``attention_fraction`` is the fraction of the GPU's measured GEMM rate
    (``gpu.gemm_tflops``) a fused (flash) attention kernel reaches on the score FLOPs as
    pipesim counts them (``4bs^2h`` forward, the causal mask's skipped half included, as MFU
    counts it); ``None`` runs them at ``gemm_fraction`` of it. ``memory_fraction`` is the
    fraction of the measured streaming bandwidth (``gpu.bandwidth_gbps``) the memory-bound
    operators reach (``pipesim.cluster.memory_bound``); ``None`` leaves them out, which gives
    the FLOPs-only model. ``tensor_overlap_fraction`` is how much of the tensor-parallel
    communication an overlapped run (Megatron-LM's ``--tp-comm-overlap``) hides behind the
    layer's GEMMs: the exposed part is ``comm - tensor_overlap_fraction * min(comm, gemm)``
    (the overlap kernels share the GPU with the GEMMs they hide behind, so the hiding is not
    free). ``launch_overhead_ms`` is a fixed cost added to every action (kernel launches,
    framework bookkeeping); it goes into ``Costs.overhead_ms``. ``overlap_slowdown`` is the
    fraction by which overlapped communication slows the compute it hides behind: hiding
    ``h`` ms of communication costs ``overlap_slowdown * h`` ms (tensor-parallel overlap,
    data-parallel overlap, ZeRO-3 prefetch; ``pipesim.cluster.pass_time``).

    Together they make splitting a fixed global batch into ever more microbatches slower past
    some point: the pipeline bubble shrinks, but each microbatch runs less efficiently.
    """

    max_fraction: float = CALIBRATED_GEMM_FRACTION
    half_tokens: float = 512.0
    launch_overhead_ms: float = 0.0
    attention_fraction: float | None = CALIBRATED_ATTENTION_FRACTION
    memory_fraction: float | None = CALIBRATED_MEMORY_FRACTION
    tensor_overlap_fraction: float = CALIBRATED_TENSOR_OVERLAP
    gemm_fraction: float = CALIBRATED_STEP_GEMM_FRACTION
    gemm_half_dim: float = CALIBRATED_GEMM_HALF_DIM
    fp8_blockwise_overhead: float = CALIBRATED_FP8_BLOCKWISE_OVERHEAD
    overlap_slowdown: float = DEFAULT_OVERLAP_SLOWDOWN

    def __post_init__(self) -> None:
        names = ("max_fraction", "attention_fraction", "memory_fraction", "gemm_fraction")
        for name in names:
            value = getattr(self, name)
            if value is not None and not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        if not 0 <= self.tensor_overlap_fraction <= 1:
            raise ValueError(
                f"tensor_overlap_fraction must be in [0, 1], got {self.tensor_overlap_fraction}"
            )
        for name in (
            "half_tokens",
            "launch_overhead_ms",
            "gemm_half_dim",
            "fp8_blockwise_overhead",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.overlap_slowdown <= 1:
            raise ValueError(f"overlap_slowdown must be in [0, 1], got {self.overlap_slowdown}")

    def fraction(self, tokens: float) -> float:
        return self.max_fraction * tokens / (tokens + self.half_tokens)


FLOPS_ONLY = Efficiency(attention_fraction=None, memory_fraction=None)


def compute_ms(flops: float, gpu: GpuProfile, efficiency: Efficiency, tokens: float) -> float:
    """``flops / (peak * efficiency(tokens))`` in milliseconds."""
    return flops / (gpu.peak_tflops * 1e12 * efficiency.fraction(tokens)) * 1e3


def attention_ms(flops: float, gpu: GpuProfile, efficiency: Efficiency, tokens: float) -> float:
    """The attention scores' FLOPs at ``attention_fraction`` of the GPU's measured GEMM rate
    (``gemm_fraction`` of it when ``None``), in milliseconds; ``tokens`` is unused (kept for
    the callers that pass it)."""
    fraction = efficiency.attention_fraction or efficiency.gemm_fraction
    return flops / (gpu.gemm_tflops * 1e12 * fraction) * 1e3


def memory_ms(nbytes: float, gpu: GpuProfile, efficiency: Efficiency) -> float:
    """``nbytes`` over ``memory_fraction`` of the GPU's measured streaming bandwidth, in
    milliseconds; 0 when memory-bound work is not counted."""
    if efficiency.memory_fraction is None:
        return 0.0
    return nbytes / (gpu.bandwidth_gbps * 1e9 * efficiency.memory_fraction) * 1e3
