"""How much of a GPU's peak each kind of work reaches: the few numbers pipesim calibrates.

A GPU's data sheet gives two ceilings, dense tensor-core FLOP/s and memory bandwidth. Real
kernels reach a fraction of each: matrix multiplications and fused attention a good part of
the FLOP/s, elementwise operators a fraction of the bandwidth. ``Efficiency``
holds those fractions; ``pipesim.cluster.pass_time`` divides each pass's FLOPs and bytes by
them. The defaults are fitted to Megatron-LM's published H100 runs (``docs/validation.md``)
and checked on runs the fit did not see (``tests/cluster/test_published_runs.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.cluster.hardware import GpuProfile

# Fitted to five rows of Megatron-LM's H100 weak-scaling table (1.7B, 16B, 70B, 177B and
# 462B) and checked on six rows the fit did not see; the method, every row with its source
# and its error are in docs/validation.md (refit: python -m tests.cluster.published_runs --fit).
# GEMMs at 65 % of the bf16 peak (643 TFLOP/s on an H100 SXM, sustained through a real step;
# the fused attention kernel runs at the same rate on the score FLOPs as MFU counts them:
# fitting it separately found nothing better), memory-bound operators at 43 % of the HBM
# bandwidth (the byte counts assume one read and one write per operator; real kernels move
# more), and 55 % of the tensor-parallel communication the GEMMs could cover hidden by
# Megatron-LM's --tp-comm-overlap (its kernels compete with the GEMMs for the GPU).
CALIBRATED_GEMM_FRACTION = 0.65
CALIBRATED_ATTENTION_FRACTION: float | None = None
CALIBRATED_MEMORY_FRACTION = 0.43
CALIBRATED_TENSOR_OVERLAP = 0.55
# Communication hidden behind compute is not free: its kernels take SMs and memory bandwidth
# from the compute they overlap. Lee et al. 2025, "Characterizing Compute-Communication
# Overlap in GPU-Accelerated Distributed Deep Learning" (arXiv:2507.03114), measure an average
# 18.9 % compute slowdown under overlap (40 % at most) on A100 and H100 (and MI250/MI210).
# Provisional: not yet refitted on the calibration rows.
DEFAULT_OVERLAP_SLOWDOWN = 0.189


@dataclass(frozen=True, slots=True)
class Efficiency:
    """How much of the GPU's peak a pass achieves, as a function of the tokens it processes.

    A small microbatch gives thin matrix multiplications that cannot fill the GPU, so the
    achieved fraction of peak FLOP/s grows with the tokens per microbatch ``b * s`` and
    saturates:

        fraction(tokens) = max_fraction * tokens / (tokens + half_tokens)

    ``max_fraction`` is what large GEMMs reach; ``half_tokens`` is the microbatch size, in
    tokens, at which half of it is reached (512 is an assumption, not a measurement: the
    published runs all use 4096 tokens or more per microbatch, where the curve is nearly
    flat). ``half_tokens = 0`` gives a constant efficiency.

    ``attention_fraction`` is the fraction of peak a fused (flash) attention kernel reaches
    on the score FLOPs as pipesim counts them (``4bs^2h`` forward, the causal mask's skipped
    half included, as MFU counts it); ``None`` runs them at the GEMM fraction.
    ``memory_fraction`` is the fraction of the memory bandwidth the memory-bound operators
    reach (``pipesim.cluster.memory_bound``); ``None`` leaves them out, which gives the
    FLOPs-only model. ``tensor_overlap_fraction`` is how much of the tensor-parallel
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
    overlap_slowdown: float = DEFAULT_OVERLAP_SLOWDOWN

    def __post_init__(self) -> None:
        for name in ("max_fraction", "attention_fraction", "memory_fraction"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        if not 0 <= self.tensor_overlap_fraction <= 1:
            raise ValueError(
                f"tensor_overlap_fraction must be in [0, 1], got {self.tensor_overlap_fraction}"
            )
        if not 0 <= self.overlap_slowdown <= 1:
            raise ValueError(f"overlap_slowdown must be in [0, 1], got {self.overlap_slowdown}")
        if self.half_tokens < 0 or self.launch_overhead_ms < 0:
            raise ValueError(f"half_tokens and launch_overhead_ms must be >= 0, got {self}")

    def fraction(self, tokens: float) -> float:
        return self.max_fraction * tokens / (tokens + self.half_tokens)


FLOPS_ONLY = Efficiency(attention_fraction=None, memory_fraction=None)


def compute_ms(flops: float, gpu: GpuProfile, efficiency: Efficiency, tokens: float) -> float:
    """``flops / (peak * efficiency(tokens))`` in milliseconds."""
    return flops / (gpu.peak_tflops * 1e12 * efficiency.fraction(tokens)) * 1e3


def attention_ms(flops: float, gpu: GpuProfile, efficiency: Efficiency, tokens: float) -> float:
    """The attention scores' FLOPs at ``attention_fraction`` of peak (the GEMM curve when it
    is ``None``), in milliseconds."""
    if efficiency.attention_fraction is None:
        return compute_ms(flops, gpu, efficiency, tokens)
    return flops / (gpu.peak_tflops * 1e12 * efficiency.attention_fraction) * 1e3


def memory_ms(nbytes: float, gpu: GpuProfile, efficiency: Efficiency) -> float:
    """``nbytes`` over ``memory_fraction`` of the memory bandwidth, in milliseconds; 0 when
    memory-bound work is not counted."""
    if efficiency.memory_fraction is None:
        return 0.0
    return nbytes / (gpu.memory_bandwidth_gbps * 1e9 * efficiency.memory_fraction) * 1e3
