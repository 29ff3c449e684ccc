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
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pipesim.cluster.expert_parallel import ExpertParallelCosts
from pipesim.cluster.transformer import ParameterCount, parameter_count
from pipesim.scenario import decode_mode, derive, searched
from pipesim.scenario.load import apply_overrides, read_mapping
from pipesim.scenario.profile import ProfileError, costs_from_profile, load_profile
from pipesim.scenario.schedule import build_schedule, check_overlap_model
from pipesim.scenario.schema import (
    CostsSpec,
    Mode,
    PipelineSpec,
    ScenarioError,
    ScenarioSpec,
    VariabilitySpec,
    describe_validation_error,
    first_line,
    per_stage_costs,
)
from pipesim.scenario.variability import KIND_LETTERS, profile_stage_cvs, variability_from_mapping
from pipesim.schedules import fit_virtual_stages
from pipesim.schedules.ir import Schedule
from pipesim.search import AUTO_POLICIES, SearchResult
from pipesim.search.tail import Tail
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
    mode: Mode
    seq_len: int | None
    spec: ScenarioSpec
    accounting: Accounting | None = None
    tail_ms: tuple[float, ...] | None = None  # end-of-step work per device
    tail_after_flush: bool = True
    optimizer_ms: tuple[float, ...] | None = None  # the optimizer step's part of tail_ms
    variability: Variability | None = None  # Monte Carlo runs only
    # Hand-typed (or profiled) costs are per chunk: more virtual stages mean more work per
    # device. Costs derived from a model are re-cut instead (False).
    costs_per_chunk: bool = True
    search: SearchResult | None = None  # how zb-auto / v-auto found the schedule
    parameters: ParameterCount | None = None  # a model's total and activated parameters
    expert_parallel: ExpertParallelCosts | None = None  # a MoE model's all-to-alls and loads


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
            raise ScenarioError(f"{source}: variability.{key}.profile: {first_line(exc)}") from None
    try:
        return variability_from_mapping(data, schedule.devices, cvs)
    except ValueError as exc:
        raise ScenarioError(f"{source}: variability.{first_line(exc)}") from None


def _build_deterministic(spec: ScenarioSpec, source: str) -> Scenario:
    if (pipe := spec.pipeline).mode == Mode.DECODE:  # token steps: pipesim.scenario.decode_mode
        return Scenario(**decode_mode.scenario_fields(spec, source))
    if spec.model is not None:
        derive.check_tensor_parallel(spec, source)
    schedule = None
    if _microbatches_from_file(spec):  # a csv schedule gives them, as it gives the devices
        schedule = build_schedule(spec, source, 0)
        pipe = pipe.model_copy(update={"microbatches": schedule.microbatches})
        spec = spec.model_copy(update={"pipeline": pipe})
    sizes = derive.batch_sizes(spec, source)
    if schedule is None:
        schedule = build_schedule(spec, source, sizes.microbatches)
    job = derive.build_job(spec, source, sizes)
    fields = {
        "name": spec.name,
        "description": spec.description,
        "schedule": schedule,
        "topology": derive.topology(job, schedule, source),
        "microbatch_size": sizes.microbatch_size,
        "mode": Mode(pipe.mode),
        "spec": spec,
    }
    if spec.model is None:
        _no_parallel_without_model(spec, source)
        costs = _build_costs(spec.costs, schedule.model_stages, source, pipe)
        return Scenario(**fields, costs=costs, seq_len=None)
    _no_hand_costs(spec, source)
    check_overlap_model(spec, source)
    derived = derive.model_costs(job, schedule, source)
    return Scenario(
        **fields,
        costs=derived.costs,
        seq_len=spec.model.seq_len,
        accounting=derived.accounting,
        tail_ms=derived.tail_ms,
        tail_after_flush=not spec.parallel.dp_overlap,
        optimizer_ms=derived.optimizer_ms,
        costs_per_chunk=False,
        parameters=parameter_count(job.model),
        expert_parallel=derived.expert_parallel,
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


def _no_hand_costs(spec: ScenarioSpec, source: str) -> None:
    typed = sorted(spec.costs.model_fields_set)
    if typed:
        raise ScenarioError(
            f"{source}: costs.{typed[0]}: not allowed with a model section (costs are derived from the model)"
        )


def _searched(scenario: Scenario, source: str, progress=None) -> Scenario:
    """A zb-auto / v-auto scenario with the schedule searched on its costs and links."""
    if scenario.spec.pipeline.schedule not in AUTO_POLICIES:
        return scenario
    tail = None
    if scenario.tail_ms is not None:
        tail = Tail(scenario.tail_ms, scenario.tail_after_flush, scenario.optimizer_ms)
    found = searched.search(
        scenario.spec.pipeline,
        scenario.schedule,
        scenario.costs,
        scenario.topology,
        source,
        progress,
        tail,
    )
    return replace(scenario, schedule=found.schedule, search=found)


def _build_costs(spec: CostsSpec, stages: int, source: str, pipe: PipelineSpec) -> Costs:
    if spec.profile is not None:
        return _profile_costs(spec, stages, source)
    values = spec.model_dump(exclude={"profile", "prefill_ms", "decode_ms"})
    for key, value in values.items():
        if isinstance(value, list):
            values[key] = per_stage_costs(value, stages, key, source, _stage_count(pipe))
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
        raise ScenarioError(f"{source}: costs.profile: {first_line(exc)}") from None


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
