"""The building blocks every scenario section is made of: the strict base model and the
typed, bounded numbers (counts, durations, sizes) shared by ``pipesim.scenario.schema`` and
``pipesim.scenario.serving_schema``."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

MAX_COUNT = 2**53  # every count converts to a float exactly
SMALLEST = 1e-9  # of a unit: a positive duration, size or latency is at least this


def _zero_or_at_least_smallest(value: float) -> float:
    if 0 < value < SMALLEST:
        raise ValueError(f"must be 0 or at least {SMALLEST:g}")
    return value


def _a_path(value: str) -> str:
    if not value.strip():
        raise ValueError("an empty path; name a file, relative to the scenario's folder")
    return value


Count = Annotated[int, Field(ge=1, le=MAX_COUNT)]
Index = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Milliseconds = Annotated[float, Field(ge=0, le=1e12), AfterValidator(_zero_or_at_least_smallest)]
Microseconds = Annotated[float, Field(ge=0, le=1e15), AfterValidator(_zero_or_at_least_smallest)]
Bytes = Annotated[float, Field(ge=0, le=1e18), AfterValidator(_zero_or_at_least_smallest)]
Factor = Annotated[float, Field(ge=1e-6, le=1e6)]
FilePath = Annotated[str, AfterValidator(_a_path)]  # a file the scenario names
PerStage = Milliseconds | list[Milliseconds]
PerStageBytes = Bytes | list[Bytes]
DEFAULT_MAX_ACTIONS = 10_000_000


class Strict(BaseModel):
    """Unknown keys are errors; values are never coerced; numbers are finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
