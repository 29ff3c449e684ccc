"""The serving simulator's vocabulary: what a replica costs and holds, and what a run records.

A serving run is described by a :class:`ServeConfig` (replicas behind a router, each a
:class:`ReplicaConfig`: an iteration cost model over a pipeline of stages, the scheduler's
limits and a paged KV cache) and a sequence of :class:`~pipesim.serving.request.Request`.
``pipesim.serving.engine.simulate_serving(config, requests)`` plays it out and returns a
:class:`ServeResult`, columnar NumPy arrays of everything that happened;
``pipesim.serving.metrics.summarize(result)`` turns it into a :class:`ServeReport`, the
numbers ``pipesim serve --format json`` prints.

Times in these records are seconds from the start of the run (``_s``); costs and reported
latencies are milliseconds (``_ms``). A rejected request has NaN for every time it never
reached.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from pipesim.cluster.inference import BatchShape
from pipesim.serving.router import ROUTERS


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


def _at_least(name: str, value: int, low: int) -> None:
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
        _at_least("stages", self.costs.stages, 1)
        _at_least("max_num_seqs", self.max_num_seqs, 1)
        _at_least("max_num_batched_tokens", self.max_num_batched_tokens, 1)
        _at_least("block_size", self.block_size, 1)
        _at_least("kv_blocks", self.kv_blocks, self.costs.stages)
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


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """``replicas`` copies of ``replica`` behind a ``router`` (``round_robin`` or
    ``least_outstanding``: fewest requests assigned and not finished, lowest index on a
    tie).

    The copies hold the same model and scheduler, but need not sit on the same links: a
    replica whose stages span two nodes pays the inter-node link where another stays inside
    one. ``replica_costs``, when given, holds one cost model per replica (same number of
    stages as ``replica.costs``); empty means every replica costs as ``replica``.
    """

    replica: ReplicaConfig
    replicas: int = 1
    router: str = "round_robin"
    replica_costs: tuple[IterationCosts, ...] = ()

    def __post_init__(self) -> None:
        _at_least("replicas", self.replicas, 1)
        if self.router not in ROUTERS:
            raise ValueError(f"router: must be one of {', '.join(ROUTERS)}, got {self.router!r}")
        costs = self.replica_costs
        if costs and len(costs) != self.replicas:
            raise ValueError(
                f"replicas: {self.replicas} replicas but {len(costs)} per-replica cost models"
            )
        for r, c in enumerate(costs):
            if c.stages != self.replica.stages:
                raise ValueError(
                    f"replicas: replica {r} has {c.stages} stages, the first "
                    f"{self.replica.stages}; every replica must have the same pipeline"
                )

    def replica_config(self, index: int) -> ReplicaConfig:
        """Replica ``index``'s configuration: ``replica`` with its own costs."""
        if not self.replica_costs:
            return self.replica
        return replace(self.replica, costs=self.replica_costs[index])


@dataclass(frozen=True, slots=True)
class RequestRecords:
    """One entry per request, in request order (columnar NumPy arrays).

    ``replica`` and ``engine`` (its virtual engine) are -1 for a rejected request.
    ``first_scheduled_s``: start on the first stage of the first iteration holding it;
    ``first_token_s``: its first token left the last stage; ``finish_s``: its last did.
    ``preemptions``: how often it was preempted (and its KV recomputed). ``max_itl_s``: its
    longest gap between two consecutive tokens (NaN for a one-token output).
    """

    id: np.ndarray
    replica: np.ndarray
    engine: np.ndarray
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    rejected: np.ndarray
    first_scheduled_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    preemptions: np.ndarray
    max_itl_s: np.ndarray

    def __len__(self) -> int:
        return len(self.id)

    @property
    def completed(self) -> np.ndarray:
        return ~self.rejected

    @property
    def ttft_s(self) -> np.ndarray:
        """Time to first token: arrival to the first token leaving the last stage."""
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        """Time per output token after the first (NaN for a single-token output)."""
        steps = (self.output_tokens - 1).astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(steps > 0, (self.finish_s - self.first_token_s) / steps, np.nan)

    @property
    def e2e_s(self) -> np.ndarray:
        return self.finish_s - self.arrival_s

    @property
    def queue_s(self) -> np.ndarray:
        """Arrival to the start of the first iteration that includes the request."""
        return self.first_scheduled_s - self.arrival_s


@dataclass(frozen=True, slots=True)
class IterationLog:
    """One entry per iteration (a batch's pass through a replica's pipeline).

    ``start_s[i, s]`` / ``end_s[i, s]``: when iteration ``i`` ran on stage ``s`` (shape
    ``(iterations, stages)``); the batch left the last stage at ``end_s[i, -1]``.
    ``batch_size``: sequences in it; ``prefill_tokens``; ``decode_seqs``.
    """

    replica: np.ndarray
    engine: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    batch_size: np.ndarray
    prefill_tokens: np.ndarray
    decode_seqs: np.ndarray

    def __len__(self) -> int:
        return len(self.replica)

    def busy_s(self, replicas: int) -> np.ndarray:
        """Busy seconds per (replica, stage), shape ``(replicas, stages)``."""
        busy = np.zeros((replicas, self.start_s.shape[1]))
        np.add.at(busy, self.replica, self.end_s - self.start_s)
        return busy


@dataclass(frozen=True, slots=True)
class Timeline:
    """A replica's state after each scheduling step: sequences running (admitted, not
    finished or preempted) and KV blocks in use. Each value holds until the replica's next
    entry."""

    time_s: np.ndarray
    replica: np.ndarray
    running: np.ndarray
    kv_blocks_used: np.ndarray


@dataclass(frozen=True, slots=True)
class TokenGaps:
    """Inter-token latencies as a weighted multiset: ``count[i]`` gaps of ``gap_s[i]``
    seconds (one entry per iteration stands for every sequence that continued through it,
    so no per-token array is built)."""

    gap_s: np.ndarray
    count: np.ndarray


@dataclass(frozen=True, slots=True)
class ServeResult:
    """Everything a serving run recorded. ``duration_s``: from 0 to the last finish (or
    the last arrival, if later); ``kv_blocks[r]``: the KV blocks replica r can use (its
    ``kv_blocks`` rounded down to a multiple of its virtual engines)."""

    requests: RequestRecords
    iterations: IterationLog
    timeline: Timeline
    token_gaps: TokenGaps
    duration_s: float
    kv_blocks: tuple[int, ...]
    stages: int


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """Mean and percentiles of one latency, milliseconds (0 where there is no sample)."""

    mean: float
    p50: float
    p90: float
    p99: float


@dataclass(frozen=True, slots=True)
class Usage:
    """A quantity over the run: its (time- or iteration-) mean and its peak."""

    mean: float
    peak: float


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """One pipeline stage of one replica (its ``tensor`` GPUs work as one device here)."""

    replica: int
    stage: int
    busy_ms: float
    bubble_fraction: float


@dataclass(frozen=True, slots=True)
class ServeReport:
    """The numbers of a serving run (``pipesim serve --format json``).

    Rates are over ``duration_s``; ``goodput_rps`` counts completed requests within the
    SLO (all completed ones when no SLO is set); ``mean_in_system`` is the time-average of
    requests arrived and not finished; ``bubble_fraction = 1 - sum(busy) / (stages *
    replicas * duration)``.
    """

    requests: int
    completed: int
    rejected: int
    preemptions: int
    duration_s: float
    throughput_rps: float
    output_tokens_per_second: float
    goodput_rps: float
    mean_in_system: float
    ttft_ms: LatencyStats
    tpot_ms: LatencyStats
    e2e_ms: LatencyStats
    queue_ms: LatencyStats
    itl_ms: LatencyStats
    kv_utilization: Usage
    batch_size: Usage
    bubble_fraction: float
    devices: tuple[DeviceUsage, ...] = field(default=())

    def to_dict(self) -> dict:
        """Plain JSON-ready data, keys as the issue names them."""
        plain: dict = {}
        for name in self.__slots__:  # type: ignore[attr-defined]
            value = getattr(self, name)
            if isinstance(value, LatencyStats | Usage):
                value = {k: getattr(value, k) for k in value.__slots__}  # type: ignore[attr-defined]
            elif name == "devices":
                value = [{k: getattr(s, k) for k in s.__slots__} for s in value]  # type: ignore[attr-defined]
            plain[name] = value
        return plain
