"""The bytes a training step moves through GPU memory outside its matrix multiplications.

A matrix multiplication does ``O(h)`` FLOPs per byte it reads, so the GPU's arithmetic
bounds its time. Everything else in a transformer layer (the norms, the residual adds, the
bias and activation functions, the softmax of a non-fused attention, dropout) does a
handful of FLOPs per element: it reads its inputs once and writes its output once, and its
time is the bytes it moves over the memory bandwidth. These operators cost the same per
token whatever the hidden size, while the multiplications grow with ``h``; that is why
small models reach a lower fraction of peak than large ones (Megatron-LM's H100 table:
41 % MFU at hidden 2048, 47-49 % from hidden 4096 up).

Counts are per GPU, per microbatch, in elements of the activation width unless noted, with
``T = b s`` tokens, one read or write of each tensor per operator (what fused kernels do):

* two norms, each reading and writing ``h`` per token: ``4h``;
* two residual adds (Megatron fuses bias, dropout and the add), each reading two ``h``
  tensors and writing one: ``6h``;
* the activation function: GeLU reads and writes the ``f``-wide tensor (``2f``); SwiGLU
  reads the gate and up outputs and writes their product (``3f``);
* without a fused (flash) attention kernel: the scaled, masked softmax reads and writes
  the ``a s`` scores per token, and attention dropout does it again: ``4 a s``;
* a MoE layer's activation function over the ``k + S`` experts' intermediates a token
  passes through, and its dispatch, combine and router (``moe_routing_elements``).

The norms and residual adds see the whole hidden state; tensor parallelism splits them only
with sequence parallelism (each GPU then holds ``T / t`` tokens). The activation and the
scores are split by the tensor-parallel degree ``t`` always. A backward operator reads the
saved input and the incoming gradient and writes the outgoing one: twice the forward's
bytes (``BACKWARD_BYTES_RATIO``).

Outside the layers: the first stage gathers ``T`` rows of the embedding (read and write
``h`` per token, forward and backward); the last stage runs the final norm and the
cross-entropy over the ``T V / t`` logits its GPU holds, in fp32 (``CROSS_ENTROPY_*``).
The optimizer step moves ``OPTIMIZER_STEP_BYTES[optimizer]`` bytes per parameter it owns.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.cluster.optimizers import DEFAULT_OPTIMIZER, OPTIMIZERS
from pipesim.cluster.transformer import TransformerModel

BACKWARD_BYTES_RATIO = 2  # read saved input + read incoming gradient, write outgoing gradient

# Megatron-LM's vocab-parallel cross entropy (tensor_parallel/cross_entropy.py), one pass per
# elementwise step over each logit. Forward: cast the bf16 logits to fp32 (read 2, write 4),
# the max (read 4), subtract it and exponentiate in place (read 4, write 4), the sum (read 4),
# divide in place into the softmax kept for the backward (read 4, write 4): 30 bytes.
# Backward: subtract the one-hot target and scale by the loss gradient in place (read 4,
# write 4), cast to bf16 for the LM head's backward (read 4, write 2): 14 bytes.
CROSS_ENTROPY_FORWARD_BYTES_PER_LOGIT = 30
CROSS_ENTROPY_BACKWARD_BYTES_PER_LOGIT = 14

# Mixed-precision Adam with fp32 master weights (Megatron-LM's distributed optimizer, apex's
# or TE's multi-tensor FusedAdam): the step reads the fp32 master weight, gradient and two
# moments (16 bytes) and writes the weight and moments back (12); the global gradient norm
# for clipping reads the gradient once more (4); the updated weights are copied into the
# bf16 model weights (2 written). 34 bytes per parameter. Each implementation's own figure
# (FSDP2 writes no bf16 copy: 32) is in ``pipesim.cluster.optimizers``.
OPTIMIZER_STEP_BYTES = {name: impl.step_bytes_per_param for name, impl in OPTIMIZERS.items()}
OPTIMIZER_STEP_BYTES_PER_PARAM = OPTIMIZER_STEP_BYTES[DEFAULT_OPTIMIZER]


@dataclass(frozen=True, slots=True)
class PassBytes:
    """Bytes moved by memory-bound operators in the forward and in the backward of one
    microbatch (the backward's all belong to the input-gradient pass ``I``: the weight
    gradients ``W`` are matrix multiplications)."""

    forward: float
    backward: float

    def __add__(self, other: PassBytes) -> PassBytes:
        return PassBytes(self.forward + other.forward, self.backward + other.backward)

    def scaled(self, factor: float) -> PassBytes:
        return PassBytes(self.forward * factor, self.backward * factor)


def _from_forward(forward_bytes: float) -> PassBytes:
    return PassBytes(forward_bytes, BACKWARD_BYTES_RATIO * forward_bytes)


def layer_memory_bound_bytes(
    model: TransformerModel,
    microbatch_size: int,
    tensor: int = 1,
    sequence_parallel: bool = False,
) -> PassBytes:
    """Bytes one GPU moves in the memory-bound operators of one layer for one microbatch:
    ``w T (10h / t' + (2f or 3f) / t + 4as / t)`` forward, with ``t' = t`` under sequence
    parallelism (else 1), the ``4as`` term only without flash attention, ``w`` the
    activation width in bytes; twice that backward."""
    tokens = microbatch_size * model.seq_len
    h, f, t = model.hidden, model.ffn, tensor
    whole = 10 * h / (t if sequence_parallel else 1)
    if model.moe is not None:  # each token's k + S experts; dispatch, combine and router
        f = model.moe.active_experts * model.moe.expert_ffn_hidden
        whole += moe_routing_elements(model) / (t if sequence_parallel else 1)
    activation = (3 if model.mlp == "gated" else 2) * f
    scores = 0 if model.flash_attention else 4 * model.heads * model.seq_len
    return _from_forward(model.dtype_bytes * tokens * (whole + (activation + scores) / t))


def moe_routing_elements(model: TransformerModel) -> int:
    """What a MoE layer moves per token outside its GEMMs, in elements: the dispatch reads
    the token and writes its ``k`` copies, the combine reads the ``k`` expert outputs and
    writes their weighted sum (``(2k + 2) h`` in all), and the router's softmax and top-k
    read and write the ``E`` scores (``2E``)."""
    moe = model.moe
    if moe is None:
        return 0
    return (2 * moe.top_k + 2) * model.hidden + 2 * moe.experts


def embedding_memory_bound_bytes(model: TransformerModel, microbatch_size: int) -> PassBytes:
    """The first stage's embedding lookup: read and write ``h`` per token (the whole hidden
    state on every tensor-parallel GPU: the vocabulary-parallel lookup is summed across
    them), and the same again to scatter its gradient."""
    tokens = microbatch_size * model.seq_len
    moved = 2 * model.dtype_bytes * tokens * model.hidden
    return PassBytes(moved, moved)


def lm_head_memory_bound_bytes(
    model: TransformerModel,
    microbatch_size: int,
    tensor: int = 1,
    sequence_parallel: bool = False,
) -> PassBytes:
    """The last stage's final norm (``2h`` per token, split under sequence parallelism) and
    the fp32 cross-entropy over the ``T V / t`` logits one GPU holds."""
    tokens = microbatch_size * model.seq_len
    norm = _from_forward(
        2 * model.dtype_bytes * tokens * model.hidden / (tensor if sequence_parallel else 1)
    )
    logits = tokens * model.vocab / tensor
    loss = PassBytes(
        CROSS_ENTROPY_FORWARD_BYTES_PER_LOGIT * logits,
        CROSS_ENTROPY_BACKWARD_BYTES_PER_LOGIT * logits,
    )
    return norm + loss


def stage_memory_bound_bytes(
    model: TransformerModel,
    layers: int,
    microbatch_size: int,
    *,
    first: bool,
    last: bool,
    tensor: int = 1,
    sequence_parallel: bool = False,
) -> PassBytes:
    """A stage's memory-bound bytes per microbatch: its layers, the embedding if first, the
    final norm and loss if last. (Recomputation repeats the layers' forward inside ``I``;
    ``pipesim.cluster.pass_time`` adds it.)"""
    moved = layer_memory_bound_bytes(model, microbatch_size, tensor, sequence_parallel).scaled(
        layers
    )
    if first:
        moved = moved + embedding_memory_bound_bytes(model, microbatch_size)
    if last:
        moved = moved + lm_head_memory_bound_bytes(
            model, microbatch_size, tensor, sequence_parallel
        )
    if last and model.mtp_layers:  # each MTP module: an embedding lookup, its own loss
        module = embedding_memory_bound_bytes(model, microbatch_size) + lm_head_memory_bound_bytes(
            model, microbatch_size, tensor, sequence_parallel
        )
        moved = moved + module.scaled(model.mtp_layers)
    return moved
