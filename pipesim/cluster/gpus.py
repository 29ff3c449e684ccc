"""What each GPU type can do: its data-sheet ceilings and what benchmarks measure on it.

A data sheet gives two ceilings, dense tensor-core FLOP/s and memory bandwidth; no real
kernel reaches either. The best cuBLAS matrix multiplication of any shape, on a GPU left to
its own clocks, reaches 80-86 % of the bf16 peak (the *maximum achievable matmul FLOPS*,
MAMF); a streaming kernel reaches about 90 % of the HBM bandwidth. ``GpuProfile`` keeps both
kinds of number side by side: ``peak_tflops`` and ``memory_bandwidth_gbps`` (the data sheet),
and ``achievable_tflops``, ``achievable_bandwidth_gbps``, ``fp8_achievable_tflops`` (what is
measured). ``pipesim.cluster.gemm`` scales the achievable rate by each GEMM's shape.

Where no measurement of a GPU was found, the achievable figure applies a measured sibling's
ratio to its data sheet, and the comment says so ("derived"): those are guesses a
measurement should replace.
"""

from __future__ import annotations

from dataclasses import dataclass


class UnknownProfileError(ValueError):
    """A link or GPU profile name (or variant) that pipesim does not know."""


@dataclass(frozen=True, slots=True)
class GpuProfile:
    """One GPU type. The first four fields are the data sheet: dense bf16 tensor-core TFLOP/s
    (no 2:4 sparsity), memory bandwidth in GB/s, memory capacity in bytes (vendors write
    "80 GB" for HBM stacks that hold 80 GiB; capacities here are GiB * 2**30, close to what
    the driver reports). The rest are measurements, each optional for a hand-made profile:

    * ``sm_count``: streaming multiprocessors, over which a GEMM's tiles run in waves
      (``None``: no wave quantisation);
    * ``achievable_tflops``: the best large bf16 GEMM measured (``None``: the peak);
    * ``achievable_bandwidth_gbps``: a streaming kernel's measured bandwidth (``None``: the
      data sheet's);
    * ``fp8_peak_tflops`` and ``fp8_achievable_tflops``: the same for FP8 (E4M3/E5M2) GEMMs;
      ``None`` where the GPU has no FP8 tensor cores (A100);
    * ``kernel_launch_us``: the shortest time any kernel takes on the GPU (launch and
      teardown): a small kernel costs at least this;
    * ``step_gemm_fraction``: the share of ``gemm_tflops`` a training step's GEMMs keep on
      this GPU, fitted on the published runs of this GPU (``None``: the fraction fitted on
      H100 runs, ``pipesim.cluster.efficiency.CALIBRATED_STEP_GEMM_FRACTION``).
    """

    name: str
    peak_tflops: float
    memory_bandwidth_gbps: float
    memory_bytes: int
    sm_count: int | None = None
    achievable_tflops: float | None = None
    achievable_bandwidth_gbps: float | None = None
    fp8_peak_tflops: float | None = None
    fp8_achievable_tflops: float | None = None
    kernel_launch_us: float = 0.0
    step_gemm_fraction: float | None = None

    @property
    def gemm_tflops(self) -> float:
        """The bf16 rate a large, well-shaped GEMM reaches: measured, else the peak."""
        return self.achievable_tflops or self.peak_tflops

    @property
    def fp8_gemm_tflops(self) -> float | None:
        """The FP8 rate a large GEMM reaches (measured, else the FP8 peak); ``None``
        without FP8."""
        return self.fp8_achievable_tflops or self.fp8_peak_tflops

    @property
    def has_fp8(self) -> bool:
        return self.fp8_gemm_tflops is not None

    @property
    def bandwidth_gbps(self) -> float:
        """The memory bandwidth a streaming kernel reaches: measured, else the data sheet."""
        return self.achievable_bandwidth_gbps or self.memory_bandwidth_gbps


_GIB = 2**30

# Sources, cited once and used below:
# [MAMF] stas00/ml-engineering, compute/accelerator/README.md, "Maximum Achievable Matmul
#   FLOPS comparison table" (bf16, no sparsity, best shape of a scan, CUDA 12.1): A100 SXM
#   267.9 of 312 (85.9 %), H100 SXM 792.1 of 989 (80.1 %), GH200 821.0.
# [MAMF-B200] stas00/ml-engineering, the H200-to-B200 upgrade write-up, "MAMF: the realistic
#   ceiling": bf16 H100/H200 SXM 794.5, B200 1745.0; fp8 H200 1453.4 of 1979 (73.4 %), B200
#   3432.5 of 4500 (76.3 %).
# [BW] pytorch/ao, torchao/testing/training/roofline_utils.py: "pct_achievable_mem_bw" 0.92
#   for H100 (pointwise Triton kernels with large inputs); the blockwise-FP8 benchmarks'
#   README in the same repository measures 2,634-2,901 GB/s of 3,352 (79-87 % of peak) on
#   H100 80GB HBM3 for real quantisation kernels. 0.92 of the data sheet is used for every
#   GPU, a streaming kernel's ceiling, not a typical operator's (Efficiency.memory_fraction
#   takes the rest).
# [LAUNCH] pytorch/ao, torchao/testing/float8/roofline_utils.py:
#   TRITON_KERNEL_1_ELEMENT_TIME_SEC = 2 us, a one-element kernel's GPU time in an H100
#   trace; used for every GPU.
_BW_RATIO = 0.92  # [BW]
_LAUNCH_US = 2.0  # [LAUNCH]
_HOPPER_BF16_RATIO = 792.1 / 989.4  # [MAMF], H100 SXM
_HOPPER_FP8_RATIO = 1453.4 / 1978.9  # [MAMF-B200], H200 (same die and clocks as H100 SXM)
# The share of the measured GEMM rate an A100 training step keeps, fitted on the ledger's A100
# calibration rows (python -m tests.cluster.published_runs --fit; docs/validation.md).
A100_STEP = 0.81


def _gpu(
    name: str,
    sheet: tuple[float, float, float | None, int, int],
    measured: tuple[float, float | None],
    step_gemm_fraction: float | None = None,
) -> GpuProfile:
    """A profile from its data sheet ``(bf16 TFLOP/s, GB/s, fp8 TFLOP/s, GiB, SMs)`` and its
    measured ``(bf16 TFLOP/s, fp8 TFLOP/s)``; bandwidth and launch cost by the rules above."""
    peak, bandwidth, fp8_peak, gib, sms = sheet
    bf16, fp8 = measured
    return GpuProfile(
        name,
        peak,
        bandwidth,
        gib * _GIB,
        sm_count=sms,
        achievable_tflops=round(bf16, 1),
        achievable_bandwidth_gbps=round(_BW_RATIO * bandwidth, 1),
        fp8_peak_tflops=fp8_peak,
        fp8_achievable_tflops=None if fp8 is None else round(fp8, 1),
        kernel_launch_us=_LAUNCH_US,
        step_gemm_fraction=step_gemm_fraction,
    )


GPU_PROFILES: dict[str, GpuProfile] = {
    gpu.name: gpu
    for gpu in (
        # H100 SXM5: 989.4 TFLOP/s bf16 dense, 1,978.9 fp8 dense, 3.35 TB/s HBM3, 80 GB,
        # 132 SMs (NVIDIA H100 data sheet; glennklockwood.com/garden/processors/h100).
        # Achievable bf16 792.1 [MAMF]; fp8 1,453.4, H200's measurement on the same die
        # [MAMF-B200] (bf16 agrees within 0.3 % between the two: 792.1 vs 794.5).
        _gpu("h100-sxm", (989.4, 3350.0, 1978.9, 80, 132), (792.1, 1453.4)),
        # H800 SXM: the H100 SXM die, clocks and HBM3 with NVLink cut to 400 GB/s (8 links;
        # link profile "nvlink4-h800"). Same compute as h100-sxm.
        _gpu("h800", (989.4, 3350.0, 1978.9, 80, 132), (792.1, 1453.4)),
        # H100 PCIe: 756 TFLOP/s bf16 dense (1,513 with sparsity), 1,513 fp8 dense, 2.0 TB/s
        # HBM2e, 80 GB, 114 SMs (NVIDIA H100 data sheet, PCIe column). No MAMF published:
        # derived with H100 SXM's ratios (0.801 bf16, 0.734 fp8).
        _gpu(
            "h100-pcie",
            (756.0, 2000.0, 1513.0, 80, 114),
            (_HOPPER_BF16_RATIO * 756.0, _HOPPER_FP8_RATIO * 1513.0),
        ),
        # A100 SXM4: 312 TFLOP/s bf16 dense, no FP8; 40 GB at 1,555 GB/s, 80 GB at 2,039 GB/s,
        # 108 SMs (NVIDIA A100 data sheet). Achievable bf16 267.9 [MAMF].
        # Its step fraction is fitted on the ledger's A100 calibration rows (docs/
        # validation.md), all from 2021-2022 software (Megatron-LM, Megatron-DeepSpeed).
        _gpu("a100-sxm-40gb", (312.0, 1555.0, None, 40, 108), (267.9, None), A100_STEP),
        _gpu("a100-sxm-80gb", (312.0, 2039.0, None, 80, 108), (267.9, None), A100_STEP),
        # H200 SXM: the Hopper die (989.4 bf16, 1,978.9 fp8, 132 SMs), 141 GB HBM3e at
        # 4.8 TB/s (NVIDIA H200 data sheet). Achievable bf16 794.5, fp8 1,453.4 [MAMF-B200].
        _gpu("h200", (989.4, 4800.0, 1978.9, 141, 132), (794.5, 1453.4)),
        # B200 in HGX B200 (1,000 W): 2,250 bf16 dense, 4,500 fp8 dense, 8 TB/s, 180 GB HBM3e,
        # 148 SMs (HGX B200 specifications; glennklockwood.com/garden/processors/B200).
        # Achievable bf16 1,745.0, fp8 3,432.5 [MAMF-B200].
        _gpu("b200", (2250.0, 8000.0, 4500.0, 180, 148), (1745.0, 3432.5)),
        # L40S: 362 TFLOP/s bf16 dense (733 with sparsity), 733 fp8 dense (1,466 with
        # sparsity), 48 GB GDDR6 at 864 GB/s, 142 SMs (NVIDIA L40S data sheet). No MAMF
        # published: derived with H100 SXM's ratios.
        _gpu(
            "l40s",
            (362.0, 864.0, 733.0, 48, 142),
            (_HOPPER_BF16_RATIO * 362.0, _HOPPER_FP8_RATIO * 733.0),
        ),
    )
}


def gpu_profile(name: str) -> GpuProfile:
    """The ``GpuProfile`` of a named GPU, e.g. ``gpu_profile("h100-sxm")``."""
    if name not in GPU_PROFILES:
        allowed = ", ".join(GPU_PROFILES)
        raise UnknownProfileError(f"unknown GPU profile {name!r}; allowed: {allowed}")
    return GPU_PROFILES[name]
