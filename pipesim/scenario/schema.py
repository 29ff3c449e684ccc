"""The scenario file's schema: every key a scenario may hold, its type and its limits.

pydantic v2 checks a scenario at the file boundary; unknown keys are errors. This module
holds the models and turns pydantic's first complaint into one readable line
(``describe_validation_error``); ``pipesim.scenario`` reads files and builds the core
objects from a validated ``ScenarioSpec``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from pipesim.cluster.hardware import GPU_PROFILES, LINK_PROFILES
from pipesim.schedules import POLICIES


class ScenarioError(ValueError):
    """A scenario that cannot be run; the message is one line naming file and field."""


NonNegative = Annotated[float, Field(ge=0)]
PerStage = NonNegative | list[NonNegative]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PipelineSpec(_Strict):
    schedule: str
    schedule_file: str | None = None
    devices: int = Field(ge=1)
    microbatches: int | None = Field(default=None, ge=1)  # from model.global_batch if omitted
    virtual_stages: int = Field(default=1, ge=1)
    microbatch_size: int = Field(default=1, ge=1)
    mode: Literal["train", "forward"] = "train"

    @field_validator("schedule")
    @classmethod
    def _known_schedule(cls, value: str) -> str:
        if value != "csv" and value not in POLICIES:
            raise ValueError(
                f"unknown schedule {value!r}; allowed: {', '.join([*POLICIES, 'csv'])}"
            )
        return value


class CostsSpec(_Strict):
    forward_ms: PerStage = 1.0
    backward_ms: PerStage | None = None
    backward_input_ms: PerStage | None = None
    backward_weight_ms: PerStage | None = None
    overlapped_fb_ms: PerStage | None = None
    activation_bytes: PerStage = 0.0
    activation_memory_bytes: PerStage = 0.0
    weight_grad_memory_bytes: PerStage = 0.0
    overhead_ms: NonNegative = 0.0
    profile: str | None = None  # measured costs: a profile file from `pipesim profile`


class LinkSpec(_Strict):
    latency_us: NonNegative = 0.0
    bandwidth_gbps: float = Field(default=float("inf"), gt=0)


LinkChoice = (
    str | LinkSpec
)  # "ideal", a profile name (see `pipesim.hardware.LINK_PROFILES`), or numbers


def _check_link_name(value: LinkChoice | None) -> LinkChoice | None:
    if isinstance(value, str) and value != "ideal" and value not in LINK_PROFILES:
        raise ValueError(
            f"unknown link {value!r}; allowed: ideal, {', '.join(LINK_PROFILES)}, or {{latency_us, bandwidth_gbps}}"
        )
    return value


class HardwareSpec(_Strict):
    link: LinkChoice = "ideal"
    link_variant: Literal["achievable", "line-rate"] = "achievable"
    gpu: str | None = None
    gpus_per_node: int | None = Field(default=None, ge=1)
    intra_node_link: LinkChoice | None = None
    inter_node_link: LinkChoice | None = None
    placement: list[Annotated[int, Field(ge=0)]] | None = None
    pcie_switch_share: int | None = Field(default=None, ge=1)
    comm_overlap: bool = True

    _links = field_validator("link", "intra_node_link", "inter_node_link")(_check_link_name)

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str | None) -> str | None:
        if value is not None and value not in GPU_PROFILES:
            raise ValueError(f"unknown gpu {value!r}; allowed: {', '.join(GPU_PROFILES)}")
        return value


class EfficiencySpec(_Strict):
    max_fraction: float = Field(default=0.78, gt=0, le=1)
    half_tokens: NonNegative = 512.0
    launch_overhead_ms: NonNegative = 0.0


class ModelSpec(_Strict):
    layers: int = Field(ge=1)
    hidden: int = Field(ge=1)
    heads: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    vocab: int = Field(ge=1)
    ffn_hidden: int | None = Field(default=None, ge=1)
    dtype: Literal["bf16", "fp16", "fp32"] = "bf16"
    recompute: bool = False
    tied_embeddings: bool = False
    flash_attention: bool = False
    partition: Literal["even", "balanced"] | list[Annotated[int, Field(ge=0)]] = "even"
    microbatch_size: int | None = Field(default=None, ge=1)
    global_batch: int | None = Field(default=None, ge=1)
    efficiency: EfficiencySpec = EfficiencySpec()


class ParallelSpec(_Strict):
    data: int = Field(default=1, ge=1)
    tensor: int = Field(default=1, ge=1)
    zero_stage: Literal[0, 1, 2, 3] = 0
    dp_overlap: bool = False
    sequence_parallel: bool = False


class NoiseSpec(_Strict):
    """Random factors with mean 1: lognormal or normal with ``cv``, or ``empirical`` draws
    from ``samples``; ``profile`` (a profile file) takes a per-stage cv from its spread."""

    distribution: Literal["lognormal", "normal", "empirical"] = "lognormal"
    cv: NonNegative = 0.0
    samples: list[Annotated[float, Field(gt=0)]] | None = None
    profile: str | None = None

    @model_validator(mode="after")
    def _samples_for_empirical(self) -> NoiseSpec:
        if self.distribution == "empirical" and not self.samples:
            raise ValueError("the empirical distribution needs a non-empty list of samples")
        return self


class StragglerSpec(_Strict):
    device: int = Field(ge=0)
    factor: float = Field(gt=0)  # 1.1: 10% slower
    probability: float = Field(default=1.0, ge=0, le=1)  # per step


class VariabilitySpec(_Strict):
    forward: NoiseSpec | None = None
    backward: NoiseSpec | None = None  # B, I and W
    backward_input: NoiseSpec | None = None
    backward_weight: NoiseSpec | None = None
    stragglers: list[StragglerSpec] = []
    link_jitter: NoiseSpec | None = None
    microbatch_scale: list[Annotated[float, Field(gt=0)]] | NoiseSpec | None = None


class ScenarioSpec(_Strict):
    schema_version: Literal[1]
    name: str
    description: str = ""
    pipeline: PipelineSpec
    costs: CostsSpec = CostsSpec()
    hardware: HardwareSpec = HardwareSpec()
    model: ModelSpec | None = None
    parallel: ParallelSpec = ParallelSpec()
    variability: VariabilitySpec | None = None


def describe_validation_error(exc: ValidationError) -> str:
    """``field.path: what is wrong`` for pydantic's first error."""
    error = exc.errors()[0]
    loc = _tidy_loc(error["loc"])
    if error["type"] == "extra_forbidden":
        parent = _model_at(error["loc"][:-1])
        allowed = ", ".join(parent.model_fields) if parent else "see the documentation"
        return f"{loc}: unknown key; allowed keys here: {allowed}"
    if error["type"] == "missing":
        return f"{loc}: required key is missing"
    given = error.get("input")
    shown = "" if isinstance(given, dict) else f" (got {given!r})"
    return f"{loc}: {error['msg']}{shown}"


def _tidy_loc(loc: tuple) -> str:
    """Dotted field path, without the union-branch tags pydantic adds (``constrained-float``)."""
    parts = [str(p) for p in loc if not _is_branch_tag(p)]
    return ".".join(parts) if parts else "(top level)"


def _is_branch_tag(part: object) -> bool:
    if not isinstance(part, str):
        return False
    return (
        any(c in part for c in "[-")
        or part[:1].isupper()
        or part in ("float", "int", "str", "bool")
    )


def _model_at(loc: tuple) -> type[BaseModel] | None:
    model: type[BaseModel] = ScenarioSpec
    for part in loc:
        if not isinstance(part, str) or part not in model.model_fields:
            continue
        annotation = model.model_fields[part].annotation
        candidates = getattr(annotation, "__args__", (annotation,))
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not nested:
            return None
        model = nested[0]
    return model
