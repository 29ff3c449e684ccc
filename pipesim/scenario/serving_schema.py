"""The scenario keys of inference: ``decode:`` (token-by-token decoding through a static
pipeline, ``pipeline.mode: decode``) and ``serving:`` (live traffic on replicas with an
iteration-level scheduler, ``pipesim serve``).

Lengths of prompts and outputs are a token count or a distribution:

    prompt_tokens: 512
    output_tokens: {distribution: lognormal, mean: 256, cv: 1.0, max: 4096}
    output_tokens: {distribution: uniform, low: 16, high: 512}
    output_tokens: {distribution: empirical, samples: [12, 80, 80, 400]}
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from pipesim.scenario.fields import Count, Index, Milliseconds, Strict
from pipesim.serving.router import ROUTERS
from pipesim.serving.scheduler import DEFAULT_SCHEDULER, SCHEDULERS

MAX_RATE = 1e9  # requests per second
MAX_DURATION_S = 1e9


class DecodeSpec(Strict):
    """``pipeline.mode: decode``: each group of requests emits ``tokens`` new tokens after a
    prefill of ``prompt_tokens`` tokens."""

    tokens: Count
    prompt_tokens: Count = 1


class LengthSpec(Strict):
    """A distribution of token counts, drawn per request, rounded and kept >= 1."""

    distribution: Literal["fixed", "uniform", "lognormal", "empirical"]
    value: Count | None = None  # fixed
    low: Count | None = None  # uniform, inclusive
    high: Count | None = None
    mean: float | None = Field(default=None, gt=0, le=1e9)  # lognormal
    cv: float | None = Field(default=None, ge=0, le=100)
    min: Count | None = None  # optional clamps for lognormal
    max: Count | None = None
    samples: list[Count] | None = None  # empirical

    @model_validator(mode="after")
    def _parameters_given(self) -> LengthSpec:
        needed = {
            "fixed": ("value",),
            "uniform": ("low", "high"),
            "lognormal": ("mean", "cv"),
            "empirical": ("samples",),
        }[self.distribution]
        if any(getattr(self, name) in (None, []) for name in needed):
            raise ValueError(f"the {self.distribution} distribution needs {', '.join(needed)}")
        if self.distribution == "uniform" and self.low > self.high:  # type: ignore[operator]
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high})")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        return self


Length = Count | LengthSpec


class WorkloadSpec(Strict):
    """Arrivals (``poisson`` or ``gamma`` at ``rate`` requests/s, or a ``trace`` CSV with
    ``arrival_s, prompt_tokens, output_tokens``), lengths, and how many: ``requests`` or
    ``duration_s`` (whichever ends first when both are given)."""

    arrival: Literal["poisson", "gamma", "trace"] = "poisson"
    rate: float | None = Field(default=None, gt=0, le=MAX_RATE)
    cv: float = Field(default=1.0, gt=0, le=100)  # gamma inter-arrival cv: > 1 is bursty
    trace_file: str | None = None
    requests: Count | None = None
    duration_s: float | None = Field(default=None, gt=0, le=MAX_DURATION_S)
    prompt_tokens: Length = 512
    output_tokens: Length = 128
    seed: Index = 0

    @field_validator("trace_file")
    @classmethod
    def _a_path(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError(
                "an empty path; give the trace CSV's path (arrival_s, prompt_tokens, "
                "output_tokens), relative to the scenario's folder"
            )
        return value

    @model_validator(mode="after")
    def _complete(self) -> WorkloadSpec:
        if self.arrival == "trace":
            if self.trace_file is None:
                raise ValueError("arrival: trace needs trace_file")
        elif self.rate is None:
            raise ValueError(f"arrival: {self.arrival} needs a rate (requests per second)")
        elif self.requests is None and self.duration_s is None:
            raise ValueError("give requests or duration_s (or both: whichever ends first)")
        return self


class SloSpec(Strict):
    """A request meets the SLO when its TTFT and its TPOT are within these limits;
    ``percentile`` is what ``--max-rate`` holds to them."""

    ttft_ms: Milliseconds | None = None
    tpot_ms: Milliseconds | None = None
    percentile: float = Field(default=99.0, gt=0, le=100)


class ServingSpec(Strict):
    """Replicas behind a router, each an iteration-level scheduler over
    ``parallel.tensor`` x ``pipeline.devices`` GPUs of the scenario's hardware (a MoE
    model's routed experts spread over ``parallel.expert`` of each stage's tensor GPUs). ``router``
    and ``scheduler`` are names in ``pipesim.serving.router.ROUTERS`` and
    ``pipesim.serving.scheduler.SCHEDULERS`` (``vllm``: vLLM v0's continuous batching)."""

    workload: WorkloadSpec
    replicas: Count = 1
    router: str = "round_robin"
    scheduler: str = DEFAULT_SCHEDULER
    max_num_seqs: Count = 256
    max_num_batched_tokens: Count = 8192
    chunked_prefill: bool = False
    block_size: Count = 16
    kv_blocks: Count | None = None  # overrides the capacity derived from the GPU's memory
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    cuda_graphs: bool = False  # decode steps replay a CUDA graph (model-derived costs only)
    slo: SloSpec = SloSpec()

    @field_validator("router")
    @classmethod
    def _known_router(cls, value: str) -> str:
        if value not in ROUTERS:
            raise ValueError(f"unknown router {value!r}; allowed: {', '.join(ROUTERS)}")
        return value

    @field_validator("scheduler")
    @classmethod
    def _known_scheduler(cls, value: str) -> str:
        if value not in SCHEDULERS:
            raise ValueError(f"unknown scheduler {value!r}; allowed: {', '.join(SCHEDULERS)}")
        return value
