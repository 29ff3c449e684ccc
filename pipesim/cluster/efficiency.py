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

# The GEMM curve of the FLOPs-only model and of serving's bare roofs (``max_fraction``,
# ``half_tokens``: 65 % of the bf16 peak, 643 TFLOP/s on an H100 SXM), as fitted on
# Megatron-LM's H100 runs before GEMMs were priced by shape (training and serving both price
# them by shape now; serving's costs are checked in docs/validation.md, "Serving").
CALIBRATED_GEMM_FRACTION = 0.65
# The training model, fitted (python -m tests.cluster.published_runs --fit: Nelder-Mead, 80
# iterations, minimising the median plus half the largest |error|) on the ledger's 15
# calibration rows (6 H100: Megatron-LM and Llama 3; 9 A100: SC21, MT-NLG, Korthikanti et al.)
# and checked on its 16 held-out rows; every row, its source and its error are in
# docs/validation.md. Fitted values, rounded to two digits:
# * ``CALIBRATED_STEP_GEMM_FRACTION``: the share of a GPU's measured large-GEMM rate
#   (``pipesim.cluster.gpus``) a step's GEMMs keep after their shape's own losses
#   (``pipesim.cluster.gemm``); H100's fit (0.740), used for every GPU without a fit of its
#   own (A100 has one: ``pipesim.cluster.gpus.A100_STEP``);
# * ``CALIBRATED_MEMORY_FRACTION``: memory-bound operators at 72 % of the measured
#   streaming bandwidth (the byte counts are one read and one write per operator);
# * ``CALIBRATED_TENSOR_OVERLAP``: 63 % of the tensor-parallel communication the GEMMs could
#   cover hidden by Megatron-LM's --tp-comm-overlap;
# * ``DEFAULT_OVERLAP_SLOWDOWN``: what hidden communication costs the compute it hides
#   under, 1 %. Lee et al. 2025, "Characterizing Compute-Communication Overlap in
#   GPU-Accelerated Distributed Deep Learning" (arXiv:2507.03114) measure 18.9 % on average
#   in microbenchmarks; the published steps leave no room for it beside
#   ``CALIBRATED_TENSOR_OVERLAP`` (the two trade off on these rows), and the fit took 0.7 %.
# Not fitted: ``CALIBRATED_GEMM_HALF_DIM`` (a GEMM whose reduction length is ``d`` runs at
# ``d / (d + 64)``: the tile's prologue and epilogue are not amortised over a short K loop;
# assumed) and ``CALIBRATED_ATTENTION_FRACTION`` (the fused attention kernel at 81 % of the
# measured GEMM rate, 643 TFLOP/s on an H100's score FLOPs as MFU counts them: the single-
# fraction fit's rate; fitting it too made the held-out rows worse).
CALIBRATED_STEP_GEMM_FRACTION = 0.74
CALIBRATED_MEMORY_FRACTION = 0.72
CALIBRATED_TENSOR_OVERLAP = 0.63
DEFAULT_OVERLAP_SLOWDOWN = 0.01
CALIBRATED_GEMM_HALF_DIM = 64.0
CALIBRATED_ATTENTION_FRACTION: float | None = 0.81
# Block-wise FP8 (DeepSeek-V3 section 3.3, 1 x 128 activation tiles and 128 x 128 weight
# blocks, each with its own scale; Transformer Engine's Float8BlockScaling) multiplies
# partial sums by the scales on the CUDA cores every 128-element K chunk, and its casts
# compute one amax per block: assumed 10 % slower than per-tensor scaling until measured.
CALIBRATED_FP8_BLOCKWISE_OVERHEAD = 0.10


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

    That curve over ``gpu.peak_tflops`` is ``compute_ms``'s GEMM rate and that of serving's
    bare roofs (``pipesim.cluster.inference.ROOFLINE``). A training pass, and a serving
    iteration with its calibrated costs, prices each GEMM by its shape instead
    (``pipesim.cluster.gemm.gemm_ms``): the GPU's measured large-GEMM rate times the shape's
    tile and wave efficiency, times ``gemm_half_dim``'s small-dimension penalty, times
    ``gemm_fraction`` (what a real step keeps of a benchmark's rate: clocks under power
    draw, communication kernels sharing the SMs). ``fp8_blockwise_overhead`` is the extra
    time of a block-wise-scaled FP8 GEMM over a per-tensor-scaled one.

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
    gemm_fraction: float | None = None
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


def step_gemm_fraction(efficiency: Efficiency, gpu: GpuProfile) -> float:
    """The share of ``gpu.gemm_tflops`` a training step's GEMMs keep: ``gemm_fraction``
    when the scenario sets it, else the GPU's own fitted fraction, else the one fitted on
    H100 runs (``CALIBRATED_STEP_GEMM_FRACTION``)."""
    if efficiency.gemm_fraction is not None:
        return efficiency.gemm_fraction
    return gpu.step_gemm_fraction or CALIBRATED_STEP_GEMM_FRACTION


def compute_ms(flops: float, gpu: GpuProfile, efficiency: Efficiency, tokens: float) -> float:
    """``flops / (peak * efficiency(tokens))`` in milliseconds."""
    return flops / (gpu.peak_tflops * 1e12 * efficiency.fraction(tokens)) * 1e3


def attention_ms(flops: float, gpu: GpuProfile, efficiency: Efficiency, tokens: float) -> float:
    """The attention scores' FLOPs at ``attention_fraction`` of the GPU's measured GEMM rate
    (``gemm_fraction`` of it when ``None``), in milliseconds; ``tokens`` is unused (kept for
    the callers that pass it)."""
    fraction = efficiency.attention_fraction or step_gemm_fraction(efficiency, gpu)
    return flops / (gpu.gemm_tflops * 1e12 * fraction) * 1e3


def memory_ms(nbytes: float, gpu: GpuProfile, efficiency: Efficiency) -> float:
    """``nbytes`` over ``memory_fraction`` of the GPU's measured streaming bandwidth, in
    milliseconds; 0 when memory-bound work is not counted."""
    if efficiency.memory_fraction is None:
        return 0.0
    return nbytes / (gpu.bandwidth_gbps * 1e9 * efficiency.memory_fraction) * 1e3
