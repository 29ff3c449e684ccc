"""How long one matrix multiplication takes on one GPU, from its shape.

A GEMM ``C[m, n] = A[m, k] @ B[k, n]`` does ``2 m n k`` FLOPs. cuBLAS cuts ``C`` into tiles
(``TILE_M x TILE_N``, 128 x 256 on Hopper's fastest kernels; the best of ``TILE_SHAPES``
for each shape) and hands one tile at a time to
each streaming multiprocessor (SM). The tiles run in *waves* of one per SM: 133 tiles on a
132-SM H100 take two waves, the second with one busy SM, so the GEMM runs at about half the
rate of 132 tiles. Tiles on the edge of ``C`` are computed whole and partly thrown away. So

    efficiency(m, n) = (m n / (TILE_M TILE_N)) / (waves x SMs),
    waves = ceil(ceil(m / TILE_M) ceil(n / TILE_N) / SMs)

is the useful share of the tile slots the GEMM occupies (1 for shapes that fill whole
waves). A short reduction ``k`` spends more of each tile's time loading and storing rather
than multiplying: ``k / (k + gemm_half_dim)``. The GPU's measured large-GEMM rate
(``GpuProfile.gemm_tflops``, the best shape of a benchmark scan, which fills its waves)
times both, times ``Efficiency.gemm_fraction`` (what a real training step keeps of a
benchmark's rate), is the GEMM's rate; no kernel is shorter than the GPU's launch cost.

    gemm_ms(m, n, k, gpu, efficiency, *, fp8=None)

A MoE layer's experts run as one grouped GEMM (``grouped_gemm_ms``): many small GEMMs whose
tiles fill the waves together.

An inference iteration's GEMMs can be thinner than a tile (a decode step of a few sequences,
a short prompt); ``thin_gemm_ms`` prices those as the kernels built for them run.

FP8 (``fp8="tensorwise"`` or ``"blockwise"``) runs at the GPU's measured FP8 rate;
block-wise scaling costs ``Efficiency.fp8_blockwise_overhead`` more. A GPU without FP8
(A100) raises ``ValueError``. The real kernel picks among several tile shapes and can split
``k`` across SMs (stream-K), so real wave losses are softer than this closed form; the
fitted ``gemm_fraction`` absorbs the average.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from pipesim.cluster.efficiency import Efficiency, step_gemm_fraction
from pipesim.cluster.gpus import GpuProfile

TILE_M = 128
TILE_N = 256
# The output tiles cuBLAS's heuristics choose among for large bf16/FP8 GEMMs on Hopper
# (CUTLASS's SM90 kernels: 128 x 256, 256 x 128 with two consumer warp groups, 128 x 128):
# a GEMM runs with whichever fills its waves best.
TILE_SHAPES = ((TILE_M, TILE_N), (TILE_N, TILE_M), (128, 128))
FP8_RECIPES = ("tensorwise", "blockwise")


def wave_efficiency(
    m: int, n: int, sm_count: int | None, tile: tuple[int, int] = (TILE_M, TILE_N)
) -> float:
    """The useful share of the tile slots an ``m x n`` output cut in ``tile``s occupies on
    ``sm_count`` SMs (1 without an SM count)."""
    if sm_count is None:
        return 1.0
    tile_m, tile_n = tile
    tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n)
    waves = math.ceil(tiles / sm_count)
    return (m * n / (tile_m * tile_n)) / (waves * sm_count)


@functools.lru_cache(maxsize=1 << 16)
def shape_efficiency(m: int, n: int, k: int, gpu: GpuProfile, efficiency: Efficiency) -> float:
    """The best wave and tile quantisation over ``TILE_SHAPES`` times the short-reduction
    penalty."""
    waves = max(wave_efficiency(m, n, gpu.sm_count, tile) for tile in TILE_SHAPES)
    return waves * k / (k + efficiency.gemm_half_dim)


def gemm_tflops(gpu: GpuProfile, fp8: str | None = None) -> float:
    """The GPU's measured large-GEMM rate in TFLOP/s, bf16 or (``fp8``) FP8."""
    if fp8 is None:
        return gpu.gemm_tflops
    if fp8 not in FP8_RECIPES:
        raise ValueError(f"fp8 must be one of {', '.join(FP8_RECIPES)}, got {fp8!r}")
    rate = gpu.fp8_gemm_tflops
    if rate is None:
        raise ValueError(f"GPU {gpu.name!r} has no FP8 tensor cores")
    return rate


@functools.lru_cache(maxsize=1 << 16)
def gemm_ms(
    m: int, n: int, k: int, gpu: GpuProfile, efficiency: Efficiency, *, fp8: str | None = None
) -> float:
    """One ``m x k`` by ``k x n`` GEMM on ``gpu``, in milliseconds: ``2 m n k`` FLOPs at the
    GPU's measured rate (FP8's with ``fp8``) times ``shape_efficiency`` times
    ``efficiency.gemm_fraction``, never less than ``gpu.kernel_launch_us``. A zero-sized
    GEMM takes no time."""
    if min(m, n, k) <= 0:
        return 0.0
    rate = gemm_tflops(gpu, fp8) * 1e12 * step_gemm_fraction(efficiency, gpu)
    work_ms = 2 * m * n * k / (rate * shape_efficiency(m, n, k, gpu, efficiency)) * 1e3
    if fp8 == "blockwise":
        work_ms *= 1 + efficiency.fp8_blockwise_overhead
    return max(work_ms, gpu.kernel_launch_us * 1e-3)


def grouped_gemm_ms(
    shapes: Sequence[tuple[int, int, int, int]],
    gpu: GpuProfile,
    efficiency: Efficiency,
    *,
    fp8: str | None = None,
) -> float:
    """Several GEMMs run as one grouped kernel (CUTLASS's grouped GEMM; Megatron-LM's
    ``--moe-grouped-gemm`` runs a MoE layer's experts so), ``count`` GEMMs of each
    ``(m, n, k, count)`` in ``shapes``, in milliseconds. The kernel deals the tiles of all of
    them to the SMs together, so the waves are counted over their tiles together
    (``wave_efficiency`` over the sum, for the tiling that fills them best), and each GEMM
    keeps its own short-reduction penalty; one kernel, one launch floor. Zero-sized GEMMs
    take no time, and a group of nothing none."""
    shapes = [(m, n, k, count) for m, n, k, count in shapes if min(m, n, k, count) > 0]
    if not shapes:
        return 0.0
    rate = gemm_tflops(gpu, fp8) * 1e12 * step_gemm_fraction(efficiency, gpu)
    half = efficiency.gemm_half_dim
    work_ms = sum(2 * m * n * k * c * (k + half) / k for m, n, k, c in shapes) / rate * 1e3
    work_ms /= max(_grouped_waves(shapes, gpu.sm_count, tile) for tile in TILE_SHAPES)
    if fp8 == "blockwise":
        work_ms *= 1 + efficiency.fp8_blockwise_overhead
    return max(work_ms, gpu.kernel_launch_us * 1e-3)


def _grouped_waves(
    shapes: Sequence[tuple[int, int, int, int]], sm_count: int | None, tile: tuple[int, int]
) -> float:
    """The useful share of the tile slots the grouped GEMM's tiles occupy, all dealt
    together in waves of one tile per SM (1 without an SM count)."""
    if sm_count is None:
        return 1.0
    tile_m, tile_n = tile
    useful = sum(m * n * c for m, n, _, c in shapes) / (tile_m * tile_n)
    tiles = sum(math.ceil(m / tile_m) * math.ceil(n / tile_n) * c for m, n, _, c in shapes)
    return useful / (math.ceil(tiles / sm_count) * sm_count)


def thin_gemm_ms(
    m: int, n: int, k: int, gpu: GpuProfile, efficiency: Efficiency, *, fp8: str | None = None
) -> float:
    """``gemm_ms`` for any number of rows ``m``, down to one.

    A GEMM of fewer rows than a tile (``m < TILE_M``) does not compute a whole tile of rows:
    cuBLAS and the inference engines pick kernels whose tiles are no taller than the rows
    (a matrix-vector kernel for one row), so it pays ``m / TILE_M`` of the ``TILE_M``-row
    GEMM of the same ``n`` and ``k``, its waves across the SMs unchanged, and at least the
    launch cost. From ``TILE_M`` rows on it is ``gemm_ms``, which training's passes use."""
    if m <= 0 or m >= TILE_M:
        return gemm_ms(m, n, k, gpu, efficiency, fp8=fp8)
    tile_rows_ms = gemm_ms(TILE_M, n, k, gpu, efficiency, fp8=fp8)
    return max(tile_rows_ms * m / TILE_M, gpu.kernel_launch_us * 1e-3)
