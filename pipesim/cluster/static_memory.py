"""What one GPU of a stage holds besides activations: its weights, gradients and optimizer
states (``static_memory``), as each optimizer implementation keeps them
(``pipesim.cluster.optimizers``), with the FP8 copies of the weights under ``model.fp8``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipesim.cluster.memo import by_value
from pipesim.cluster.optimizers import (
    DEFAULT_OPTIMIZER,
    optimizer_implementation,
    parameter_bytes,
    sharding_stage,
)
from pipesim.cluster.transformer import (
    FP8_WEIGHT_COPY_BYTES,
    TransformerModel,
    layer_parameters,
    stage_layer_groups,
    stage_parameters,
)


@dataclass(frozen=True, slots=True)
class ExpertSharding:
    """The routed experts' part of each stage's parameters under expert parallelism:
    ``routed`` all of them, ``local`` those of the expert slots one GPU holds (before their
    ``tensor``-way split), and the ``replicas`` of each expert, over which ZeRO shards
    their optimizer states (Megatron-Core's expert data-parallel group)."""

    routed: tuple[float, ...]
    local: tuple[float, ...]
    tensor: int
    replicas: int

    def split(self, k: int, params: float, tensor: int) -> tuple[float, float]:
        """Stage ``k``'s parameters on one GPU: ``(dense part / tensor, local experts /
        the experts' tensor)``."""
        return (params - self.routed[k]) / tensor, self.local[k] / self.tensor


@dataclass(frozen=True, slots=True)
class StaticMemory:
    """Bytes that live for the whole step on one GPU of a stage."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes


@by_value  # a planner asks again for every candidate that shares it
def static_memory(
    model: TransformerModel,
    partition: Sequence[int],
    data_parallel: int = 1,
    zero_stage: int = 0,
    tensor: int = 1,
    training: bool = True,
    *,
    pipelined: bool = False,
    optimizer: str = DEFAULT_OPTIMIZER,
    experts: ExpertSharding | None = None,
) -> tuple[StaticMemory, ...]:
    """Weights, gradients and optimizer states per GPU of each stage.

    Mixed-precision Adam (``optimizer="adam"``) keeps 16 bytes per parameter (ZeRO paper,
    Rajbhandari et al. 2020): 2 for the bf16 weights, 2 for their gradients, 12 for the
    fp32 master copy and Adam's two moments. ZeRO shards over the ``data_parallel``
    replicas: stage 1 the 12 optimizer bytes, stage 2 the gradients too, stage 3 the
    weights too. Megatron-LM's and DeepSpeed's optimizers and torch FSDP hold other widths
    and shard on their own terms (``pipesim.cluster.optimizers``). Tensor parallelism
    divides all of it by ``tensor``. Without ``training`` only the weights are kept.
    With ``model.fp8`` the weights add their FP8 copies (``FP8_WEIGHT_COPY_BYTES``).

    A gradient shard is only a shard once it has been reduce-scattered. Without a pipeline,
    FSDP and DeepSpeed reduce-scatter after every backward. Under a pipelining runtime
    (``pipelined``) they are reduced once per step: torch.distributed.pipelining runs every
    backward with gradient synchronisation off and reduce-scatters at the stage's
    ``REDUCE_GRAD`` (``torch/distributed/pipelining/stage.py``, ``perform_reduce_grad``),
    so ZeRO-2 and ZeRO-3 keep the stage's whole gradients until then.

    Under expert parallelism (``experts``) a GPU holds only its expert slots of the routed
    experts, and ZeRO shards their optimizer states over each expert's replicas.
    """
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage}")
    if data_parallel < 1 or tensor < 1:
        raise ValueError(f"data_parallel and tensor must be >= 1, got {data_parallel=}, {tensor=}")
    optimizer_implementation(optimizer)  # an unknown name is an error even without training
    n, width = data_parallel, model.dtype_bytes
    result = []
    for k, params in enumerate(stage_parameters(model, partition)):
        parts = [(params / tensor, n)]
        if experts is not None:
            dense, routed = experts.split(k, params, tensor)
            parts = [(dense, n), (routed, experts.replicas)]
        fp8 = _fp8_copy_bytes(model, k, partition, tensor, experts)
        if not training:
            weights = sum(
                width * local / (r if sharding_stage(optimizer, zero_stage, r) >= 3 else 1)
                for local, r in parts
            )
            result.append(StaticMemory(weights + fp8, 0.0, 0.0))
            continue
        sharding = (optimizer, width, zero_stage, pipelined, _units(model, partition, k, tensor))
        weights, gradients, states = _held(parts, *sharding)
        result.append(StaticMemory(weights + fp8, gradients, states))
    return tuple(result)


def _held(
    parts: list[tuple[float, int]],
    optimizer: str,
    width: int,
    zero_stage: int,
    pipelined: bool,
    units: list[float],
) -> tuple[float, float, float]:
    """Weights, gradients and optimizer states of ``(parameters, replicas)`` parts of one
    stage on one GPU, each sharded over its own replicas."""
    held = [
        parameter_bytes(
            optimizer,
            local,
            width=width,
            data_parallel=replicas,
            zero_stage=zero_stage,
            pipelined=pipelined,
            unit_params=units,
        )
        for local, replicas in parts
    ]
    weights, gradients, states = (sum(part) for part in zip(*held, strict=True))
    return weights, gradients, states


def _units(model: TransformerModel, partition: Sequence[int], k: int, tensor: int) -> list[float]:
    """Parameters of each unit FSDP gathers on stage ``k``: its layers, its embedding, its
    LM head (torchtitan wraps each on its own)."""
    embedding = model.vocab * model.hidden / tensor
    largest = max(layer_parameters(model.dense_layer), layer_parameters(model))  # MoE
    units = [largest / tensor] * min(partition[k], 2)
    units += [embedding] if k == 0 else []
    units += [embedding] if k == len(partition) - 1 and not model.tied_embeddings else []
    return units


def _fp8_copy_bytes(
    model: TransformerModel,
    k: int,
    partition: Sequence[int],
    tensor: int,
    experts: ExpertSharding | None = None,
) -> float:
    """The FP8 copies of a stage's layer weights on one GPU (0 without ``fp8``), whole (each
    GPU casts the full weights it computes with, also under ZeRO-3): under expert
    parallelism those of its own expert slots only."""
    if model.fp8 is None:
        return 0.0
    held = sum(count * each for count, each in stage_layer_groups(model, partition)[k])
    if experts is not None:
        return FP8_WEIGHT_COPY_BYTES * sum(experts.split(k, held, tensor))
    return FP8_WEIGHT_COPY_BYTES * held / tensor
