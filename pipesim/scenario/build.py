"""Scenario files: what a user writes down, checked at the door.

A scenario names a schedule, the pipeline's sizes, the costs of each stage and the
hardware. It may be YAML, TOML or JSON (``schema_version: 1``). pydantic v2 checks it
at the file boundary (unknown keys are errors), then it becomes plain frozen data for
the core: a ``Scenario`` holding a Schedule, Costs and a Topology.

``--set key.path=value`` overrides go into the raw mapping before validation, so an
override is checked exactly like the file.

Every problem becomes one ``ScenarioError`` line: ``FILE: FIELD: what is wrong``. A size
guard refuses, before anything is built, a schedule of more than ``pipeline.max_actions``
actions (10 million unless the scenario raises it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pipesim.scenario import decode, derive, searched
from pipesim.scenario.load import apply_overrides, read_mapping, read_text_file
from pipesim.scenario.profile import ProfileError, costs_from_profile, load_profile
from pipesim.scenario.schema import (
    CostsSpec,
    PipelineSpec,
    ScenarioError,
    ScenarioSpec,
    VariabilitySpec,
    describe_validation_error,
)
from pipesim.scenario.variability import KIND_LETTERS, profile_stage_cvs, variability_from_mapping
from pipesim.schedules import fit_virtual_stages, get_schedule
from pipesim.schedules.ir import Schedule, ScheduleError, forward_only
from pipesim.schedules.torch_csv import read_torch_csv
from pipesim.schedules.validity import validate
from pipesim.search import AUTO_POLICIES, SearchResult
from pipesim.sim.costs import Costs, uniform_costs
from pipesim.sim.links import Topology
from pipesim.sim.metrics import Accounting
from pipesim.sim.variability import Variability


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
    # Hand-typed (or profiled) costs are per chunk: more virtual stages mean more work per
    # device. Costs derived from a model are re-cut instead (False).
    costs_per_chunk: bool = True
    search: SearchResult | None = None  # how zb-auto / v-auto found the schedule


# ---------------------------------------------------------------------------
# Reading, validating, building


__all__ = [
    "Scenario",
    "ScenarioError",
    "apply_overrides",
    "build_scenario",
    "load_scenario",
    "parse_spec",
    "read_mapping",
    "with_schedule",
]


def parse_spec(data: dict[str, Any], source: str) -> ScenarioSpec:
    try:
        return ScenarioSpec.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(f"{source}: {describe_validation_error(exc)}") from None
    except RecursionError:
        raise ScenarioError(f"{source}: nested too deeply") from None


def load_scenario(
    path: str | Path,
    overrides: list[str] | tuple[str, ...] = (),
    progress: Callable[[int], None] | None = None,
) -> Scenario:
    """Read, override, validate and build a scenario file (``progress``: as below)."""
    data = apply_overrides(read_mapping(path), list(overrides))
    return build_scenario(parse_spec(data, str(path)), str(path), progress)


def build_scenario(
    spec: ScenarioSpec, source: str, progress: Callable[[int], None] | None = None
) -> Scenario:
    """Turn a validated spec into core objects (schedule, costs, topology, variability).
    A searched policy (zb-auto, v-auto) is searched for once the costs are known;
    ``progress(1)`` is called after each candidate it tries."""
    scenario = _searched(_build_deterministic(spec, source), source, progress)
    if spec.variability is None:
        return scenario
    variability = _build_variability(spec.variability, scenario.schedule, source)
    return replace(scenario, variability=variability)


def _build_variability(section: VariabilitySpec, schedule: Schedule, source: str) -> Variability:
    """The variability section as core data; a kind section naming a profile file (relative
    to the scenario) takes its per-stage spread from that profile."""

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
    if (pipe := spec.pipeline).mode == "decode":  # token steps: pipesim.scenario.decode
        return Scenario(**decode.scenario_fields(spec, source))
    if spec.model is not None:
        derive.check_tensor_parallel(spec, source)
    schedule = None
    if _microbatches_from_file(spec):  # a csv schedule gives them, as it gives the devices
        schedule = _build_schedule(spec, source, 0)
        pipe = pipe.model_copy(update={"microbatches": schedule.microbatches})
        spec = spec.model_copy(update={"pipeline": pipe})
    sizes = derive.batch_sizes(spec, source)
    if schedule is None:
        schedule = _build_schedule(spec, source, sizes.microbatches)
    topology = derive.topology(spec, schedule, source)
    if spec.model is None:
        _no_parallel_without_model(spec, source)
        return Scenario(
            name=spec.name,
            description=spec.description,
            schedule=schedule,
            costs=_build_costs(spec.costs, schedule.model_stages, source, pipe),
            topology=topology,
            microbatch_size=sizes.microbatch_size,
            mode=pipe.mode,
            seq_len=None,
            spec=spec,
        )
    _no_hand_costs(spec, source)
    derived = derive.model_costs(spec, schedule, sizes.microbatch_size, source)
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
        costs_per_chunk=False,
    )


def _microbatches_from_file(spec: ScenarioSpec) -> bool:
    no_global_batch = spec.model is None or spec.model.global_batch is None
    return (
        spec.pipeline.schedule == "csv" and spec.pipeline.microbatches is None and no_global_batch
    )


def _no_parallel_without_model(spec: ScenarioSpec, source: str) -> None:
    given = sorted(spec.parallel.model_fields_set)
    if given:
        raise ScenarioError(
            f"{source}: parallel.{given[0]}: only used with a model section "
            "(hand-typed costs are already per GPU)"
        )


def check_size(pipe: PipelineSpec, microbatches: int, source: str) -> None:
    """The size guard: refuse a schedule of more than ``pipeline.max_actions`` actions
    before building it (devices x microbatches x virtual stages x kinds, with three kinds,
    F, I and W, when training and one when running forward only)."""
    kinds = 1 if pipe.mode == "forward" else 3
    actions = pipe.devices * microbatches * pipe.virtual_stages * kinds
    if actions > pipe.max_actions:
        raise ScenarioError(
            f"{source}: pipeline: up to {_amount(actions)} actions ({pipe.devices} devices x "
            f"{microbatches} microbatches x {pipe.virtual_stages} virtual stages x {kinds} "
            f"kinds), over the limit of {pipe.max_actions:,}; raise pipeline.max_actions "
            "to run it anyway"
        )


def _amount(count: int) -> str:
    return f"{count:,}" if count < 10**12 else f"{float(count):.2e}"


def _no_hand_costs(spec: ScenarioSpec, source: str) -> None:
    typed = sorted(spec.costs.model_fields_set)
    if typed:
        raise ScenarioError(
            f"{source}: costs.{typed[0]}: not allowed with a model section (costs are derived from the model)"
        )


def _build_schedule(spec: ScenarioSpec, source: str, microbatches: int) -> Schedule:
    pipe = spec.pipeline
    forward = pipe.mode == "forward"
    if pipe.schedule is None:
        hint = " (a serving: scenario runs with pipesim serve)" if spec.serving else ""
        raise ScenarioError(f"{source}: pipeline.schedule: required key is missing{hint}")
    if pipe.schedule == "csv":
        return _schedule_from_file(pipe, source, forward)
    if pipe.schedule_file is not None:
        raise ScenarioError(f"{source}: pipeline.schedule_file: only used with schedule: csv")
    name = searched.stand_in(pipe, source)
    if pipe.devices is None:
        raise ScenarioError(f"{source}: pipeline.devices: required (a csv schedule may omit it)")
    check_size(pipe, microbatches, source)
    searched.check_size(pipe, microbatches, source)
    try:
        return get_schedule(name, pipe.devices, microbatches, pipe.virtual_stages, forward=forward)
    except ScheduleError as exc:
        raise ScenarioError(f"{source}: pipeline: {_first_line(exc)}") from None


def _searched(scenario: Scenario, source: str, progress=None) -> Scenario:
    """A zb-auto / v-auto scenario with the schedule searched on its costs and links."""
    if scenario.spec.pipeline.schedule not in AUTO_POLICIES:
        return scenario
    found = searched.search(
        scenario.spec.pipeline,
        scenario.schedule,
        scenario.costs,
        scenario.topology,
        source,
        progress,
    )
    return replace(scenario, schedule=found.schedule, search=found)


def _schedule_from_file(pipe: PipelineSpec, source: str, forward: bool) -> Schedule:
    if pipe.schedule_file is None:
        raise ScenarioError(f"{source}: pipeline.schedule_file: required when schedule is csv")
    csv_path = Path(source).parent / pipe.schedule_file
    try:
        text = read_text_file(csv_path, MAX_SCHEDULE_FILE_BYTES)
    except ScenarioError as exc:
        raise ScenarioError(f"{source}: pipeline.schedule_file: {exc.line}") from None
    cells = sum(map(text.count, ",;\n")) + 1  # at least one per action
    if cells > pipe.max_actions:
        raise ScenarioError(
            f"{source}: pipeline.schedule_file: {csv_path.name} may hold up to {cells:,} "
            f"actions, over the limit of {pipe.max_actions:,}; raise pipeline.max_actions "
            "to run it anyway"
        )
    digits = (d.lstrip("0") or "0" for d in re.findall(r"\d+", text))
    largest = max(digits, key=lambda d: (len(d), d), default="0")
    if len(largest) > len(str(cells)) or int(largest) >= cells:
        raise ScenarioError(
            f"{csv_path}: index {largest[:20]}{'...' if len(largest) > 20 else ''} is too large: "
            f"a file of at most {cells:,} actions has no stage or microbatch that large"
        )
    try:
        schedule = read_torch_csv(text, name=f"csv:{csv_path.name}")  # any form torch writes
        if forward:
            schedule = forward_only(schedule)
        validate(schedule)
    except ScheduleError as exc:
        head, _, picture = str(exc).partition("\n")
        raise ScenarioError(f"{csv_path}: {head}", picture) from None
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
    values = spec.model_dump(exclude={"profile", "prefill_ms", "decode_ms"})
    for key, value in values.items():
        if isinstance(value, list) and len(value) != stages:
            raise ScenarioError(
                f"{source}: costs.{key}: has {len(value)} entries, expected a number or {stages} "
                f"({_stage_count(pipe)})"
            )
    try:
        return uniform_costs(stages, **values)
    except ValueError as exc:
        raise ScenarioError(f"{source}: costs: {exc}") from None


def _stage_count(pipe: PipelineSpec) -> str:
    if pipe.devices is None:
        return "one per stage of the csv schedule"
    return f"devices * virtual_stages = {pipe.devices} * {pipe.virtual_stages}"


def _profile_costs(spec: CostsSpec, stages: int, source: str) -> Costs:

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


MAX_SCHEDULE_FILE_BYTES = 64 << 20

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
    Values of the wrong type are left as they are, for validation to name.
    """
    data = json.loads(json.dumps(base))
    pipeline = data.get("pipeline")
    if not isinstance(pipeline, dict):
        raise ScenarioError("pipeline: required section is missing")
    pipeline["schedule"] = name
    old = pipeline.get("virtual_stages", 1)
    if not _is_number(old) or not isinstance(old, int) or old < 1:
        return data, ""
    new = AUTO_POLICIES[name] if name in AUTO_POLICIES else fit_virtual_stages(name, old)
    if new == old:
        return data, ""
    pipeline["virtual_stages"] = new
    if data.get("model") is not None:
        return data, f"virtual_stages={new}, the model re-cut into {new} chunks per device"
    costs = data.setdefault("costs", {})
    if not isinstance(costs, dict):
        return data, ""
    for key in PER_CHUNK_COSTS:
        value = costs.get(key)
        if isinstance(value, list):
            raise ScenarioError(
                f"costs.{key}: per-stage list fits virtual_stages={old}, {name} needs {new}"
            )
        if _is_number(value) and abs(value) <= MAX_SCALED:  # larger: validation names it
            costs[key] = value * old / new
    if "forward_ms" not in costs:
        costs["forward_ms"] = old / new
    return data, f"virtual_stages={new}, per-chunk costs x{old}/{new}"


MAX_SCALED = 1e300


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
