"""A scenario's schedule: the policy its pipeline section names, or torch's CSV file.

A named policy is built by ``pipesim.schedules.get_schedule`` once the size guard lets it
(``check_size``: more than ``pipeline.max_actions`` actions are refused before anything is
built); a searched one (zb-auto, v-auto) starts from its stand-in
(``pipesim.scenario.searched``). ``schedule: csv`` reads ``schedule_file``, in any form torch
writes, guarded by its size before it is parsed. Every problem is one ScenarioError line.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipesim.scenario import searched
from pipesim.scenario.load import read_text_file
from pipesim.scenario.schema import Mode, PipelineSpec, ScenarioError, ScenarioSpec, first_line
from pipesim.schedules import POLICIES, get_schedule
from pipesim.schedules.forward import forward_only
from pipesim.schedules.ir import Schedule, ScheduleError
from pipesim.schedules.policies import A2A_OVERLAP_POLICIES
from pipesim.schedules.torch_csv import read_torch_csv
from pipesim.schedules.validity import validate

MAX_SCHEDULE_FILE_BYTES = 64 << 20


def build_schedule(spec: ScenarioSpec, source: str, microbatches: int) -> Schedule:
    pipe = spec.pipeline
    forward = pipe.mode == Mode.FORWARD
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
    options = _options(pipe, name, source)
    try:
        return get_schedule(
            name, pipe.devices, microbatches, pipe.virtual_stages, forward=forward, **options
        )
    except ScheduleError as exc:
        raise ScenarioError(f"{source}: pipeline: {first_line(exc)}") from None


def _options(pipe: PipelineSpec, name: str, source: str) -> dict[str, object]:
    """The policy's options the pipeline section sets: ``delay_wgrad`` where it is on, for
    a policy that takes it."""
    if not pipe.delay_wgrad:
        return {}
    policy = POLICIES.get(name)
    if policy is None or "delay_wgrad" not in policy.options:
        takers = ", ".join(n for n, p in POLICIES.items() if "delay_wgrad" in p.options)
        raise ScenarioError(
            f"{source}: pipeline.delay_wgrad: schedule {name} has no delayed weight gradient; "
            f"allowed with {takers}"
        )
    return {"delay_wgrad": True}


def check_overlap_model(spec: ScenarioSpec, source: str) -> None:
    """A combined-1F1B schedule overlaps MoE all-to-alls: refuse it for a model without
    MoE layers (hand-typed costs may still run it, their pair times given)."""
    name = spec.pipeline.schedule
    if name in A2A_OVERLAP_POLICIES and spec.model is not None and spec.model.moe is None:
        plain = name.removesuffix("-a2a-overlap")
        raise ScenarioError(
            f"{source}: pipeline.schedule: {name} overlaps MoE all-to-alls, and the model has "
            f"no MoE layers (model.moe); use {plain}"
        )


def check_size(pipe: PipelineSpec, microbatches: int, source: str) -> None:
    """The size guard: refuse a schedule of more than ``pipeline.max_actions`` actions
    before building it (devices x microbatches x virtual stages x kinds, with three kinds,
    F, I and W, when training and one when running forward only)."""
    kinds = 1 if pipe.mode == Mode.FORWARD else 3
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
