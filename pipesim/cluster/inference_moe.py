"""What a mixture-of-experts layer costs in one serving iteration.

A MoE layer (``pipesim.cluster.moe``) holds ``E`` routed experts and sends each token to
``k`` of them. Training's microbatches touch every expert; a decode step of a few
sequences does not: a batch of ``n`` tokens, each choosing ``k`` of the ``E`` experts
(uniform routing, no expert chosen twice by one token), leaves an expert untouched with
probability ``(1 - k / E)^n``, so it touches

    E (1 - (1 - k / E)^n)

distinct experts on average (the expected number of occupied bins when balls are thrown
into bins, here ``k`` distinct bins a throw; ``expected_experts_touched``): ``k`` for one
token, every expert for a large batch. A decode step reads the weights of the experts it
touches, and no others: Mixtral 8x7B at batch 1 reads 2 of its 8 experts a layer, at batch
64 all of them. Its expert GEMMs do ``2 n k`` FLOPs per expert weight whatever the batch.

Expert parallelism in a serving replica (``expert`` ranks, vLLM's
``--enable-expert-parallel``, Megatron-Core's ``--expert-model-parallel-size``): the
``tensor`` GPUs of a stage hold its attention split ``tensor`` ways as always, and its
routed experts ``E / expert`` to each of ``expert`` ranks, every expert split ``tensor /
expert`` ways (so ``expert`` divides ``tensor``; ``expert = 1`` is plain tensor
parallelism of every expert, ``expert = tensor`` whole experts on every GPU). A GPU reads
``1 / expert`` of the touched experts, each ``expert / tensor`` of its weights, and
computes ``n k / expert`` token copies.

With ``expert > 1`` every MoE layer dispatches each token copy to the rank holding its
expert and combines the results back: two all-to-alls over the stage's GPUs (the intra-node
link). Each GPU dispatches the copies of its ``n / tensor`` tokens (the batch split over
the tensor-parallel ranks, as Megatron-Core's all-to-all dispatcher runs under sequence
parallelism), of which ``1 / expert`` stay on it, so each all-to-all moves
``(n / tensor) k h dtype (expert - 1) / expert`` bytes off each GPU
(``dispatch_bytes``), priced by ``pipesim.cluster.all_to_all.all_to_all_ms``. The tensor
parallelism's two all-reduces per layer are counted as for a dense layer.

Routing is taken as uniform: no expert is hotter than another, and no token is dropped
(serving engines apply no capacity factor).
"""

from __future__ import annotations

from pipesim.cluster.all_to_all import all_to_all_ms
from pipesim.cluster.efficiency import Efficiency
from pipesim.cluster.gemm import TILE_M, grouped_gemm_ms
from pipesim.cluster.gpus import GpuProfile
from pipesim.cluster.shape import TransformerModel
from pipesim.cluster.transformer import layer_parameters
from pipesim.sim.links import Link


def stage_layer_kinds(
    model: TransformerModel, layers: int, start: int = 0
) -> tuple[tuple[int, TransformerModel], ...]:
    """The ``layers`` layers of a stage from index ``start`` as ``(count, the model as that
    layer sees it)``: the dense layers (a MoE model's first ``dense_layers``), then the MoE
    layers; kinds with no layer left out."""
    dense, moe = model.layer_split(layers, start)
    kinds = ((dense, model.dense_layer), (moe, model))
    return tuple((count, view) for count, view in kinds if count)


def expected_experts_touched(experts: int, top_k: int, tokens: float) -> float:
    """Distinct experts a batch of ``tokens`` tokens touches on average, each token
    choosing ``top_k`` of ``experts`` uniformly: ``E (1 - (1 - k / E)^n)`` (module
    docstring); 0 for no tokens."""
    if not 1 <= top_k <= experts:
        raise ValueError(f"top_k must be in [1, experts], got {top_k=}, {experts=}")
    if tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def experts_tensor(tensor: int, expert: int) -> int:
    """How many ways each expert is split: ``tensor / expert``."""
    if expert < 1 or tensor % expert:
        raise ValueError(f"expert must divide tensor, got {expert=}, {tensor=}")
    return tensor // expert


def routed_expert_read_bytes(
    model: TransformerModel, tokens: int, *, tensor: int = 1, expert: int = 1
) -> float:
    """Expert weight bytes one GPU reads in one MoE layer for a batch of ``tokens`` tokens:
    its ``1 / expert`` share of the touched experts, ``expert / tensor`` of each one's
    matrices (``3 h f_e`` gated)."""
    moe = _moe(model)
    touched = expected_experts_touched(moe.experts, moe.top_k, tokens) / expert
    weights = moe.expert_weights(model.hidden, model.mlp_matrices)
    return touched * weights * model.dtype_bytes / experts_tensor(tensor, expert)


def layer_read_bytes(
    model: TransformerModel, tokens: int, *, tensor: int = 1, expert: int = 1
) -> float:
    """Weight bytes one GPU reads in one layer for a batch of ``tokens`` tokens: a dense
    layer's ``1 / tensor`` share of all its weights; a MoE layer's share of its attention,
    router and shared experts, and of the routed experts it touches
    (``routed_expert_read_bytes``)."""
    whole = layer_parameters(model) * model.dtype_bytes / tensor
    moe = model.moe
    if moe is None:
        return whole
    routed = moe.experts * moe.expert_parameters(model.hidden, model.mlp_matrices)
    dense_part = whole - routed * model.dtype_bytes / tensor
    return dense_part + routed_expert_read_bytes(model, tokens, tensor=tensor, expert=expert)


def routed_experts_ms(
    model: TransformerModel,
    tokens: int,
    gpu: GpuProfile,
    efficiency: Efficiency,
    *,
    read_bytes_per_s: float,
    tensor: int = 1,
    expert: int = 1,
) -> float:
    """One MoE layer's routed experts on one GPU (ms): the up (with the gate) and the down
    projection, each one grouped GEMM over the GPU's touched experts (vLLM's fused MoE
    kernel), at the longer of its math and reading the touched experts' matrices. The
    ``tokens k / expert`` copies are dealt evenly over the touched experts; rows fewer
    than a tile pay their share of a tile's rows, as ``thin_gemm_ms`` prices a thin GEMM."""
    moe = _moe(model)
    if tokens <= 0:
        return 0.0
    split = experts_tensor(tensor, expert)
    touched = expected_experts_touched(moe.experts, moe.top_k, tokens) / expert
    rows = tokens * moe.top_k / expert / touched  # token copies per touched expert
    count = max(1, round(touched))
    width = moe.expert_ffn_hidden // split
    total = 0.0
    for n, k in (((model.mlp_matrices - 1) * width, model.hidden), (model.hidden, width)):
        if rows < TILE_M:
            tile = grouped_gemm_ms([(TILE_M, n, k, count)], gpu, efficiency, fp8=model.fp8)
            math_ms = max(tile * rows / TILE_M, gpu.kernel_launch_us * 1e-3)
        else:
            shape = [(round(rows), n, k, count)]
            math_ms = grouped_gemm_ms(shape, gpu, efficiency, fp8=model.fp8)
        read_ms = touched * n * k * model.dtype_bytes / read_bytes_per_s * 1e3
        total += max(math_ms, read_ms)
    return total


def dispatch_bytes(
    model: TransformerModel, tokens: float, *, tensor: int = 1, expert: int = 1
) -> float:
    """Bytes one GPU sends to the other ranks in one dispatch (or combine) of one MoE
    layer: ``(tokens / tensor) k h dtype (expert - 1) / expert`` (module docstring)."""
    moe = _moe(model)
    copies = tokens / tensor * moe.top_k
    return copies * model.hidden * model.dtype_bytes * (expert - 1) / expert


def expert_all_to_all_ms(
    model: TransformerModel, tokens: float, link: Link, *, tensor: int = 1, expert: int = 1
) -> float:
    """One MoE layer's dispatch and combine on ``expert`` ranks over ``link`` (ms): two
    all-to-alls of each GPU's ``tokens / tensor`` tokens' copies; nothing with one rank."""
    if expert == 1 or tokens <= 0:
        return 0.0
    buffer = tokens / tensor * _moe(model).top_k * model.hidden * model.dtype_bytes
    return 2 * all_to_all_ms(buffer, expert, link)


def _moe(model: TransformerModel):
    if model.moe is None:
        raise ValueError("a mixture-of-experts layer needs model.moe")
    return model.moe


__all__ = [
    "dispatch_bytes",
    "expected_experts_touched",
    "expert_all_to_all_ms",
    "experts_tensor",
    "layer_read_bytes",
    "routed_expert_read_bytes",
    "routed_experts_ms",
    "stage_layer_kinds",
]
