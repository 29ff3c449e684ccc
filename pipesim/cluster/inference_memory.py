"""How many tokens of KV cache a serving replica holds.

A serving engine loads the weights first and gives what memory is left to a paged KV
cache (vLLM profiles one forward of the largest batch, keeps ``gpu_memory_utilization`` of
the GPU's memory, and fills the rest with blocks). Each GPU holds its stage's share of the
weights and, for every token in flight, that token's KV entries for its stage's layers
(``pipesim.cluster.inference_attention``), so the GPU with the least room per token
limits the replica.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.cluster.gpus import GpuProfile
from pipesim.cluster.hardware import gpu_profile
from pipesim.cluster.inference_attention import kv_bytes_per_token_per_layer
from pipesim.cluster.model import partition_layers
from pipesim.cluster.shape import TransformerModel
from pipesim.cluster.transformer import stage_parameters


def kv_capacity_tokens(
    model: TransformerModel,
    gpu: GpuProfile | str,
    *,
    tensor: int,
    pipeline: int,
    gpu_memory_utilization: float,
    workspace_bytes: float | None = None,
    partition: Sequence[int] | None = None,
) -> int:
    """Tokens of KV cache one replica (``tensor x pipeline`` GPUs) can hold.

    Like vLLM, each GPU gives ``memory * gpu_memory_utilization`` to the engine; its share of
    the weights (its stage's weights over ``tensor``: with expert parallelism a GPU holds
    ``E / expert`` routed experts, each split ``tensor / expert`` ways, the same bytes) and ``workspace_bytes`` (activations of
    the largest batch, CUDA graphs; 0 when not given) come off first, and the rest holds KV
    entries of its stage's layers (``kv_bytes_per_token_per_layer``: MLA's latent, whole
    on every GPU). Every stage keeps the KV of every token in flight for its
    own layers, so the stage with the least room per token (stages split as ``partition``
    says, evenly by default; the first and last heavier by the embedding and the LM head)
    limits the replica.

    Raises ValueError, naming the stage and the sizes, when a stage's weights do not fit.
    """
    gpu = gpu_profile(gpu) if isinstance(gpu, str) else gpu
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    partition = partition_layers(model, pipeline, "even" if partition is None else partition)
    budget = gpu.memory_bytes * gpu_memory_utilization - (workspace_bytes or 0.0)
    per_layer = kv_bytes_per_token_per_layer(model, tensor)
    capacity = None
    for stage, (layers, params) in enumerate(
        zip(partition, stage_parameters(model, partition), strict=True)
    ):
        free = budget - params * model.dtype_bytes / tensor
        if free < layers * per_layer:
            raise ValueError(
                f"the weights of stage {stage} ({params * model.dtype_bytes / tensor / 2**30:.2f} "
                f"GiB per GPU at tensor={tensor}, pipeline={pipeline}) leave no room for a KV "
                f"cache in {gpu.name}'s {gpu.memory_bytes / 2**30:.0f} GiB x "
                f"{gpu_memory_utilization}; use more GPUs per replica"
            )
        tokens = int(free // (layers * per_layer))
        capacity = tokens if capacity is None else min(capacity, tokens)
    assert capacity is not None
    return capacity


__all__ = ["kv_capacity_tokens"]
