"""What the linear layers of one inference iteration cost, GEMM by GEMM.

A serving engine runs every token of an iteration (whole prompts, prompt chunks, one token
per decoding sequence) through each linear layer as one GEMM of ``m`` = those tokens, with
the layer's weights as the other operand: the same shapes a training forward runs
(``pipesim.cluster.transformer.layer_gemm_shapes``, the LM head's
``head_gemm_shape``), with fewer rows. Each GEMM is one kernel, limited by the longer of

* its math, priced by its shape (``pipesim.cluster.gemm.thin_gemm_ms``: the GPU's measured
  GEMM rate, its tile and wave losses, a short reduction's penalty; a GEMM thinner than a
  tile pays for its rows only), and
* reading its weights, ``n k dtype_bytes`` bytes at the rate the serving path reads memory.

So a decode step of a few sequences reads its weights and does little else, a long prompt
computes at the shape's rate, and a prompt of about a hundred tokens shows both: on an A100
its GEMMs cannot fill the SMs (108 of them) with 128-row tiles of a narrow ``n``.
"""

from __future__ import annotations

from pipesim.cluster.efficiency import Efficiency
from pipesim.cluster.gemm import thin_gemm_ms
from pipesim.cluster.gpus import GpuProfile
from pipesim.cluster.transformer import TransformerModel, head_gemm_shape, layer_gemm_shapes


def weight_bound_gemm_ms(
    m: int,
    n: int,
    k: int,
    gpu: GpuProfile,
    efficiency: Efficiency,
    *,
    read_bytes_per_s: float,
    dtype_bytes: int,
    fp8: str | None = None,
) -> float:
    """One ``m x k`` by ``k x n`` GEMM whose ``k x n`` weights come from memory (ms): the
    longer of its math (``thin_gemm_ms``) and reading the weights, ``n k dtype_bytes`` at
    ``read_bytes_per_s``. No rows, no kernel: 0."""
    if m <= 0:
        return 0.0
    math_ms = thin_gemm_ms(m, n, k, gpu, efficiency, fp8=fp8)
    return max(math_ms, n * k * dtype_bytes / read_bytes_per_s * 1e3)


def linear_layers_ms(
    model: TransformerModel,
    layers: int,
    tokens: int,
    gpu: GpuProfile,
    efficiency: Efficiency,
    *,
    tensor: int,
    read_bytes_per_s: float,
) -> float:
    """The GEMMs of ``layers`` layers over ``tokens`` tokens on one of ``tensor`` GPUs (ms):
    QKV, attention output, MLP up (with the gate) and down, each ``weight_bound_gemm_ms``,
    in FP8 where the model's linear layers are."""
    per_layer = sum(
        weight_bound_gemm_ms(
            tokens,
            n,
            k,
            gpu,
            efficiency,
            read_bytes_per_s=read_bytes_per_s,
            dtype_bytes=model.dtype_bytes,
            fp8=model.fp8,
        )
        for n, k in layer_gemm_shapes(model, tensor)
    )
    return layers * per_layer


def lm_head_ms(
    model: TransformerModel,
    tokens: int,
    gpu: GpuProfile,
    efficiency: Efficiency,
    *,
    tensor: int,
    read_bytes_per_s: float,
) -> float:
    """The LM head over the ``tokens`` that sample a token (ms): ``V/t x h`` weights, in the
    model's dtype also under FP8 (as Megatron-LM runs its output layer)."""
    n, k = head_gemm_shape(model, tensor)
    return weight_bound_gemm_ms(
        tokens,
        n,
        k,
        gpu,
        efficiency,
        read_bytes_per_s=read_bytes_per_s,
        dtype_bytes=model.dtype_bytes,
    )
