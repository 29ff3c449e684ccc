"""What a stage keeps for its backward pass: activation memory per layer and per stage.

Counted per microbatch in bytes, after Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models"), with the letters of
``pipesim.cluster.transformer``; the tensor one stage sends the next
(``activation_message_bytes``) is counted here too. Mixture-of-experts layers add their
router's probabilities, the token copies they dispatch to the experts and the experts'
intermediate activations (``pipesim.cluster.moe``); multi-head latent attention keeps its
latents and its per-head queries, keys and values (``pipesim.cluster.mla``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipesim.cluster.transformer import TransformerModel, sequence_share, stage_blocks


def activation_message_bytes(model: TransformerModel, microbatch_size: int) -> int:
    """The tensor one stage sends the next (and the gradient sent back): ``b s h`` elements."""
    return microbatch_size * model.seq_len * model.hidden * model.dtype_bytes


def layer_activation_memory_bytes(
    model: TransformerModel,
    microbatch_size: int,
    tensor: int = 1,
    sequence_parallel: bool = False,
    *,
    context: int = 1,
    load_factor: float = 1.0,
) -> tuple[float, float]:
    """Activation memory one layer keeps for one microbatch, and the part of it the
    weight-gradient pass ``W`` still needs after ``I`` has run. Returns ``(total, for_w)``.

    Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
    Models") count ``sbh(34 + 5as/h)`` bytes per layer with 16-bit activations: 34sbh for the
    linear, norm, dropout and GELU inputs, ``5as^2b`` for the attention scores, softmax and
    its dropout mask. Tensor parallelism splits the scores and part of the rest:
    ``sbh(10 + 24/t + 5as/(ht))``; with sequence parallelism too, ``sbh(34/t + 5as/(ht))``.
    The constants assume 2-byte activations and 1-byte masks; ``dtype_bytes`` does not
    rescale them. With ``flash_attention`` the ``5as^2b`` term is dropped, leaving 34sbh
    (what Korthikanti et al. call selective recomputation).

    The 24sbh that tensor parallelism splits are, itemised, Q, K, V and the output
    projection's input (2sbh each) and the MLP's activation input and down-projection input
    (2sbf each, f = 4h). Grouped-query attention shrinks K and V to ``2 s b g d`` each; a
    gated MLP keeps three f-wide tensors (gate and up outputs, their product), ``6sbf``. The
    10sbh left whole (two norm inputs, QKV and MLP inputs, two dropout masks) do not change.

    With ``fp8`` Transformer Engine saves each linear layer's input as its FP8 cast (1 byte
    per element): the QKV and MLP inputs (``sbh`` each instead of ``2sbh``), the output
    projection's (``sbh``) and the down projection's (``sbf``).

    Wider heads (``head_dim``) widen Q and the output projection's input to ``a d``. MLA and
    MoE layers keep what ``_attention_bytes`` and ``_mlp_bytes`` itemise.

    The W part is what the Zero Bubble implementation uses: 32sbh of the 34sbh (the inputs of
    the linear layers), scaled here with the same tensor-parallel split.

    With full recomputation only the layer input survives the forward (``2sbh``, split by t
    under sequence parallelism); it is kept until W, which needs the recomputed inputs.

    Context parallelism of degree ``context`` keeps ``s / N`` tokens per GPU: every term
    divides by N (the scores too: each GPU's queries against all keys). Under expert
    parallelism the slowest rank keeps ``load_factor`` times the routed experts' share.
    """
    b, h, a, t = microbatch_size, model.hidden, model.heads, tensor
    s = sequence_share(model, context)
    sbh = s * b * h
    if model.recompute:
        kept = 2 * sbh / (t if sequence_parallel else 1)
        return kept, kept
    attention, mlp = _attention_bytes(model), _mlp_bytes(model, load_factor)
    whole = 10 * sbh + s * b * (attention.whole + mlp.whole)
    split = s * b * (attention.split + mlp.split)
    if model.fp8 is not None:  # the linear inputs saved in 1 byte instead of 2
        whole -= 2 * sbh + s * b * (attention.fp8_whole + mlp.fp8_whole)  # QKV, MLP inputs
        split -= s * b * (attention.fp8_split + mlp.fp8_split)  # output, down projections'
    linear = (whole + split) / t if sequence_parallel else whole + split / t
    scores = 0 if model.flash_attention else 5 * a * s * model.seq_len * b / t
    return linear + scores, linear * 32 / 34


def stage_extra_activation_bytes(
    model: TransformerModel,
    microbatch_size: int,
    *,
    first: bool,
    last: bool,
    tensor: int = 1,
    sequence_parallel: bool = False,
    context: int = 1,
) -> tuple[float, float]:
    """Activation memory outside the layers, as ``(total, for_w)`` (Korthikanti §4.3).

    First stage: the embedding's dropout mask, ``sbh`` bytes. Last stage: the final norm's
    and the LM head's inputs, ``4sbh`` bytes (the LM head input, ``2sbh``, is kept until W),
    and the fp32 logits the cross-entropy backward needs, ``4sbV`` (split over t: the
    output layer is vocabulary-parallel). A context-parallel GPU holds ``s / context`` tokens.
    The last stage's MTP modules keep their blocks' activations and the same again for
    their inputs and their own LM heads.
    """
    seq = sequence_share(model, context)
    sbh = seq * microbatch_size * model.hidden
    split = tensor if sequence_parallel else 1
    total = for_w = 0.0
    if first:
        total += sbh / split
    if last:
        total += 4 * sbh / split + 4 * seq * microbatch_size * model.vocab / tensor
        for_w += 2 * sbh / split
    if last and model.mtp_layers:
        block, block_w = layer_activation_memory_bytes(
            model.mtp_block, microbatch_size, tensor, sequence_parallel, context=context
        )
        # each module: its block, its two norms' inputs and the 2h-wide projection input
        # (8sbh), and its own final norm, LM head input and logits, as the main model's
        head = 4 * sbh / split + 4 * seq * microbatch_size * model.vocab / tensor
        total += model.mtp_layers * (block + 8 * sbh / split + head)
        for_w += model.mtp_layers * (block_w + 6 * sbh / split)
    return total, for_w


@dataclass(frozen=True, slots=True)
class _TokenBytes:
    """Bytes one token of a layer keeps beyond the ``10h`` left whole in every layer:
    ``whole`` on every tensor-parallel GPU, ``split`` over them, and of those what FP8
    saves (the linear layers' inputs, one byte an element instead of two)."""

    whole: float
    split: float
    fp8_whole: float
    fp8_split: float


def _attention_bytes(model: TransformerModel) -> _TokenBytes:
    """Q, K, V and the output projection's input (``4 a d + 4 g d``); MLA: its latents,
    whole, and per-head queries, keys, values and output input, split."""
    mla = model.mla
    if mla is None:
        return _TokenBytes(0, 4 * model.q_width + 4 * model.kv_width, 0, model.q_width)
    whole, split = mla.saved_elements(model.heads)
    latents = mla.q_lora_rank + mla.kv_lora_rank  # the up projections' inputs
    return _TokenBytes(2 * whole, 2 * split, latents, model.heads * mla.v_head_dim)


def _mlp_bytes(model: TransformerModel, load_factor: float = 1.0) -> _TokenBytes:
    """The MLP's activation and down-projection inputs (``2 f`` a matrix); a MoE layer's
    for each of the ``k + S`` experts a token passes through, the router's probabilities in
    fp32 (``4 E``) and the ``k`` token copies dispatched to the experts (``2 k h``); the
    routed experts' part ``load_factor`` times that on the slowest expert-parallel rank."""
    moe = model.moe
    if moe is None:
        return _TokenBytes(0, 2 * model.mlp_matrices * model.ffn, 0, model.ffn)
    experts = moe.active_experts * moe.expert_ffn_hidden
    copies = moe.top_k * model.hidden
    if load_factor != 1.0:
        routed = moe.top_k * load_factor
        experts = (moe.shared_experts + routed) * moe.expert_ffn_hidden
        copies = routed * model.hidden
    return _TokenBytes(
        4 * moe.experts + 2 * copies, 2 * model.mlp_matrices * experts, copies, experts
    )


def stage_activation_memory_bytes(
    model: TransformerModel,
    partition: Sequence[int],
    microbatch_size: int,
    tensor: int = 1,
    sequence_parallel: bool = False,
    *,
    context: int = 1,
    load_factor: float = 1.0,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Activation memory each stage keeps per microbatch, and the part of it W still needs:
    its layers' (``layer_activation_memory_bytes``) plus the embedding's or the LM head's
    (``stage_extra_activation_bytes``), on one of ``context`` context-parallel GPUs; MoE
    layers' routed parts ``load_factor`` times the even share."""
    last, start = len(partition) - 1, 0
    act, wgrad = [], []
    for k, layers in enumerate(partition):
        layer_mem = layer_w = 0.0
        for count, view in stage_blocks(model, layers, start=start):
            mem, w = layer_activation_memory_bytes(
                view,
                microbatch_size,
                tensor,
                sequence_parallel,
                context=context,
                load_factor=load_factor,
            )
            layer_mem, layer_w = layer_mem + count * mem, layer_w + count * w
        start += layers
        extra_mem, extra_w = stage_extra_activation_bytes(
            model,
            microbatch_size,
            first=k == 0,
            last=k == last,
            tensor=tensor,
            sequence_parallel=sequence_parallel,
            context=context,
        )
        act.append(layer_mem + extra_mem)
        wgrad.append(layer_w + extra_w)
    return tuple(act), tuple(wgrad)
