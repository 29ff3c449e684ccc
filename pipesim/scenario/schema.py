"""The scenario file's schema: every key a scenario may hold, its type and its limits.

pydantic v2 checks a scenario at the file boundary; unknown keys are errors. The check is
strict, as a careful reader would be: an integer is an integer (not ``true``, not
``"4"``, not ``4.0``), a switch is ``true`` or ``false`` (not ``yes``), and every number
is finite and inside a range the engine can add up without overflowing (durations up to
1e12 ms, sizes up to 1e18 bytes, counts up to 2**53). A positive duration, size or
latency is at least 1e-9 of its unit, so that no rate computed from it overflows.

This module holds the models and turns pydantic's first complaint into one readable line
(``describe_validation_error``); ``pipesim.scenario.load`` reads files and
``pipesim.scenario.build`` builds the core objects from a validated ``ScenarioSpec``.
"""

from __future__ import annotations

import reprlib
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pipesim.cluster.hardware import (
    DEFAULT_FRAGMENTATION,
    DEFAULT_MEMORY_HEADROOM,
    DEFAULT_RUNTIME_BYTES,
    GPU_PROFILES,
    LINK_PROFILES,
)
from pipesim.cluster.layout import check_layout
from pipesim.cluster.model import Efficiency
from pipesim.cluster.optimizers import DEFAULT_OPTIMIZER, OPTIMIZERS, check_sharding
from pipesim.scenario.fields import (
    DEFAULT_MAX_ACTIONS,
    SMALLEST,
    Bytes,
    Count,
    FilePath,
    Index,
    Microseconds,
    Milliseconds,
    PerStage,
    PerStageBytes,
)
from pipesim.scenario.fields import Strict as _Strict
from pipesim.scenario.moe_schema import MLASpec, MoESpec
from pipesim.scenario.serving_schema import DecodeSpec, ServingSpec
from pipesim.scenario.topology_schema import TopologySpec
from pipesim.scenario.variability_schema import VariabilitySpec
from pipesim.schedules import POLICIES
from pipesim.search import AUTO_POLICIES
from pipesim.sim.costs import StageCountError, per_stage

MAX_ERROR_CHARS = 300
_CALIBRATED = Efficiency()


class ScenarioError(ValueError):
    """A scenario that cannot be run: one line naming the file, the field and what is allowed.

    However strange the input it quotes, the line stays one printable line (control
    characters escaped) of at most ``MAX_ERROR_CHARS`` characters. ``picture``, a schedule's
    step x rank grid, may follow it on the next lines.
    """

    def __init__(self, message: object, picture: str | None = None) -> None:
        self.line = one_line(str(message))
        self.picture = picture or None
        super().__init__(self.line if self.picture is None else f"{self.line}\n{self.picture}")

    def __reduce__(self):
        return type(self), (self.line, self.picture)


def one_line(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` as one printable line of at most ``limit`` characters."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: limit * 2])
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (its type's name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def per_stage_costs(
    value: float | list[float], stages: int, key: str, source: str, count: str
) -> tuple[float, ...]:
    """``costs.<key>``, a number or one per stage, as one number per stage (``per_stage``);
    a list of another length is refused, the expected count explained by ``count``."""
    try:
        return per_stage(value, stages, key)
    except StageCountError as exc:
        raise ScenarioError(
            f"{source}: costs.{key}: has {exc.entries} entries, expected a number or "
            f"{stages} ({count})"
        ) from None


class Mode(StrEnum):
    """What a step runs: a training step, forward passes only (inference), or token-by-token
    generation (``pipeline.mode: decode``)."""

    TRAIN = "train"
    FORWARD = "forward"
    DECODE = "decode"


class PipelineSpec(_Strict):
    schedule: str | None = None  # required except in decode mode and for `pipesim serve`
    schedule_file: FilePath | None = None
    devices: Count | None = None  # a csv schedule's rows give it if omitted
    microbatches: Count | None = None  # from model.global_batch if omitted
    virtual_stages: Count = 1
    microbatch_size: Count = 1
    mode: Literal["train", "forward", "decode"] = "train"  # decode: see the decode: section
    # The size guard: a schedule of more actions is refused before it is built.
    max_actions: Count = DEFAULT_MAX_ACTIONS
    # Per device, for the searched policies (zb-auto, v-auto); None: what 1F1B holds.
    memory_limit_bytes: Bytes | None = None
    # The combined-1F1B schedules (1f1b-a2a-overlap, interleaved-1f1b-a2a-overlap): split
    # each merged unit's backward, its weight gradient delayed to cover the all-to-alls.
    delay_wgrad: bool = False
    # zb-auto / v-auto: exact runs a constraint program after the heuristic (pipesim[exact])
    search: Literal["heuristic", "exact"] = "heuristic"
    search_time_limit_s: Annotated[float, Field(gt=0, le=86_400)] = 10.0  # the solver's

    @field_validator("schedule")
    @classmethod
    def _known_schedule(cls, value: str | None) -> str | None:
        if (
            value is not None
            and value != "csv"
            and value not in POLICIES
            and value not in AUTO_POLICIES
        ):
            allowed = ", ".join([*POLICIES, *AUTO_POLICIES, "csv"])
            raise ValueError(f"unknown schedule {value!r}; allowed: {allowed}")
        return value


class CostsSpec(_Strict):
    forward_ms: PerStage = 1.0
    backward_ms: PerStage | None = None
    backward_input_ms: PerStage | None = None
    backward_weight_ms: PerStage | None = None
    overlapped_fb_ms: PerStage | None = None
    activation_bytes: PerStageBytes = 0.0
    activation_memory_bytes: PerStageBytes = 0.0
    weight_grad_memory_bytes: PerStageBytes = 0.0
    overhead_ms: Milliseconds = 0.0
    unshard_ms: PerStage | None = None  # FSDP posts of a lowered csv schedule (else free)
    reshard_ms: PerStage | None = None
    profile: FilePath | None = None  # measured costs: a profile file from `pipesim profile`
    # Inference, hand-typed: a whole prompt of decode.prompt_tokens through one stage, and
    # one token step of one group through one stage.
    prefill_ms: PerStage | None = None
    decode_ms: PerStage | None = None


class LinkSpec(_Strict):
    """A link given by its numbers; leave ``bandwidth_gbps`` out for a link whose message
    size costs nothing (an ideal link is the name ``ideal``, never an infinite number)."""

    latency_us: Microseconds = 0.0
    bandwidth_gbps: float = Field(default=float("inf"), ge=1e-6, le=1e9)
    gap_us: Microseconds = 0.0  # channel time per message on top of the bytes (LogGP's g)


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
    gpus_per_node: Count | None = None
    intra_node_link: LinkChoice | None = None
    inter_node_link: LinkChoice | None = None
    placement: list[Index] | None = None
    pcie_switch_share: Count | None = None
    comm_overlap: bool = True
    # per GPU, besides the model's tensors (pipesim.cluster.hardware, "Runtime memory")
    runtime_bytes: Bytes = DEFAULT_RUNTIME_BYTES
    fragmentation: float = Field(default=DEFAULT_FRAGMENTATION, ge=0, lt=1)
    memory_headroom: float = Field(default=DEFAULT_MEMORY_HEADROOM, ge=0, lt=1)
    topology: TopologySpec | None = None  # the network above the node: pods, rank order

    _links = field_validator("link", "intra_node_link", "inter_node_link")(_check_link_name)

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str | None) -> str | None:
        if value is not None and value not in GPU_PROFILES:
            raise ValueError(f"unknown gpu {value!r}; allowed: {', '.join(GPU_PROFILES)}")
        return value


class EfficiencySpec(_Strict):
    """Defaults: pipesim's calibrated cost model (docs/validation.md). ``attention_fraction``
    and ``memory_fraction`` take ``null`` too: attention at the GEMM rate, memory-bound
    operators and the optimizer step not counted (the FLOPs-only model)."""

    max_fraction: float = Field(default=_CALIBRATED.max_fraction, ge=SMALLEST, le=1)
    half_tokens: float = Field(default=_CALIBRATED.half_tokens, ge=0, le=1e18)
    launch_overhead_ms: Milliseconds = _CALIBRATED.launch_overhead_ms
    attention_fraction: float | None = Field(
        default=_CALIBRATED.attention_fraction, ge=SMALLEST, le=1
    )
    memory_fraction: float | None = Field(default=_CALIBRATED.memory_fraction, ge=SMALLEST, le=1)
    tensor_overlap_fraction: float = Field(default=_CALIBRATED.tensor_overlap_fraction, ge=0, le=1)
    # the per-shape GEMM model (pipesim.cluster.gemm): a training step's share of the GPU's
    # measured GEMM rate, the short-reduction penalty's half point, block-wise FP8's extra cost
    gemm_fraction: float | None = Field(default=None, ge=SMALLEST, le=1)  # None: the GPU's
    gemm_half_dim: float = Field(default=_CALIBRATED.gemm_half_dim, ge=0, le=1e9)
    fp8_blockwise_overhead: float = Field(default=_CALIBRATED.fp8_blockwise_overhead, ge=0, le=10)
    overlap_slowdown: float = Field(default=_CALIBRATED.overlap_slowdown, ge=0, le=1)


class ModelSpec(_Strict):
    layers: Count
    hidden: Count
    heads: Count
    seq_len: Count
    vocab: Count
    ffn_hidden: Count | None = None
    kv_heads: Count | None = None  # grouped-query attention; None: as many as heads
    mlp: Literal["plain", "gated"] = "plain"  # gated: SwiGLU's three matrices
    dtype: Literal["bf16", "fp16", "fp32"] = "bf16"
    recompute: bool = False
    tied_embeddings: bool = False
    flash_attention: bool = False
    # FP8 linear layers as Transformer Engine runs them: per-tensor or block-wise scales
    # (absent: the GEMMs run in dtype); needs a GPU with FP8 (hardware.gpu)
    fp8: Literal["tensorwise", "blockwise"] | None = None
    partition: Literal["even", "balanced"] | list[Index] = "even"
    microbatch_size: Count | None = None
    global_batch: Count | None = None
    efficiency: EfficiencySpec = EfficiencySpec()
    # Megatron-LM's --pipeline-model-parallel-layout, e.g. "Et*3|(tt|)*14|tL": instead of
    # partition, and the first or last stage may hold no layer (pipesim.cluster.layout)
    pipeline_layout: Annotated[str, AfterValidator(check_layout)] | None = None
    # Heads wider than hidden / heads (Qwen3: 128); mixture-of-experts layers, multi-head
    # latent attention and multi-token prediction (pipesim.scenario.moe_schema)
    head_dim: Count | None = None
    attention: Literal["mha", "gqa", "mla"] | None = None  # absent: mha, gqa with kv_heads
    mla: MLASpec | None = None
    moe: MoESpec | None = None
    mtp_layers: Index = 0  # DeepSeek-V3's multi-token-prediction modules, on the last stage

    @model_validator(mode="after")
    def _one_split(self) -> ModelSpec:
        if self.pipeline_layout is not None and "partition" in self.model_fields_set:
            raise ValueError("give model.partition or model.pipeline_layout, not both")
        return self


class ParallelSpec(_Strict):
    data: Count = 1
    tensor: Count = 1
    zero_stage: Literal[0, 1, 2, 3] = 0
    dp_overlap: bool = False
    sequence_parallel: bool = False
    tp_overlap: bool = False  # tensor-parallel communication hidden behind the layer's GEMMs
    # GPUs sharing every sequence (context parallelism): ring attention (Megatron-LM's "p2p")
    # or all-to-all (DeepSpeed-Ulysses, TransformerEngine's "a2a")
    context: Count = 1
    context_mode: Literal["ring", "all-to-all"] = "ring"
    # Megatron-LM's scatter/gather between stages (section 4.1 of Narayanan et al. 2021):
    # each tensor-parallel rank sends 1/tensor of the activation without sequence parallelism
    pipeline_scatter_gather: bool = False
    # Mixture-of-experts layers: experts spread over `expert` ranks carved out of data x
    # context, each split `expert_tensor` ways (absent: as parallel.tensor), as Megatron-Core
    # lays them out (pipesim.cluster.expert_parallel)
    expert: Count = 1
    expert_tensor: Count | None = None

    # The implementation and what it shards (pipesim.cluster.optimizers)
    optimizer: Literal[tuple(OPTIMIZERS)] = DEFAULT_OPTIMIZER  # type: ignore[valid-type]

    @field_validator("optimizer")
    @classmethod
    def _sharding(cls, value: str, info: ValidationInfo) -> str:
        return check_sharding(value, info.data.get("zero_stage", 0))


class ScenarioSpec(_Strict):
    schema_version: Literal[1]
    name: str = Field(max_length=200)
    description: str = Field(default="", max_length=10_000)
    pipeline: PipelineSpec
    costs: CostsSpec = CostsSpec()
    hardware: HardwareSpec = HardwareSpec()
    model: ModelSpec | None = None
    parallel: ParallelSpec = ParallelSpec()
    variability: VariabilitySpec | None = None
    decode: DecodeSpec | None = None
    serving: ServingSpec | None = None

    @field_validator("schema_version", mode="before")
    @classmethod
    def _a_number(cls, value: object) -> object:
        if isinstance(value, bool):  # True == 1 in Python, not in a scenario file
            raise ValueError("Input should be 1")
        return value


def describe_validation_error(exc: ValidationError) -> str:
    """``field.path: what is wrong`` for pydantic's first error (of a value that could be
    one of several types, the complaint that reaches deepest into it)."""
    errors = exc.errors()
    first = [e for e in errors if e["loc"][:1] == errors[0]["loc"][:1]]
    error = max(first, key=lambda e: len(_tidy_loc(e["loc"]).replace("[", ".").split(".")))
    loc = _tidy_loc(error["loc"])
    if error["type"] == "extra_forbidden":  # the last part is the user's own key, kept whole
        parent_loc, key = _tidy_loc(error["loc"][:-1], ""), _key_text(error["loc"][-1])
        loc = f"{parent_loc}.{key}" if parent_loc else key
        parent = _model_at(error["loc"][:-1])
        allowed = ", ".join(parent.model_fields) if parent else "see the documentation"
        return f"{loc}: unknown key; allowed keys here: {allowed}"
    if error["type"] == "missing":
        return f"{loc}: required key is missing"
    given = error.get("input")
    shown = "" if isinstance(given, dict) else f" (got {_SHORT.repr(given)})"
    if error["type"] in ("model_type", "model_attributes_type", "dict_type"):
        return f"{loc}: expected a section of keys{shown}"
    return f"{loc}: {error['msg'].removeprefix('Value error, ')}{shown}"


_SHORT = reprlib.Repr()  # quotes what the user gave, but never pages of it
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlong, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxlevel = 40, 6, 4, 2


def _tidy_loc(loc: tuple, top: str = "(top level)") -> str:
    """Dotted field path with list indices in brackets (``costs.forward_ms[1]``), without the
    union-branch tags pydantic adds (``constrained-float``)."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not _is_branch_tag(part):
            path += f".{_key_text(part)}" if path else _key_text(part)
    return path or top


def _key_text(part: object) -> str:
    text = str(part)
    if isinstance(part, int) or (text.isprintable() and text and not set(text) & set(" .'\"")):
        return text if len(text) <= 60 else _SHORT.repr(text)
    return _SHORT.repr(part)


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
