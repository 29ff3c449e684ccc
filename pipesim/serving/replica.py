"""One serving replica: what an iteration costs on its stages, and what its scheduler holds.

A replica is a pipeline of stages with an iteration cost model (:class:`IterationCosts`:
hand-typed as :class:`HandTypedCosts`, or derived from a model as
``pipesim.serving.model_costs.ModelIterationCosts``), the scheduler's batch limits and a
paged KV cache (:class:`ReplicaConfig`). Costs are milliseconds (``_ms``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from pipesim.cluster.inference import BatchShape


class IterationCosts(Protocol):
    """What one iteration of a batch costs on each pipeline stage of a replica.

    ``stage_ms(stage, shape)``: the compute time of the batch on that stage;
    ``hop_ms(stage, shape)``: for ``stage < stages - 1``, the time its activations take from
    ``stage`` to ``stage + 1``; for ``stage == stages - 1``, the way back: the token ids the
    last stage sampled travelling to the first stage, which the batch's next iteration
    needs (called only when there are two stages or more; 0 on ideal links).
    """

    @property
    def stages(self) -> int: ...

    def stage_ms(self, stage: int, shape: BatchShape) -> float: ...

    def hop_ms(self, stage: int, shape: BatchShape) -> float: ...


def _milliseconds(name: str, values: tuple[float, ...]) -> tuple[float, ...]:
    values = tuple(float(v) for v in values)
    for v in values:
        if not (math.isfinite(v) and v >= 0):
            raise ValueError(f"{name}: every entry must be a finite number >= 0, got {v}")
    return values


@dataclass(frozen=True, slots=True)
class HandTypedCosts:
    """The teaching cost model of ``costs.prefill_ms`` / ``costs.decode_ms``.

    ``prefill_ms[s]`` is a whole prompt of ``prompt_tokens`` tokens through stage ``s``;
    ``decode_ms[s]`` one decode step of the batch through it. An iteration holding ``n``
    prefill tokens and any decoding sequences costs, on stage ``s``,
    ``prefill_ms[s] * n / prompt_tokens + decode_ms[s]`` (the decode term only when it
    decodes). ``hops_ms[s]`` is the fixed time from stage ``s`` to ``s + 1``; a last entry
    ``hops_ms[stages - 1]``, when given, is the sampled tokens' way back from the last stage
    to the first (``stages - 1`` entries: that way back is free; empty: ideal links).
    """

    prefill_ms: tuple[float, ...]
    decode_ms: tuple[float, ...]
    prompt_tokens: int
    hops_ms: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        prefill = _milliseconds("prefill_ms", self.prefill_ms)
        decode = _milliseconds("decode_ms", self.decode_ms)
        hops = _milliseconds("hops_ms", self.hops_ms) or (0.0,) * (len(prefill) - 1)
        if not prefill:
            raise ValueError("prefill_ms: needs one entry per stage, got none")
        if len(decode) != len(prefill):
            raise ValueError(
                f"decode_ms: needs {len(prefill)} entries (one per stage), got {len(decode)}"
            )
        if len(hops) not in (len(prefill) - 1, len(prefill)):
            raise ValueError(
                f"hops_ms: needs {len(prefill) - 1} entries (one per stage boundary) or "
                f"{len(prefill)} (and the way back from the last stage), got {len(hops)}"
            )
        if self.prompt_tokens < 1:
            raise ValueError(f"prompt_tokens: must be >= 1, got {self.prompt_tokens}")
        object.__setattr__(self, "prefill_ms", prefill)
        object.__setattr__(self, "decode_ms", decode)
        object.__setattr__(self, "hops_ms", hops)

    @property
    def stages(self) -> int:
        return len(self.prefill_ms)

    def stage_ms(self, stage: int, shape: BatchShape) -> float:
        time_ms = self.prefill_ms[stage] * shape.prefill_tokens / self.prompt_tokens
        return time_ms + (self.decode_ms[stage] if shape.decode_seqs else 0.0)

    def hop_ms(self, stage: int, shape: BatchShape) -> float:
        return self.hops_ms[stage] if stage < len(self.hops_ms) else 0.0


def at_least(name: str, value: int, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name}: must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """One replica: a pipeline of ``costs.stages`` stages and a vLLM-style scheduler.

    ``max_num_seqs`` and ``max_num_batched_tokens`` bound one iteration's batch (per
    virtual engine, as vLLM's); ``chunked_prefill`` lets prompts be split across
    iterations; the KV cache holds ``kv_blocks`` blocks of ``block_size`` tokens for the
    whole replica, shared out evenly among its ``stages`` virtual engines.
    """

    costs: IterationCosts
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = False
    block_size: int = 16
    kv_blocks: int = 1 << 16

    def __post_init__(self) -> None:
        at_least("stages", self.costs.stages, 1)
        at_least("max_num_seqs", self.max_num_seqs, 1)
        at_least("max_num_batched_tokens", self.max_num_batched_tokens, 1)
        at_least("block_size", self.block_size, 1)
        at_least("kv_blocks", self.kv_blocks, self.costs.stages)
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_num_seqs ({self.max_num_seqs}): every running sequence decodes each step"
            )

    @property
    def stages(self) -> int:
        return self.costs.stages

    @property
    def engine_kv_blocks(self) -> int:
        """KV blocks of one virtual engine (vLLM divides the cache by the pipeline size)."""
        return self.kv_blocks // self.costs.stages
