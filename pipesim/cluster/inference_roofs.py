"""One inference iteration on one pipeline stage as two roofs: its FLOPs and its reads.

Before each GEMM was priced by its shape (``pipesim.cluster.inference_gemms``), pipesim
charged a stage the longer of its compute and all its memory reads; ``ROOFLINE`` still
does, and the counts serve the decode pipeline's accounting. Per layer, with ``P`` the
weights one token multiplies by (``pipesim.cluster.transformer.layer_parameters``, a MoE
layer's activated ones: ``top_k`` routed and the shared experts, and the router):

* every token through the layer's matrices costs ``2 P`` FLOPs;
* every (query, key) pair of the attention costs what
  ``pipesim.cluster.inference_attention`` counts (``4 h`` for plain heads);
* a GPU reads its share of the layer's weights once per iteration (a MoE layer's routed
  experts only where the batch touches them: ``pipesim.cluster.inference_moe``) and the
  KV cache of every decoding sequence.

The stage holding the LM head (the last) adds ``2 h V`` FLOPs per sequence that emits a
token, and reads the ``V h`` head matrix once per iteration.
"""

from __future__ import annotations

from pipesim.cluster.inference_attention import (
    decode_pair_flops,
    kv_bytes_per_token_per_layer,
    prefill_pair_flops,
)
from pipesim.cluster.inference_costs import BatchShape, StageSlice
from pipesim.cluster.inference_moe import layer_read_bytes, stage_layer_kinds
from pipesim.cluster.shape import TransformerModel
from pipesim.cluster.transformer import layer_parameters


def stage_iteration_flops(
    model: TransformerModel,
    layers: int,
    shape: BatchShape,
    *,
    last: bool,
    emitting: int,
    start: int = 0,
) -> tuple[float, float]:
    """``(prefill FLOPs, decode FLOPs)`` of one iteration on a stage of ``layers`` layers
    from index ``start`` (whole stage, before any tensor-parallel split); the LM head, on
    the last stage, goes with the part whose sequences emit: prefill for ``emitting``
    finished prompts, decode for every decoding sequence."""
    prefill = layers * prefill_pair_flops(model) * shape.prefill_attention
    decode = layers * decode_pair_flops(model) * shape.decode_context
    for count, view in stage_layer_kinds(model, layers, start):
        linear = 2 * layer_parameters(view, activated=True)
        prefill += count * linear * shape.prefill_tokens
        decode += count * linear * shape.decode_seqs
    if last:
        head = 2 * model.hidden * model.vocab
        prefill += head * emitting
        decode += head * shape.decode_seqs
    return float(prefill), float(decode)


def stage_read_bytes(
    model: TransformerModel,
    layers: int,
    shape: BatchShape,
    *,
    last: bool,
    tensor: int = 1,
    start: int = 0,
    expert: int = 1,
) -> float:
    """Bytes one GPU of the stage reads from memory in one iteration: its share of the
    layers' weights (a MoE layer's routed experts where the batch's tokens touch them,
    ``expert``-parallel) and of the LM head on the last stage, plus the KV cache of every
    decoding sequence. The embedding table is only looked up (a row per token), so the
    first stage does not read it whole."""
    weight_bytes = sum(
        count * layer_read_bytes(view, shape.tokens, tensor=tensor, expert=expert)
        for count, view in stage_layer_kinds(model, layers, start)
    )
    if last:
        weight_bytes += model.vocab * model.hidden * model.dtype_bytes / tensor
    kv_bytes = layers * kv_bytes_per_token_per_layer(model, tensor) * shape.decode_context
    return weight_bytes + kv_bytes


def two_roofs_ms(stage: StageSlice, shape: BatchShape, *, last: bool, emitting: int) -> float:
    """The longer of the stage's compute and its reads on one GPU (ms): decode FLOPs at
    ``efficiency.max_fraction`` of the peak, prefill GEMMs on ``efficiency.fraction`` of
    the prompt tokens, prefill attention on its causal share at its own rate (or, with
    ``serving.attention_fraction`` None, with the GEMMs)."""
    model, layers, tensor = stage.model, stage.layers, stage.tensor
    efficiency, serving = stage.efficiency, stage.serving
    prefill_flops, decode_flops = stage_iteration_flops(
        model, layers, shape, last=last, emitting=emitting, start=stage.start
    )
    peak = stage.gpu.peak_tflops * 1e12
    compute_s = decode_flops / tensor / (peak * efficiency.max_fraction)
    if shape.prefill_tokens:
        gemm_rate = peak * efficiency.fraction(shape.prefill_tokens)
        attention = layers * prefill_pair_flops(model) * shape.prefill_attention
        if serving.attention_fraction is None:
            compute_s += prefill_flops / tensor / gemm_rate
        else:
            compute_s += (prefill_flops - attention) / tensor / gemm_rate
            attention_rate = peak * serving.attention_fraction
            compute_s += attention * serving.causal_work / tensor / attention_rate
    split = {"tensor": tensor, "start": stage.start, "expert": stage.expert}
    read_bytes = stage_read_bytes(model, layers, shape, last=last, **split)
    return max(compute_s, read_bytes / serving.read_bytes_per_s(stage.gpu)) * 1e3


__all__ = ["stage_iteration_flops", "stage_read_bytes", "two_roofs_ms"]
