"""Scenario files: what a user writes down, checked at the door.

A scenario names a schedule, the pipeline's sizes, the costs of each stage and the
hardware. It may be YAML, TOML or JSON (``schema_version: 1``). pydantic v2 checks it
at the file boundary (unknown keys are errors), then it becomes plain frozen data for
the core: a ``Scenario`` holding a Schedule, Costs and a Topology.

``--set key.path=value`` overrides go into the raw mapping before validation, so an
override is checked exactly like the file.

Every problem becomes one ``ScenarioError`` line: ``FILE: FIELD: what is wrong``.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from pipesim.costs import Costs, uniform_costs
from pipesim.hardware import GPU_PROFILES, LINK_PROFILES, Topology
from pipesim.metrics import Accounting
from pipesim.schedules import POLICIES, fit_virtual_stages, get_schedule
from pipesim.schedules.ir import Schedule, ScheduleError, forward_only, from_csv, validate
from pipesim.variability import (
    KIND_LETTERS,
    Variability,
    profile_stage_cvs,
    variability_from_mapping,
)


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


@dataclass(frozen=True, slots=True)
class Scenario:
    """A validated scenario, ready for the engine."""

    name: str
    description: str
    schedule: Schedule
    costs: Costs
    topology: Topology
    microbatch_size: int
    mode: str
    seq_len: int | None
    spec: ScenarioSpec
    accounting: Accounting | None = None
    tail_ms: tuple[float, ...] | None = None  # end-of-step all-reduce per device
    tail_after_flush: bool = True
    variability: Variability | None = None  # Monte Carlo runs only


# ---------------------------------------------------------------------------
# Reading files and overrides


def read_mapping(path: str | Path) -> dict[str, Any]:
    """Parse a YAML, TOML or JSON file into a mapping; ScenarioError on any problem."""
    path = Path(path)
    if not path.is_file():
        raise ScenarioError(f"{path}: no such file")
    text = path.read_text(encoding="utf-8")
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            data = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        elif suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text)
        else:
            raise ScenarioError(
                f"{path}: unknown file type {suffix!r}; allowed: .yaml, .yml, .toml, .json"
            )
    except (yaml.YAMLError, tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ScenarioError(f"{path}: not valid {suffix[1:].upper()}: {_first_line(exc)}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a mapping of keys at the top level")
    return data


def apply_overrides(
    data: dict[str, Any], overrides: list[str], source: str = "--set"
) -> dict[str, Any]:
    """Return a copy of ``data`` with each ``key.path=value`` applied (value parsed as YAML)."""
    result = json.loads(json.dumps(data, default=str)) if overrides else data
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ScenarioError(
                f"{source} {item!r}: expected key.path=value, e.g. pipeline.microbatches=16"
            )
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            raise ScenarioError(f"{source} {item!r}: the value is not valid YAML") from None
        target = result
        parts = key.strip().split(".")
        for part in parts[:-1]:
            nested = target.get(part)
            if not isinstance(nested, dict):
                nested = target[part] = {} if nested is None else nested
                if not isinstance(nested, dict):
                    raise ScenarioError(f"{source} {item!r}: {part} is not a section")
            target = nested
        target[parts[-1]] = value
    return result


def parse_spec(data: dict[str, Any], source: str) -> ScenarioSpec:
    try:
        return ScenarioSpec.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(f"{source}: {_describe(exc)}") from None


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Read, override, validate and build a scenario file."""
    data = apply_overrides(read_mapping(path), list(overrides))
    return build_scenario(parse_spec(data, str(path)), str(path))


def build_scenario(spec: ScenarioSpec, source: str) -> Scenario:
    """Turn a validated spec into core objects (schedule, costs, topology, variability)."""
    scenario = _build_deterministic(spec, source)
    if spec.variability is None:
        return scenario
    variability = _build_variability(spec.variability, scenario.schedule, source)
    return replace(scenario, variability=variability)


def _build_variability(section: VariabilitySpec, schedule: Schedule, source: str) -> Variability:
    """The variability section as core data; a kind section naming a profile file (relative
    to the scenario) takes its per-stage spread from that profile."""
    from pipesim.calibrate.profile import load_profile

    data = section.model_dump(exclude_none=True)
    cvs = {}
    for key in KIND_LETTERS:
        name = data.get(key, {}).get("profile")
        if name is None:
            continue
        try:
            cvs[key] = profile_stage_cvs(
                load_profile(Path(source).parent / name), key, schedule.model_stages
            )
        except ValueError as exc:
            raise ScenarioError(
                f"{source}: variability.{key}.profile: {_first_line(exc)}"
            ) from None
    try:
        return variability_from_mapping(data, schedule.devices, cvs)
    except ValueError as exc:
        raise ScenarioError(f"{source}: variability.{_first_line(exc)}") from None


def _build_deterministic(spec: ScenarioSpec, source: str) -> Scenario:
    from pipesim import derive  # the model/cluster arithmetic, only when needed

    pipe = spec.pipeline
    sizes = derive.batch_sizes(spec, source)
    schedule = _build_schedule(spec, source, sizes.microbatches)
    topology = derive.topology(spec, schedule.devices, source)
    if spec.model is None:
        costs = _build_costs(spec.costs, schedule.model_stages, source, pipe)
        return Scenario(
            spec.name,
            spec.description,
            schedule,
            costs,
            topology,
            sizes.microbatch_size,
            pipe.mode,
            None,
            spec,
        )
    _no_hand_costs(spec, source)
    derived = derive.model_costs(spec, schedule, topology, sizes.microbatch_size, source)
    return Scenario(
        name=spec.name,
        description=spec.description,
        schedule=schedule,
        costs=derived.costs,
        topology=topology,
        microbatch_size=sizes.microbatch_size,
        mode=pipe.mode,
        seq_len=spec.model.seq_len,
        spec=spec,
        accounting=derived.accounting,
        tail_ms=derived.tail_ms,
        tail_after_flush=not spec.parallel.dp_overlap,
    )


def _no_hand_costs(spec: ScenarioSpec, source: str) -> None:
    typed = sorted(spec.costs.model_fields_set)
    if typed:
        raise ScenarioError(
            f"{source}: costs.{typed[0]}: not allowed with a model section (costs are derived from the model)"
        )


def _build_schedule(spec: ScenarioSpec, source: str, microbatches: int) -> Schedule:
    pipe = spec.pipeline
    forward = pipe.mode == "forward"
    if pipe.schedule == "csv":
        return _schedule_from_file(pipe, source, forward)
    if pipe.schedule_file is not None:
        raise ScenarioError(f"{source}: pipeline.schedule_file: only used with schedule: csv")
    try:
        return get_schedule(
            pipe.schedule, pipe.devices, microbatches, pipe.virtual_stages, forward=forward
        )
    except ScheduleError as exc:
        raise ScenarioError(f"{source}: pipeline: {_first_line(exc)}") from None


def _schedule_from_file(pipe: PipelineSpec, source: str, forward: bool) -> Schedule:
    if pipe.schedule_file is None:
        raise ScenarioError(f"{source}: pipeline.schedule_file: required when schedule is csv")
    csv_path = Path(source).parent / pipe.schedule_file
    if not csv_path.is_file():
        raise ScenarioError(f"{source}: pipeline.schedule_file: no such file {csv_path}")
    try:
        schedule = from_csv(csv_path.read_text(encoding="utf-8"), name=f"csv:{csv_path.name}")
        if forward:
            schedule = forward_only(schedule)
        validate(schedule)
    except ScheduleError as exc:
        raise ScenarioError(f"{csv_path}: {exc}") from None
    for field_name, given, found in (
        ("devices", pipe.devices, schedule.devices),
        ("microbatches", pipe.microbatches, schedule.microbatches),
    ):
        if given is not None and given != found:
            raise ScenarioError(
                f"{source}: pipeline.{field_name}: {given} given but {csv_path.name} has {found}"
            )
    return schedule


def _build_costs(spec: CostsSpec, stages: int, source: str, pipe: PipelineSpec) -> Costs:
    if spec.profile is not None:
        return _profile_costs(spec, stages, source)
    values = spec.model_dump(exclude={"profile"})
    for key, value in values.items():
        if isinstance(value, list) and len(value) != stages:
            raise ScenarioError(
                f"{source}: costs.{key}: has {len(value)} entries, expected a number or {stages} "
                f"(devices * virtual_stages = {pipe.devices} * {pipe.virtual_stages})"
            )
    try:
        return uniform_costs(stages, **values)
    except ValueError as exc:
        raise ScenarioError(f"{source}: costs: {exc}") from None


def _profile_costs(spec: CostsSpec, stages: int, source: str) -> Costs:
    from pipesim.calibrate.profile import ProfileError, costs_from_profile, load_profile

    others = sorted(spec.model_fields_set - {"profile"})
    if others:
        raise ScenarioError(
            f"{source}: costs.{others[0]}: not allowed with costs.profile (the profile gives every cost)"
        )
    path = Path(source).parent / spec.profile
    try:
        return costs_from_profile(load_profile(path), stages)
    except (ProfileError, ValueError) as exc:
        raise ScenarioError(f"{source}: costs.profile: {_first_line(exc)}") from None


PER_CHUNK_COSTS = (
    "forward_ms",
    "backward_ms",
    "backward_input_ms",
    "backward_weight_ms",
    "overlapped_fb_ms",
    "activation_memory_bytes",
    "weight_grad_memory_bytes",
)


def with_schedule(base: dict, name: str) -> tuple[dict, str]:
    """The scenario under another schedule, and a note on what had to change.

    When the policy needs another number of virtual stages, the model is cut into that many
    chunks per device instead: scalar per-chunk costs scale by old/new chunks so every
    schedule does the same work. Per-stage cost lists cannot be re-cut: ScenarioError.
    """
    data = json.loads(json.dumps(base))
    data["pipeline"]["schedule"] = name
    old = int(data["pipeline"].get("virtual_stages", 1))
    new = fit_virtual_stages(name, old)
    if new == old:
        return data, ""
    data["pipeline"]["virtual_stages"] = new
    costs = data.setdefault("costs", {})
    for key in PER_CHUNK_COSTS:
        value = costs.get(key)
        if isinstance(value, list):
            raise ScenarioError(
                f"costs.{key}: per-stage list fits virtual_stages={old}, {name} needs {new}"
            )
        if value is not None:
            costs[key] = value * old / new
    if "forward_ms" not in costs:
        costs["forward_ms"] = old / new
    return data, f"virtual_stages={new}, per-chunk costs x{old}/{new}"


# ---------------------------------------------------------------------------
# Error text


def _describe(exc: ValidationError) -> str:
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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
