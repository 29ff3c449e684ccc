"""Context parallelism: one long sequence split over N GPUs, attention stitched back together.

At 128K tokens a single sequence's activations no longer fit one GPU, and tensor
parallelism does not help the attention, whose cost grows with the square of the sequence.
Context parallelism (Megatron-LM's ``--context-parallel-size``, torch's
``torch.distributed.tensor.experimental.context_parallel``) gives each of ``N`` GPUs
``s / N`` tokens of every sequence. Everything but attention works token by token, so the
linear layers, norms and activations run on the local tokens alone: their FLOPs, bytes and
activation memory per GPU divide by N. Attention needs every earlier key, which two
schemes supply:

* ``ring`` (Megatron-LM / TransformerEngine ``cp_comm_type="p2p"``, ring attention): each
  GPU keeps its queries and passes its key and value chunk to the next GPU, N - 1 times per
  layer, computing attention against the chunk it holds while the next one is in flight.
  The sequence is cut into 2N chunks and GPU i takes chunks i and 2N - 1 - i, so under the
  causal mask every GPU does the same work (Megatron-LM's load balancing; torch's
  ``enable_load_balance``). A step's transfer is exposed only where it outlasts one chunk's
  attention. The backward sends the chunk again with its key and value gradients.
* ``all-to-all`` (DeepSpeed-Ulysses, TE ``cp_comm_type="a2a"``): four all-to-alls per layer
  re-shard the queries, keys and values from sequence-split to head-split, each GPU runs
  full-sequence attention on ``1 / N`` of the heads, and a fourth all-to-all returns the
  output to sequence-split; the backward runs the same four on the gradients. They sit on
  the critical path. The heads (and key/value heads) must split over tensor x context.

Either way a GPU's attention scores are ``1 / N`` of the sequence's, as N blocks the size
of its local attention (``s/N`` queries against ``s/N`` keys each).

Sources: Megatron-LM's context-parallel guide
(https://docs.nvidia.com/megatron/parallelism-guide/context-parallel.md); torch's
``_RotateMethod`` (ALL_GATHER, ALL_TO_ALL) and load balancing in pytorch/pytorch
``torch/distributed/tensor/experimental/_attention.py``. Megatron-LM reduces gradients over
the combined data- and context-parallel group (``_DATA_PARALLEL_GROUP_WITH_CP`` in
``megatron/core/parallel_state.py``), with ranks ordered tensor, context, data, pipeline:
the N x t GPUs of one context group are consecutive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pipesim.cluster.all_to_all import all_to_all_ms
from pipesim.cluster.efficiency import Efficiency, attention_ms
from pipesim.cluster.hardware import GpuProfile
from pipesim.cluster.moe import ONE_RANK, ExpertSplit
from pipesim.cluster.pass_time import PassTimes, TensorParallel, stage_pass_times
from pipesim.cluster.transformer import TransformerModel, layer_flops, sequence_share
from pipesim.sim.links import Link

RING = "ring"
ALL_TO_ALL = "all-to-all"
CONTEXT_MODES = (RING, ALL_TO_ALL)


@dataclass(frozen=True, slots=True)
class ContextParallel:
    """A stage's context parallelism: ``degree`` GPUs share each sequence, exchanging keys
    and values by ``mode`` (``ring`` or ``all-to-all``) over ``link``."""

    degree: int = 1
    mode: str = RING
    link: Link | None = None


@dataclass(frozen=True, slots=True)
class LayerContextMs:
    """What context parallelism adds to one layer's forward and input-gradient backward on
    one GPU, in milliseconds: the attention blocks beyond the local one, and the
    communication not hidden behind them."""

    forward_ms: float = 0.0
    backward_input_ms: float = 0.0


def local_model(model: TransformerModel, context: int) -> TransformerModel:
    """The model one context-parallel GPU runs token by token: ``s / N`` tokens a sequence.
    Context parallelism needs a fused attention kernel (``flash_attention``): both schemes
    run inside one (TransformerEngine's, torch's SDPA), never materialising the scores."""
    if context == 1:
        return model
    if not model.flash_attention:
        raise ValueError(f"context parallelism ({context=}) needs flash_attention")
    return replace(model, seq_len=sequence_share(model, context))


def context_link(
    tensor: int, context: int, gpus_per_node: int, intra_node_link: Link, inter_node_link: Link
) -> Link:
    """The link a context group communicates over: its ``tensor x context`` consecutive GPUs
    fit in a node, or the ring crosses nodes and the network is its bottleneck."""
    return intra_node_link if tensor * context <= gpus_per_node else inter_node_link


def _heads_per_gpu(heads: int, tensor: int) -> float:
    return max(heads / tensor, 1.0)  # fewer heads than tensor ranks: each holds a copy


def kv_chunk_bytes(
    model: TransformerModel, microbatch_size: int, context: int, tensor: int = 1
) -> float:
    """The key and value chunk a ring step sends: ``2 b (s/N) (g/t) d`` elements."""
    heads = _heads_per_gpu(model.kv_head_count, tensor)
    tokens = microbatch_size * sequence_share(model, context)
    return 2 * tokens * heads * model.head_dim * model.dtype_bytes


def all_to_all_bytes(
    model: TransformerModel, microbatch_size: int, context: int, tensor: int = 1
) -> tuple[float, float, float, float]:
    """Bytes per GPU of the four forward all-to-alls: queries, keys, values and the output,
    ``b (s/N) (heads/t) d`` elements each (key/value heads for K and V)."""
    tokens = microbatch_size * sequence_share(model, context) * model.head_dim * model.dtype_bytes
    query = tokens * _heads_per_gpu(model.heads, tensor)
    kv = tokens * _heads_per_gpu(model.kv_head_count, tensor)
    return query, kv, kv, query


def p2p_ms(nbytes: float, link: Link) -> float:
    """One message of ``nbytes`` to the next GPU: latency plus bytes over bandwidth."""
    moved = 0.0 if math.isinf(link.bandwidth_gbps) else nbytes / (link.bandwidth_gbps * 1e6)
    return link.latency_us / 1000.0 + moved


def context_all_to_all_ms(nbytes_per_rank: float, ranks: int, link: Link) -> float:
    """An all-to-all over ``ranks`` GPUs of a context group, each holding ``nbytes_per_rank``:
    it keeps ``1 / ranks`` and sends the rest, priced as NCCL runs it
    (``pipesim.cluster.all_to_all.all_to_all_ms``) with the whole group on ``link`` (the
    link ``context_link`` picks: NVLink inside a node, else the network). On a link given by
    its numbers that is one latency plus ``(ranks - 1) / ranks`` of the bytes."""
    return all_to_all_ms(nbytes_per_rank, ranks, link)


def ring_exposed_ms(step_ms: float, block_ms: float, steps: int) -> float:
    """Ring communication not hidden: each of the ``steps`` transfers overlaps one block of
    attention, and shows what outlasts it, ``steps x max(0, step - block)``."""
    return steps * max(step_ms - block_ms, 0.0)


def layer_context_ms(
    model: TransformerModel,
    microbatch_size: int,
    gpu: GpuProfile,
    efficiency: Efficiency,
    cp: ContextParallel,
    tensor: int = 1,
) -> LayerContextMs:
    """What one layer adds on one GPU under context parallelism of degree ``context``, on
    top of the local model's passes (``local_model``: its own ``s/N`` tokens' attention is
    already counted there).

    Attention: N blocks instead of the local one, so N - 1 more, each the local block's
    time (forward ``4 b (s/N)^2 h / t`` FLOPs at the attention rate, backward twice that).
    Ring: N - 1 steps, each sending ``kv_chunk_bytes`` forward (twice that backward, the
    gradients riding along) while one block computes. All-to-all: four all-to-alls each
    pass, all exposed."""
    context, mode, link = cp.degree, cp.mode, cp.link
    if context == 1:
        return LayerContextMs()
    if link is None:
        raise ValueError(f"context parallelism ({context=}) needs a link between its GPUs")
    local = local_model(model, context)
    flops = layer_flops(local, microbatch_size)
    tokens = microbatch_size * local.seq_len
    block = attention_ms((flops.forward - flops.backward_weight) / tensor, gpu, efficiency, tokens)
    extra = LayerContextMs((context - 1) * block, (context - 1) * 2 * block)
    if mode == RING:
        chunk = kv_chunk_bytes(model, microbatch_size, context, tensor)
        forward = ring_exposed_ms(p2p_ms(chunk, link), block, context - 1)
        backward = ring_exposed_ms(p2p_ms(2 * chunk, link), 2 * block, context - 1)
    elif mode == ALL_TO_ALL:
        sizes = all_to_all_bytes(model, microbatch_size, context, tensor)
        forward = backward = sum(context_all_to_all_ms(b, context, link) for b in sizes)
    else:
        raise ValueError(f"context mode must be one of {CONTEXT_MODES}, got {mode!r}")
    return LayerContextMs(extra.forward_ms + forward, extra.backward_input_ms + backward)


def with_context_passes(
    passes: PassTimes, layers: int, added: LayerContextMs, recompute: bool
) -> PassTimes:
    """A stage's passes with each of its ``layers`` layers' context-parallel work
    (``layer_context_ms``): in F, and in I (with recomputation twice: its forward runs the
    ring again)."""
    forward = layers * added.forward_ms
    backward = layers * added.backward_input_ms + (forward if recompute else 0.0)
    return PassTimes(
        passes.forward_ms + forward, passes.backward_input_ms + backward, passes.backward_weight_ms
    )


def stage_passes(
    model: TransformerModel,
    partition: Sequence[int],
    microbatch_size: int,
    gpu: GpuProfile,
    efficiency: Efficiency,
    tp: TensorParallel,
    cp: ContextParallel,
    split: ExpertSplit = ONE_RANK,
) -> list[PassTimes]:
    """Each stage's three passes on one GPU (``pipesim.cluster.pass_time``): the local
    model's (``local_model``: the model itself without context parallelism), with each
    layer's context-parallel attention and communication on top; routed experts as
    ``split`` runs them."""
    local, last, start = local_model(model, cp.degree), len(partition) - 1, 0
    shapes: dict[tuple, PassTimes] = {}  # stages of one shape pass alike
    passes = []
    for k, layers in enumerate(partition):
        shape = (model.layer_split(layers, start), k == 0, k == last)
        if shape not in shapes:
            shapes[shape] = stage_pass_times(
                local,
                layers,
                microbatch_size,
                gpu,
                efficiency,
                tp,
                first=k == 0,
                last=k == last,
                start=start,
                split=split,
            )
        passes.append(shapes[shape])
        start += layers
    if cp.degree == 1:
        return passes
    added = layer_context_ms(model, microbatch_size, gpu, efficiency, cp, tp.degree)
    return [
        with_context_passes(p, layers, added, model.recompute)
        for p, layers in zip(passes, partition, strict=True)
    ]


__all__ = [
    "ALL_TO_ALL",
    "CONTEXT_MODES",
    "ContextParallel",
    "RING",
    "LayerContextMs",
    "all_to_all_bytes",
    "context_all_to_all_ms",
    "context_link",
    "kv_chunk_bytes",
    "layer_context_ms",
    "local_model",
    "p2p_ms",
    "ring_exposed_ms",
    "stage_passes",
    "with_context_passes",
]
