"""From a transformer's shape and a GPU to what each pipeline stage costs.

``pipesim.transformer`` counts FLOPs and bytes; this module decides how the layers are split
into stages (``partition_layers``), how fast the GPU runs them (``Efficiency``), what tensor
and data parallelism add (``pipesim.parallel``), and assembles the per-stage ``Costs`` the
engine consumes (``stage_costs``).

    model = TransformerModel(layers=32, hidden=4096, heads=32, seq_len=4096, vocab=50304)
    partition = partition_layers(model, stages=4, mode="balanced")
    costs = stage_costs(model, partition, microbatch_size=1, gpu="h100-sxm")
"""

from __future__ import annotations

import bisect
import functools
import heapq
from collections import Counter
from collections.abc import Callable, Sequence

from pipesim.cluster.activations import (
    activation_message_bytes,
    layer_activation_memory_bytes,
    stage_activation_memory_bytes,
    stage_extra_activation_bytes,
)
from pipesim.cluster.balance import balanced_split
from pipesim.cluster.context_parallel import RING, ContextParallel, local_model, stage_passes
from pipesim.cluster.efficiency import FLOPS_ONLY, Efficiency, compute_ms
from pipesim.cluster.hardware import GpuProfile, gpu_profile
from pipesim.cluster.layout import layout_partition
from pipesim.cluster.memo import by_value
from pipesim.cluster.moe import ONE_RANK, ExpertSplit
from pipesim.cluster.parallel import data_parallel_allreduce_ms, tensor_parallel_comm_ms
from pipesim.cluster.pass_time import TensorParallel, stage_pass_times
from pipesim.cluster.static_memory import StaticMemory, static_memory
from pipesim.cluster.transformer import (
    PassFlops,
    TransformerModel,
    layer_flops,
    layer_parameters,
    lm_head_flops,
    model_flops_per_step,
    stage_flops,
    stage_parameters,
)
from pipesim.sim.costs import Costs
from pipesim.sim.links import Link

# What "balanced" equalises: per layer (or one number a layer), the first stage's extra and
# the last stage's extra.
Loads = tuple[int | tuple[int, ...], int, int]

__all__ = [
    "FLOPS_ONLY",
    "Efficiency",
    "PassFlops",
    "StaticMemory",
    "TransformerModel",
    "activation_message_bytes",
    "compute_ms",
    "data_parallel_allreduce_ms",
    "layer_activation_memory_bytes",
    "layer_flops",
    "layer_parameters",
    "lm_head_flops",
    "mfu",
    "model_flops_per_step",
    "flops_loads",
    "is_layout",
    "partition_layers",
    "stage_activation_memory_bytes",
    "stage_costs",
    "stage_extra_activation_bytes",
    "stage_flops",
    "stage_parameters",
    "stage_work_flops",
    "static_memory",
    "time_loads",
]


def mfu(
    model: TransformerModel, global_batch: int, step_ms: float, gpu: GpuProfile, gpus: int
) -> float:
    """Model FLOPs utilisation: useful FLOP/s over the peak of all ``gpus`` GPUs."""
    achieved = model_flops_per_step(model, global_batch) / (step_ms / 1e3)
    return achieved / (gpu.peak_tflops * 1e12 * gpus)


# -- partitioning --------------------------------------------------------------------------


@by_value  # a planner asks again for every candidate that shares it
def partition_layers(
    model: TransformerModel,
    stages: int,
    mode: str | Sequence[int] = "even",
    *,
    loads: Loads | None = None,
) -> tuple[int, ...]:
    """How many layers each stage holds.

    ``"even"``: ``layers // stages`` each, the remainder one by one to the first stages (the
    last stage already carries the LM head). ``"balanced"``: the split that minimises the
    slowest stage's load, exact (a binary search over the possible bottlenecks); the load is
    ``loads = (per layer, first stage's extra, last stage's extra)``, by default forward +
    backward FLOPs per microbatch (``flops_loads``), or stage times (``time_loads``); where
    a model's layers differ (dense layers before MoE layers) the per-layer load is one
    number a layer (``pipesim.cluster.balance``). Both give every stage at least one layer. A list ``[n0, n1, ...]`` is taken as given once
    checked, and so is a Megatron-LM layout string (``pipesim.cluster.layout``): there the
    first stage (with the embedding) and the last (with the LM head) may hold no layer.
    """
    if isinstance(mode, str) and mode not in ("even", "balanced"):
        if not is_layout(mode):
            raise ValueError(
                f"unknown partition mode {mode!r}; allowed: 'even', 'balanced', a list, "
                "or a layout string such as 'Et|tt|tL'"
            )
        return layout_partition(mode, model.layers, stages)
    if isinstance(mode, str):
        if stages < 1 or stages > model.layers:
            raise ValueError(f"need 1 <= stages <= layers, got {stages=}, layers={model.layers}")
        if mode == "even":
            base, extra = divmod(model.layers, stages)
            return tuple(base + (1 if k < extra else 0) for k in range(stages))
        per_layer, first_extra, last_extra = loads or flops_loads(model)
        if isinstance(per_layer, tuple):
            return balanced_split(per_layer, stages, first_extra, last_extra)
        return _balanced(model.layers, stages, (per_layer, first_extra, last_extra))
    counts = tuple(int(n) for n in mode)
    if len(counts) != stages:
        raise ValueError(f"partition {list(counts)} has {len(counts)} entries, expected {stages}")
    inner = counts[1:-1] if stages > 1 else counts
    if min(counts) < 0 or min(inner, default=1) < 1 or sum(counts) != model.layers:
        raise ValueError(
            f"partition {list(counts)} must sum to {model.layers} and give every stage >= 1 "
            "layer (the first and the last may hold 0: the embedding or the LM head alone)"
        )
    return counts


def is_layout(mode: object) -> bool:
    """Whether a partition is a layout string (holds the embedding letter ``E``)."""
    return isinstance(mode, str) and "E" in mode


def stage_work_flops(model: TransformerModel, partition: Sequence[int]) -> tuple[int, ...]:
    """Forward + backward FLOPs of one one-sequence microbatch on each stage (what
    ``"balanced"`` equalises)."""
    last, starts = len(partition) - 1, _starts(partition)
    return tuple(
        stage_flops(model, n, 1, first=k == 0, last=k == last, start=starts[k]).total
        for k, n in enumerate(partition)
    )


def flops_loads(model: TransformerModel) -> Loads:
    """What ``"balanced"`` equalises by default: forward + backward FLOPs of one layer (one
    number a layer where they differ), of the first stage's extra work (none: the embedding
    lookup has no FLOPs) and of the last stage's (the LM head and the MTP modules), for a
    one-sequence microbatch."""

    def layer_at(start: int) -> int:
        return stage_flops(model, 1, 1, first=False, last=False, start=start).total

    return (
        _per_layer(model, layer_at),
        0,
        stage_flops(model, 0, 1, first=False, last=True).total,
    )


@functools.lru_cache(maxsize=1 << 14)
def time_loads(
    model: TransformerModel,
    microbatch_size: int,
    gpu: GpuProfile,
    efficiency: Efficiency,
    tp: TensorParallel | None = None,
    split: ExpertSplit = ONE_RANK,
) -> Loads:
    """The same three loads as stage times in picoseconds (F + I + W from
    ``pipesim.cluster.pass_time``): with memory-bound work counted, the embedding and the
    loss weigh more than their FLOPs say, and a FLOPs-balanced split leaves the last stage
    slower than the others. MoE layers run their routed experts as ``split`` says."""
    tp = tp or TensorParallel()

    def total_ps(layers: int, first: bool, last: bool, start: int = 0) -> int:
        p = stage_pass_times(
            model,
            layers,
            microbatch_size,
            gpu,
            efficiency,
            tp,
            first=first,
            last=last,
            start=start,
            split=split,
        )
        return round((p.forward_ms + p.backward_input_ms + p.backward_weight_ms) * 1e9)

    return (
        _per_layer(model, lambda start: total_ps(1, False, False, start)),
        total_ps(0, True, False),
        total_ps(0, False, True),
    )


def _per_layer(model: TransformerModel, load_at: Callable[[int], int]) -> int | tuple[int, ...]:
    """One layer's load (``load_at(index)``), or one a layer where the model's dense layers
    and MoE layers differ."""
    dense, moe = model.layer_split(model.layers)
    if not (dense and moe):
        return load_at(0)
    return (load_at(0),) * dense + (load_at(dense),) * moe


def _starts(partition: Sequence[int]) -> list[int]:
    """The index of each stage's first layer."""
    return [sum(partition[:k]) for k in range(len(partition))]


def _balanced(layers: int, stages: int, loads: tuple[int, int, int]) -> tuple[int, ...]:
    per_layer, first_extra, last_extra = loads
    extras = [0] * stages
    extras[0] += first_extra
    extras[-1] += last_extra
    groups = Counter(extras)  # stages alike in their extra load (embedding, LM head, none)

    def feasible(limit: int) -> bool:
        caps = {e: (limit - e) // per_layer for e in groups}
        held = sum(caps[e] * n for e, n in groups.items())
        return min(caps.values()) >= 1 and held >= layers

    # The bottleneck is some stage's load n * per_layer + extra. For each distinct extra,
    # binary search the smallest feasible n; the least of those limits is the optimum.
    layer_counts = range(1, layers + 1)
    limits = []
    for extra in groups:
        index = bisect.bisect_left(
            layer_counts, True, key=lambda n: feasible(n * per_layer + extra)
        )
        if index < len(layer_counts):
            limits.append(layer_counts[index] * per_layer + extra)
    assert limits, f"no feasible partition for {layers=}, {stages=}"
    caps = [(min(limits) - e) // per_layer for e in extras]
    return tuple(_level_down(caps, extras, per_layer, layers))


def _level_down(counts: list[int], extras: list[int], per_layer: int, layers: int) -> list[int]:
    """Take layers away from the most loaded stage (never below one) until ``layers`` remain,
    so the rest stay as even as can be.

    Lowering every load above some level to that level is a state this one-by-one greedy
    passes through, so the bulk of the work is a binary search for the lowest level that
    still holds ``layers``; fewer than one layer per stage is left to take one by one.
    """
    groups = Counter(zip(counts, extras, strict=True))

    def at(level: int, count: int, extra: int) -> int:
        return min(count, max(1, (level - extra) // per_layer))

    low, high = 0, max(c * per_layer + e for c, e in groups)
    while low < high:
        mid = (low + high) // 2
        if sum(n * at(mid, c, e) for (c, e), n in groups.items()) >= layers:
            high = mid
        else:
            low = mid + 1
    counts = [at(low, c, e) for c, e in zip(counts, extras, strict=True)]
    heap = [(-(n * per_layer + e), k) for k, (n, e) in enumerate(zip(counts, extras, strict=True))]
    heapq.heapify(heap)
    for _ in range(sum(counts) - layers):
        while True:
            _, k = heapq.heappop(heap)
            if counts[k] > 1:
                break
        counts[k] -= 1
        heapq.heappush(heap, (-(counts[k] * per_layer + extras[k]), k))
    return counts


# -- assembling Costs ----------------------------------------------------------------------


@by_value  # a planner asks again for every candidate that shares it
def stage_costs(
    model: TransformerModel,
    partition: Sequence[int],
    microbatch_size: int,
    gpu: GpuProfile | str,
    efficiency: Efficiency | None = None,
    tensor: int = 1,
    tensor_link: Link | None = None,
    sequence_parallel: bool = False,
    *,
    tensor_overlap: bool = False,
    context: int = 1,
    context_mode: str = RING,
    context_link: Link | None = None,
    scatter_gather: bool = False,
    expert_split: ExpertSplit = ONE_RANK,
) -> Costs:
    """Per-stage durations and sizes of ``model`` split as ``partition``, one microbatch of
    ``microbatch_size`` sequences, on ``gpu``. Each pass is its GEMM FLOPs divided by ``tensor`` over the achieved rate, the attention
    scores over the attention kernel's rate, the memory-bound operators' bytes over the
    achieved bandwidth, and the embedding, LM head and loss on the first and last stages
    (``pipesim.cluster.pass_time``). With ``tensor > 1`` each layer adds two ring
    all-reduces of its activation per pass over ``tensor_link`` (required then): to F, and
    to I (with recomputation, twice to I: the recomputed forward has its own); with
    ``tensor_overlap`` only what the layer's GEMMs do not hide
    (``Efficiency.tensor_overlap_fraction``). W has no communication. ``efficiency``:
    ``Efficiency()`` by default, ``FLOPS_ONLY`` counts matrix multiplications alone.
    Between stages each GPU sends all ``b s h`` elements, or with ``sequence_parallel`` its
    ``1/tensor`` of the sequence (Megatron-LM's ``get_tensor_shapes``), each tensor-parallel
    rank over its own link; ``scatter_gather`` splits it so without sequence parallelism
    too (Narayanan et al. 2021, 4.1; not the receivers' all-gather). ``context`` GPUs share
    each sequence (``context_mode`` over ``context_link``), each running ``s / context``
    tokens and ``pipesim.cluster.context_parallel``'s attention. Routed experts run as
    ``expert_split`` says (``pipesim.cluster.moe``)."""
    gpu = gpu_profile(gpu) if isinstance(gpu, str) else gpu
    efficiency = Efficiency() if efficiency is None else efficiency
    partition = partition_layers(model, len(partition), partition)
    local = local_model(model, context)
    message = activation_message_bytes(local, microbatch_size)
    tp = _tensor_parallel(
        message, microbatch_size, tensor, tensor_link, sequence_parallel, tensor_overlap, efficiency
    )
    cp = ContextParallel(context, context_mode, context_link)
    passes = stage_passes(model, partition, microbatch_size, gpu, efficiency, tp, cp, expert_split)
    shape = (model, partition, microbatch_size, tensor, sequence_parallel)
    act, wgrad = stage_activation_memory_bytes(
        *shape, context=context, load_factor=expert_split.load_factor
    )
    return Costs(
        forward_ms=tuple(p.forward_ms for p in passes),
        backward_ms=tuple(p.backward_input_ms + p.backward_weight_ms for p in passes),
        backward_input_ms=tuple(p.backward_input_ms for p in passes),
        backward_weight_ms=tuple(p.backward_weight_ms for p in passes),
        activation_bytes=(message / (tensor if sequence_parallel or scatter_gather else 1),)
        * len(partition),
        activation_memory_bytes=tuple(act),
        weight_grad_memory_bytes=tuple(wgrad),
        overhead_ms=efficiency.launch_overhead_ms,
    )


def _tensor_parallel(
    message_bytes: int,
    microbatch_size: int,
    tensor: int,
    link: Link | None,
    sequence_parallel: bool,
    overlap: bool,
    efficiency: Efficiency,
) -> TensorParallel:
    if tensor < 1 or microbatch_size < 1:
        raise ValueError(
            f"tensor and microbatch_size must be >= 1, got {tensor=}, {microbatch_size=}"
        )
    if tensor > 1 and link is None:
        raise ValueError(f"tensor parallelism ({tensor=}) needs tensor_link, the intra-node link")
    comm_ms = 0.0
    if tensor > 1:
        comm_ms = tensor_parallel_comm_ms(
            message_bytes, tensor, link, sequence_parallel=sequence_parallel
        )
    return TensorParallel(
        degree=tensor,
        comm_ms=comm_ms,
        sequence_parallel=sequence_parallel,
        overlap=overlap,
        hidden_fraction=efficiency.tensor_overlap_fraction,
        slowdown=efficiency.overlap_slowdown,
    )
