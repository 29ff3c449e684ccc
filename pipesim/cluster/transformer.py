"""What a transformer's shape implies, before any hardware: FLOPs, bytes and parameters.

A GPT-style decoder is a stack of identical layers between an embedding (first stage) and an
output projection with its loss (last stage). Counting the multiply-adds of one layer gives
its FLOPs; counting the tensors it keeps for the backward pass gives its activation memory;
counting its weights gives what the optimizer must store. Every formula here works per layer
and per microbatch, with these letters:

    b  microbatch size (sequences)     s  sequence length         h  hidden size
    a  attention heads                 f  FFN hidden size (4h by default)
    V  vocabulary size                 t  tensor-parallel degree  n  data-parallel degree

FLOPs follow the Zero Bubble paper (Qi et al. 2024, Table 1), which splits the backward into
``I`` (input gradient) and ``W`` (weight gradient). For f = 4h they are

    F = sbh(24h + 4s)      I = sbh(24h + 8s)      W = sbh(24h)          (per layer, b = 1)

The 24h term is the layer's linear layers: QKV (3h^2), attention output (h^2) and the MLP
(2hf = 8h^2), two FLOPs per multiply-add, so 2(4h^2 + 2hf) = 8h^2 + 4hf. The s terms are the
attention scores (QK^T and scores x V): they have no weights, so their backward lands wholly
in I. pipesim counts the weights of the architectures people train, and the FLOPs follow:

* grouped-query attention (Ainslie et al. 2023) shares each key/value head among ``a / g``
  query heads, with ``g`` kv heads of width ``d = h / a``: the QKV projection has
  ``h (h + 2 g d)`` weights instead of ``3h^2``; the scores are still computed per query head,
  so their FLOPs do not change;
* a gated MLP (SwiGLU, Shazeer 2020; Llama) has three matrices, gate and up ``h -> f`` and
  down ``f -> h``: ``3hf`` weights instead of ``2hf``.

A layer's linear FLOPs are then ``2bs`` times its weight count, and one step's total is
exactly Megatron-LM's ``num_floating_point_operations`` (training.py)
``12 B s L h^2 (1 + g/a + s/h + k f/h + V/(2 L h))`` with ``k = 1`` plain, ``1.5`` gated.

``pipesim.model`` turns these counts into time on a GPU and into ``Costs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

OPTIMIZER_BYTES_PER_PARAM = 12  # fp32 master weights + Adam m + Adam v, 4 bytes each
# FP8 training (Transformer Engine, Megatron-LM --fp8-format) keeps the bf16 weights and
# the fp32 master weights and moments as before, and casts each layer weight to FP8 once
# per step, keeping the cast and, on Hopper (whose FP8 GEMMs take only the TN layout), its
# transpose for the backward: 2 bytes per layer parameter on top (embedding and LM head stay
# bf16, as Megatron-LM runs them).
FP8_WEIGHT_COPY_BYTES = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class TransformerModel:
    """The shape of a GPT-style decoder. ``ffn_hidden`` defaults to ``4 * hidden``;
    ``dtype_bytes`` is the width of weights, gradients and activations (2 for bf16);
    ``recompute`` turns on full activation recomputation; ``tied_embeddings`` shares the
    input embedding with the LM head (no separate LM-head weights on the last stage);
    ``flash_attention`` means a fused attention kernel that never stores the s x s score
    matrices, so their activation memory (``5as^2b``) is not kept (FLOPs are unchanged)."""

    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    ffn_hidden: int | None = None
    dtype_bytes: int = 2
    recompute: bool = False
    tied_embeddings: bool = False
    flash_attention: bool = False
    kv_heads: int | None = None  # grouped-query attention; None: one key/value head per head
    mlp: str = "plain"  # "gated": SwiGLU's three matrices (gate, up, down)
    fp8: str | None = None  # "tensorwise" | "blockwise": FP8 linear layers

    def __post_init__(self) -> None:
        if self.fp8 not in (None, "tensorwise", "blockwise"):
            raise ValueError(f"model fp8 must be 'tensorwise' or 'blockwise', got {self.fp8!r}")
        if self.ffn_hidden is None:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.mlp not in ("plain", "gated"):
            raise ValueError(f"model mlp must be 'plain' or 'gated', got {self.mlp!r}")
        for name in (
            "layers",
            "hidden",
            "heads",
            "seq_len",
            "vocab",
            "ffn_hidden",
            "dtype_bytes",
            "kv_heads",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"model {name} must be a positive integer, got {value!r}")
        if self.hidden % self.heads:
            raise ValueError(
                f"hidden must be divisible by heads, got hidden={self.hidden}, heads={self.heads}"
            )
        if self.heads % self.kv_heads:  # type: ignore[operator]
            raise ValueError(
                f"kv_heads must divide heads, got heads={self.heads}, kv_heads={self.kv_heads}"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_head_count(self) -> int:
        return self.kv_heads  # type: ignore[return-value]  # set in __post_init__

    @property
    def ffn(self) -> int:
        return self.ffn_hidden  # type: ignore[return-value]  # set in __post_init__

    @property
    def kv_width(self) -> int:
        """Width of the key (or value) projection: ``kv_heads * head_dim`` (``h`` without GQA)."""
        return self.kv_head_count * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        """Matrices of width ``h x f`` in the MLP: 2 (up, down), 3 when gated (gate, up, down)."""
        return 3 if self.mlp == "gated" else 2

    @property
    def attention_weights(self) -> int:
        """Weights of the attention block without biases: QKV ``h (h + 2 g d)`` + output ``h^2``."""
        h = self.hidden
        return h * (h + 2 * self.kv_width) + h * h

    @property
    def mlp_weights(self) -> int:
        """Weights of the MLP without biases: ``2hf``, or ``3hf`` when gated."""
        return self.mlp_matrices * self.hidden * self.ffn


@dataclass(frozen=True, slots=True)
class PassFlops:
    """FLOPs of the three passes: forward, input-gradient backward, weight-gradient backward."""

    forward: int
    backward_input: int
    backward_weight: int

    @property
    def backward(self) -> int:
        return self.backward_input + self.backward_weight

    @property
    def total(self) -> int:
        return self.forward + self.backward

    def __add__(self, other: PassFlops) -> PassFlops:
        return PassFlops(
            self.forward + other.forward,
            self.backward_input + other.backward_input,
            self.backward_weight + other.backward_weight,
        )

    def scaled(self, factor: int) -> PassFlops:
        return PassFlops(
            self.forward * factor, self.backward_input * factor, self.backward_weight * factor
        )


# -- FLOPs ---------------------------------------------------------------------------------


def sequence_share(model: TransformerModel, context: int = 1) -> int:
    """Tokens of each sequence one of ``context`` context-parallel GPUs holds: ``s / N``."""
    if context < 1 or model.seq_len % context:
        raise ValueError(
            f"context must be >= 1 and divide seq_len, got {context=}, {model.seq_len=}"
        )
    return model.seq_len // context


def layer_flops(model: TransformerModel, microbatch_size: int, *, context: int = 1) -> PassFlops:
    """FLOPs of one transformer layer for one microbatch (no recomputation): ``2bs`` per
    weight in each pass of the linear layers, plus the attention scores. With ``context``
    parallelism (N) one GPU's share: ``s / N`` tokens, ``1 / N`` of the scores (its queries
    against every key, in balanced causal chunks: ``pipesim.cluster.context_parallel``)."""
    b, s, h = microbatch_size, model.seq_len, model.hidden
    local = sequence_share(model, context)
    linear = 2 * b * local * (model.attention_weights + model.mlp_weights)  # 24bsh^2 plain MHA
    scores = b * s * h * 4 * s // context  # QK^T and scores x V, 2 b s^2 h each
    return PassFlops(
        forward=linear + scores, backward_input=linear + 2 * scores, backward_weight=linear
    )


def lm_head_flops(model: TransformerModel, microbatch_size: int) -> PassFlops:
    """The output projection h -> V: ``2bshV`` forward, the same again for each half of the
    backward. The softmax and cross-entropy (a few FLOPs per logit) and the embedding lookup
    (no multiply-adds) are left out."""
    head = 2 * microbatch_size * model.seq_len * model.hidden * model.vocab
    return PassFlops(forward=head, backward_input=head, backward_weight=head)


def stage_flops(
    model: TransformerModel, layers: int, microbatch_size: int, *, first: bool, last: bool
) -> PassFlops:
    """The FLOPs a stage really executes: its layers, the LM head if last, and, with
    recomputation, one more forward of its layers inside the input-gradient backward."""
    per_layer = layer_flops(model, microbatch_size)
    flops = per_layer.scaled(layers)
    if model.recompute:
        flops = flops + PassFlops(0, per_layer.forward * layers, 0)
    if last:
        flops = flops + lm_head_flops(model, microbatch_size)
    return flops


def model_flops_per_step(
    model: TransformerModel, global_batch: int, *, forward_only: bool = False
) -> int:
    """Useful FLOPs of one step over ``global_batch`` sequences, for MFU: forward and
    backward of every layer and the LM head, recomputation not counted. For f = 4h this is
    Megatron-LM's ``72 B s L h^2 (1 + s/(6h) + V/(12 h L))``. ``forward_only`` (inference)
    counts the forward pass alone, ``24 B s L h^2 (1 + s/(6h) + V/(12 h L))``."""
    layer, head = layer_flops(model, 1), lm_head_flops(model, 1)
    if forward_only:
        return (layer.forward * model.layers + head.forward) * global_batch
    return (layer.total * model.layers + head.total) * global_batch


# -- bytes ---------------------------------------------------------------------------------


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

    The W part is what the Zero Bubble implementation uses: 32sbh of the 34sbh (the inputs of
    the linear layers), scaled here with the same tensor-parallel split.

    With full recomputation only the layer input survives the forward (``2sbh``, split by t
    under sequence parallelism); it is kept until W, which needs the recomputed inputs.

    Context parallelism of degree ``context`` keeps ``s / N`` tokens per GPU: every term
    divides by N (the scores too: each GPU's queries against all keys).
    """
    b, h, a, t = microbatch_size, model.hidden, model.heads, tensor
    s = sequence_share(model, context)
    sbh = s * b * h
    if model.recompute:
        kept = 2 * sbh / (t if sequence_parallel else 1)
        return kept, kept
    whole = 10 * sbh
    split = 4 * sbh + 4 * s * b * model.kv_width + 2 * model.mlp_matrices * s * b * model.ffn
    if model.fp8 is not None:  # the four linear inputs saved in 1 byte instead of 2
        whole -= 2 * sbh  # the QKV and MLP inputs (2sbh each)
        split -= sbh + s * b * model.ffn  # the output projection's and down projection's
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
    return total, for_w


# -- parameters and static memory ----------------------------------------------------------


def layer_gemm_shapes(model: TransformerModel, tensor: int = 1) -> tuple[tuple[int, int], ...]:
    """The ``(n, k)`` of each linear layer's forward GEMM on one of ``tensor`` GPUs, for
    ``m`` = the tokens it runs: QKV ``(h + 2gd)/t x h``, the attention output ``h x h/t``,
    the MLP up projection (fused with the gate when gated) ``(k-1)f/t x h``, the down
    projection ``h x f/t`` (Megatron-LM's column- and row-parallel splits)."""
    h, f, t = model.hidden, model.ffn, tensor
    return (
        ((h + 2 * model.kv_width) // t, h),
        (h, h // t),
        ((model.mlp_matrices - 1) * f // t, h),
        (h, f // t),
    )


def head_gemm_shape(model: TransformerModel, tensor: int = 1) -> tuple[int, int]:
    """The ``(n, k)`` of the LM head's forward GEMM on one of ``tensor`` GPUs: ``V/t x h``
    (the vocabulary split over the ranks)."""
    return (model.vocab // tensor, model.hidden)


def layer_parameters(model: TransformerModel) -> int:
    """Weights of one layer: attention ``h (h + 2 g d) + h^2`` (QKV and output projection)
    with their biases, the MLP ``2hf`` (``3hf`` gated) with its biases, two layer norms
    ``4h``: ``12h^2 + 13h`` for a plain MHA layer with f = 4h. Models without biases, with
    RMSNorm (Llama), hold a few ``h`` per layer fewer, under 0.01 % of the total."""
    h, f = model.hidden, model.ffn
    attention_biases = h + 2 * model.kv_width + h
    mlp_biases = (model.mlp_matrices - 1) * f + h
    return model.attention_weights + model.mlp_weights + attention_biases + mlp_biases + 4 * h


def stage_parameters(model: TransformerModel, partition: Sequence[int]) -> tuple[int, ...]:
    """Weights held by each stage: its layers, the word embedding ``Vh`` on the first stage,
    the LM head ``Vh`` on the last unless embeddings are tied. (Position embeddings and the
    final norm are left out. Megatron-LM keeps a copy of a tied embedding on the last stage
    when there are several stages; set ``tied_embeddings=False`` to count it.)"""
    stages = len(partition)
    embedding = model.vocab * model.hidden
    params = []
    for k, layers in enumerate(partition):
        count = layers * layer_parameters(model)
        count += embedding if k == 0 else 0
        count += embedding if k == stages - 1 and not model.tied_embeddings else 0
        params.append(count)
    return tuple(params)
