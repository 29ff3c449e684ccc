"""What a serving iteration's attention keeps and reads: the KV cache, and the work per
(query, key) pair.

A serving engine keeps, for every token of every running sequence and every layer, what
later tokens attend to: with multi-head or grouped-query attention the keys and values of
the ``kv_heads`` heads, ``2 kv_heads head_dim`` elements; with multi-head latent attention
(``pipesim.cluster.mla``; DeepSeek-V2, section 2.1, Table 1) only the compressed latent
and the shared rotary key, ``kv_lora + d_rope`` elements, which DeepSeek-V3 (512 + 64)
keeps in 576 elements where its 128 heads would need ``2 x 128 x 192`` un-compressed.

Tensor parallelism splits the key/value heads over the ranks (each keeps at least one:
``kv_heads_per_rank``). MLA's latent belongs to no head: every tensor-parallel rank keeps
it whole, as vLLM's MLA backends do (one "KV head" of width 576 on every rank), so its
cache per GPU does not shrink with ``tensor``.

The work per (query, key) pair, whole layer over all heads, follows the kernel:

* standard attention: ``QK^T`` and ``scores x V`` over every query head,
  ``2 a (d_qk + d_v)`` FLOPs (``4 h`` for heads ``h / a`` wide), prefill and decode alike;
* MLA runs two kernels, as vLLM does (``vllm/v1/attention/backends/mla/common.py``, its
  "compute friendly" and "data-movement friendly" approaches; DeepSeek-V2, section 2.1.2,
  on absorbing the up-projections): a prefill up-projects the latents to per-head keys and
  values and runs ordinary attention, ``2 a (d_nope + d_rope + d_v)`` per pair; a decode
  step keeps the cache compressed, absorbing the key up-projection into the query and the
  value up-projection into the output, and attends over the latent as multi-query
  attention with keys ``kv_lora + d_rope`` and values ``kv_lora`` wide:
  ``2 a (2 kv_lora + d_rope)`` per pair, more FLOPs than un-absorbed, but it reads only the
  576-element latent of each cached token. The absorbed products cost what the key-value
  up-projection costs for the step's own tokens, so pipesim's GEMMs are MLA's projections
  for every token of an iteration either way (``pipesim.cluster.transformer
  .layer_gemm_shapes``). A chunked prefill's up-projection of its earlier chunks' latents
  is left out.
"""

from __future__ import annotations

import math

from pipesim.cluster.shape import TransformerModel


def kv_heads_per_rank(model: TransformerModel, tensor: int = 1) -> int:
    """Key/value heads each tensor-parallel rank keeps: the heads split over the ranks, but
    never below one (with fewer KV heads than ranks each head is replicated, as Megatron-LM
    and vLLM do)."""
    if tensor < 1:
        raise ValueError(f"tensor must be >= 1, got {tensor=}")
    return max(1, math.ceil(model.kv_head_count / tensor))


def kv_bytes_per_token_per_layer(model: TransformerModel, tensor: int = 1) -> int:
    """KV-cache bytes one token takes in one layer on one of ``tensor`` GPUs: keys and
    values of the rank's heads, ``2 kv_heads_per_rank head_dim dtype_bytes``; with MLA the
    latent and the rotary key, whole on every rank, ``(kv_lora + d_rope) dtype_bytes``."""
    if model.mla is not None:
        return model.mla.kv_cache_elements * model.dtype_bytes
    return 2 * kv_heads_per_rank(model, tensor) * model.head_dim * model.dtype_bytes


def kv_cache_bytes_per_token(model: TransformerModel, tensor: int = 1) -> int:
    """KV-cache bytes one token of context takes on one GPU of a replica, whole model:
    ``layers * kv_bytes_per_token_per_layer``. Llama-2-70B in bf16 (80 layers, 8 KV heads
    of 128): 2 * 80 * 8 * 128 * 2 = 327,680 bytes with tensor=1; DeepSeek-V3 (61 layers,
    MLA latent 512 + rotary 64) in bf16: 61 * 576 * 2 = 70,272 bytes at any tensor."""
    return model.layers * kv_bytes_per_token_per_layer(model, tensor)


def prefill_pair_flops(model: TransformerModel) -> int:
    """FLOPs one layer spends per (query, key) pair of a prefill, all heads:
    ``2 a (d_qk + d_v)`` (``4 h`` for plain heads; MLA up-projected)."""
    return 2 * model.score_width


def decode_pair_flops(model: TransformerModel) -> int:
    """FLOPs one layer spends per (query, key) pair of a decode step, all heads: as a
    prefill's, or with MLA's absorbed kernel ``2 a (2 kv_lora + d_rope)`` (module
    docstring)."""
    mla = model.mla
    if mla is None:
        return prefill_pair_flops(model)
    return 2 * model.heads * (2 * mla.kv_lora_rank + mla.qk_rope_head_dim)


__all__ = [
    "decode_pair_flops",
    "kv_bytes_per_token_per_layer",
    "kv_cache_bytes_per_token",
    "kv_heads_per_rank",
    "prefill_pair_flops",
]
