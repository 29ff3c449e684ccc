"""The scenario's ``variability`` section: random factors on the stage durations and the
links (``NoiseSpec``), stragglers, and what each applies to (``VariabilitySpec``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from pipesim.scenario.fields import Factor, FilePath, Index
from pipesim.scenario.fields import Strict as _Strict


class NoiseSpec(_Strict):
    """Random factors with mean 1: lognormal or normal with ``cv``, or ``empirical`` draws
    from ``samples``; ``profile`` (a profile file) takes a per-stage cv from its spread."""

    distribution: Literal["lognormal", "normal", "empirical"] = "lognormal"
    cv: float = Field(default=0.0, ge=0, le=100)
    samples: list[Factor] | None = None
    profile: FilePath | None = None

    @model_validator(mode="after")
    def _samples_for_empirical(self) -> NoiseSpec:
        if self.distribution == "empirical" and not self.samples:
            raise ValueError("the empirical distribution needs a non-empty list of samples")
        return self


class StragglerSpec(_Strict):
    device: Index
    factor: Factor  # 1.1: 10% slower
    probability: float = Field(default=1.0, ge=0, le=1)  # per step


class VariabilitySpec(_Strict):
    forward: NoiseSpec | None = None
    backward: NoiseSpec | None = None  # B, I and W
    backward_input: NoiseSpec | None = None
    backward_weight: NoiseSpec | None = None
    stragglers: list[StragglerSpec] = []
    link_jitter: NoiseSpec | None = None
    microbatch_scale: list[Factor] | NoiseSpec | None = None
