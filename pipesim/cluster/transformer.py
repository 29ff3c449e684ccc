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
  down ``f -> h``: ``3hf`` weights instead of ``2hf``;
* wider heads (``head_dim``, Qwen3): queries and the attention output are ``a d`` wide;
* a mixture-of-experts layer (``pipesim.cluster.moe``) holds ``E + S`` expert MLPs and a
  router; a token multiplies by ``k + S`` of them and the router: its FLOPs count those,
  its parameters all of them;
* multi-head latent attention (``pipesim.cluster.mla``) projects through two latents; its
  scores use keys ``d_nope + d_rope`` and values ``d_v`` wide per head;
* DeepSeek-V3's multi-token-prediction modules, on the last stage, each run one more block,
  a projection ``2h -> h`` and the LM head again.

A layer's linear FLOPs are then ``2bs`` times its weight count, and one step's total is
exactly Megatron-LM's ``num_floating_point_operations`` (training.py)
``12 B s L h^2 (1 + g/a + s/h + k f/h + V/(2 L h))`` with ``k = 1`` plain, ``1.5`` gated.

``pipesim.model`` turns these counts into time on a GPU and into ``Costs``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pipesim.cluster.memo import by_value
from pipesim.cluster.shape import TransformerModel

OPTIMIZER_BYTES_PER_PARAM = 12  # fp32 master weights + Adam m + Adam v, 4 bytes each
# FP8 training (Transformer Engine, Megatron-LM --fp8-format) keeps the bf16 weights and
# the fp32 master weights and moments as before, and casts each layer weight to FP8 once
# per step, keeping the cast and, on Hopper (whose FP8 GEMMs take only the TN layout), its
# transpose for the backward: 2 bytes per layer parameter on top (embedding and LM head stay
# bf16, as Megatron-LM runs them).
FP8_WEIGHT_COPY_BYTES = 2


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
    weight a token multiplies by in each pass of the linear layers (a MoE layer's ``top_k``
    routed and shared experts and its router), plus the attention scores. With ``context``
    parallelism (N) one GPU's share: ``s / N`` tokens, ``1 / N`` of the scores (its queries
    against every key, in balanced causal chunks: ``pipesim.cluster.context_parallel``)."""
    b, s = microbatch_size, model.seq_len
    local = sequence_share(model, context)
    weights = model.attention_weights + model.activated_mlp_weights
    linear = 2 * b * local * weights  # 24bsh^2 plain MHA
    scores = b * s * 2 * model.score_width * s // context  # QK^T, scores x V: 2 b s^2 h each
    return PassFlops(
        forward=linear + scores, backward_input=linear + 2 * scores, backward_weight=linear
    )


def lm_head_flops(model: TransformerModel, microbatch_size: int) -> PassFlops:
    """The output projection h -> V: ``2bshV`` forward, the same again for each half of the
    backward. The softmax and cross-entropy (a few FLOPs per logit) and the embedding lookup
    (no multiply-adds) are left out."""
    head = 2 * microbatch_size * model.seq_len * model.hidden * model.vocab
    return PassFlops(forward=head, backward_input=head, backward_weight=head)


def mtp_extra_flops(model: TransformerModel, microbatch_size: int) -> PassFlops:
    """What the multi-token-prediction modules run besides their blocks (DeepSeek-V3,
    section 2.2): each projects the concatenated ``2h`` (its input and the next token's
    embedding) to ``h``, ``4bsh^2`` a pass, and computes its own logits with the shared LM
    head."""
    project = 2 * microbatch_size * model.seq_len * 2 * model.hidden * model.hidden
    per_module = PassFlops(project, project, project) + lm_head_flops(model, microbatch_size)
    return per_module.scaled(model.mtp_layers)


def stage_blocks(
    model: TransformerModel, layers: int, *, start: int = 0, last: bool = False
) -> tuple[tuple[int, TransformerModel], ...]:
    """The kinds of transformer block a stage of ``layers`` layers from index ``start``
    runs, as ``(count, the model as that block sees it)``: dense layers, MoE layers and, on
    the last stage, the MTP modules' blocks (``TransformerModel.mtp_block``)."""
    dense, moe = model.layer_split(layers, start)
    mtp = model.mtp_layers if last else 0
    kinds = ((dense, model.dense_layer), (moe, model), (mtp, model.mtp_block))
    return tuple((count, view) for count, view in kinds if count)


def stage_flops(
    model: TransformerModel,
    layers: int,
    microbatch_size: int,
    *,
    first: bool,
    last: bool,
    start: int = 0,
) -> PassFlops:
    """The FLOPs a stage really executes: its layers (from index ``start``), the LM head and
    the MTP modules if last, and, with recomputation, one more forward of its blocks inside
    the input-gradient backward."""
    flops, recomputed = PassFlops(0, 0, 0), 0
    for count, view in stage_blocks(model, layers, start=start, last=last):
        per_layer = layer_flops(view, microbatch_size)
        flops = flops + per_layer.scaled(count)
        recomputed += per_layer.forward * count
    if model.recompute:
        flops = flops + PassFlops(0, recomputed, 0)
    if last:
        flops = flops + lm_head_flops(model, microbatch_size)
        flops = flops + mtp_extra_flops(model, microbatch_size)
    return flops


@by_value  # a planner asks again for every candidate of the same batch
def model_flops_per_step(
    model: TransformerModel, global_batch: int, *, forward_only: bool = False
) -> int:
    """Useful FLOPs of one step over ``global_batch`` sequences, for MFU: forward and
    backward of every layer (a MoE layer's activated experts) and the LM head, and the MTP
    modules, recomputation not counted. For f = 4h this is Megatron-LM's
    ``72 B s L h^2 (1 + s/(6h) + V/(12 h L))``. ``forward_only`` (inference) counts the
    forward pass alone, ``24 B s L h^2 (1 + s/(6h) + V/(12 h L))``."""
    once = replace(model, recompute=False) if model.recompute else model
    step = stage_flops(once, model.layers, 1, first=True, last=True)
    return (step.forward if forward_only else step.total) * global_batch


# -- parameters and static memory ----------------------------------------------------------


def layer_gemm_shapes(model: TransformerModel, tensor: int = 1) -> tuple[tuple[int, int], ...]:
    """The ``(n, k)`` of each linear layer's forward GEMM on one of ``tensor`` GPUs, for
    ``m`` = the microbatch's tokens: QKV ``(h + 2gd)/t x h``, the attention output
    ``h x h/t``, the MLP up projection (fused with the gate when gated) ``(k-1)f/t x h``, the
    down projection ``h x f/t`` (Megatron-LM's column- and row-parallel splits). MLA's
    projections are its own (``pipesim.cluster.mla``); a MoE layer has the router ``E x h``
    (whole on every GPU) and its shared experts as one MLP ``S f_e`` wide here, its routed
    experts in ``pipesim.cluster.moe.expert_pass_ms``."""
    h, f, t, q = model.hidden, model.ffn, tensor, model.q_width
    if model.mla is not None:
        attention = model.mla.gemm_shapes(h, model.heads, t)
    else:
        attention = (((q + 2 * model.kv_width) // t, h), (h, q // t))
    moe = model.moe
    if moe is not None:
        f = moe.shared_experts * moe.expert_ffn_hidden
        router = ((moe.experts, h),)
        return (
            attention
            + router
            + ((((model.mlp_matrices - 1) * f // t, h), (h, f // t)) if f else ())
        )
    return attention + (((model.mlp_matrices - 1) * f // t, h), (h, f // t))


def head_gemm_shape(model: TransformerModel, tensor: int = 1) -> tuple[int, int]:
    """The ``(n, k)`` of the LM head's forward GEMM on one of ``tensor`` GPUs: ``V/t x h``
    (the vocabulary split over the ranks)."""
    return (model.vocab // tensor, model.hidden)


def attention_parameters(model: TransformerModel) -> int:
    """The attention block's weights and biases (and MLA's norms on its latents)."""
    if model.mla is not None:
        mla, h, a = model.mla, model.hidden, model.heads
        return model.attention_weights + mla.biases(h, a) + mla.norm_parameters
    return model.attention_weights + model.q_width + 2 * model.kv_width + model.hidden


def mlp_parameters(model: TransformerModel, *, activated: bool = False) -> int:
    """The MLP's weights and biases: a dense MLP's, or a MoE layer's experts and router
    (with ``activated``, those one token uses: ``pipesim.cluster.moe``)."""
    h, moe = model.hidden, model.moe
    if moe is not None:
        count = moe.activated_parameters if activated else moe.parameters
        return count(h, model.mlp_matrices)
    return model.mlp_weights + (model.mlp_matrices - 1) * model.ffn + h


@functools.lru_cache(maxsize=1 << 14)
def layer_parameters(model: TransformerModel, *, activated: bool = False) -> int:
    """Weights of one layer: attention ``h (h + 2 g d) + h^2`` (QKV and output projection)
    with their biases, the MLP ``2hf`` (``3hf`` gated) with its biases, two layer norms
    ``4h``: ``12h^2 + 13h`` for a plain MHA layer with f = 4h. Models without biases, with
    RMSNorm (Llama), hold a few ``h`` per layer fewer, under 0.01 % of the total. A MoE
    layer holds all its experts; ``activated``: those one token uses."""
    mlp = mlp_parameters(model, activated=activated)
    return attention_parameters(model) + mlp + 4 * model.hidden


def mtp_module_parameters(model: TransformerModel) -> int:
    """One multi-token-prediction module's own weights: its block, the projection ``2h -> h``
    with its bias and the norms of its two inputs (``4h``). It shares the embedding and the
    LM head with the main model."""
    h = model.hidden
    return layer_parameters(model.mtp_block) + 2 * h * h + h + 4 * h


@by_value  # a planner asks again for every candidate that shares it
def stage_layer_groups(
    model: TransformerModel, partition: Sequence[int]
) -> tuple[tuple[tuple[int, int], ...], ...]:
    """The blocks each stage holds, as ``(count, parameters of one)`` per kind (dense and
    MoE layers, MTP modules on the last stage: ``stage_blocks``)."""
    groups, start, last = [], 0, len(partition) - 1
    for k, layers in enumerate(partition):
        dense, moe = model.layer_split(layers, start)
        kinds = (
            (dense, layer_parameters(model.dense_layer)),
            (moe, layer_parameters(model)),
            (model.mtp_layers if k == last else 0, mtp_module_parameters(model)),
        )
        groups.append(tuple((count, params) for count, params in kinds if count))
        start += layers
    return tuple(groups)


@by_value  # a planner asks again for every candidate that shares it
def stage_parameters(model: TransformerModel, partition: Sequence[int]) -> tuple[int, ...]:
    """Weights held by each stage: its layers, the word embedding ``Vh`` on the first stage,
    the LM head ``Vh`` on the last unless embeddings are tied, and with MTP modules on a
    last stage that is not the first, the embedding's copy they look the next tokens up in.
    (Position embeddings and the final norm are left out. Megatron-LM keeps a copy of a tied
    embedding on the last stage when there are several stages; set
    ``tied_embeddings=False`` to count it.)"""
    stages = len(partition)
    embedding = model.vocab * model.hidden
    params = []
    for k, groups in enumerate(stage_layer_groups(model, partition)):
        count = sum(n * each for n, each in groups)
        count += embedding if k == 0 else 0
        count += embedding if k == stages - 1 and not model.tied_embeddings else 0
        count += embedding if k == stages - 1 and k > 0 and model.mtp_layers else 0
        params.append(count)
    return tuple(params)


@dataclass(frozen=True, slots=True)
class ParameterCount:
    """A model's size as model cards give it: ``total`` parameters of the main model
    (embedding, layers, LM head), ``activated`` per token (a MoE layer's ``top_k`` routed
    and shared experts), and the MTP modules' own (``mtp``), which DeepSeek-V3 counts apart
    (671B main model, 14B MTP module)."""

    total: int
    activated: int
    mtp: int = 0


def parameter_count(model: TransformerModel) -> ParameterCount:
    """The main model's total and activated parameters, and the MTP modules'."""
    ends = model.vocab * model.hidden * (1 if model.tied_embeddings else 2)
    dense, moe = model.layer_split(model.layers)
    dense_layer = dense * layer_parameters(model.dense_layer)
    return ParameterCount(
        total=ends + dense_layer + moe * layer_parameters(model),
        activated=ends + dense_layer + moe * layer_parameters(model, activated=True),
        mtp=model.mtp_layers * mtp_module_parameters(model),
    )
