"""Building a decode-mode scenario (``pipeline.mode: decode``, token generation): schedule,
per-step costs, links.

A decode scenario says how many devices (``pipeline.devices``), how many groups of
requests are in flight (``pipeline.microbatches``, ``microbatch_size`` requests each) and
how many tokens each request generates after a prompt (``decode.tokens``,
``decode.prompt_tokens``). The schedule is fixed by that (``pipesim.schedules.decode``):
``pipeline.schedule`` is not given. Token step ``t`` on device ``s`` is virtual stage
``t p + s``, so the costs have one entry per (step, device):

* hand-typed: ``costs.prefill_ms`` for step 0 and ``costs.decode_ms`` for every later
  step (a number, or one per device); ``costs.activation_bytes`` is what one decode step
  of a group sends to the next device, and the prefill sends ``prompt_tokens`` times that;
* from a model (``model:`` and ``hardware.gpu``): the prefill of ``b`` prompts of
  ``prompt_tokens`` tokens, and decode step ``t`` of ``b`` sequences at context
  ``prompt_tokens + t``, the hidden states of every token crossing each boundary, as
  ``pipesim.cluster.token_steps`` derives them from the scenario's job;
* from a profile (``costs: {profile: ...}``) with ``prefill`` and ``decode`` timings per
  stage, measured at the scenario's prompt length and group size.

In every case the last device sends only the sampled token ids back to device 0
(``microbatch_size`` int64 values).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipesim.cluster.job import Job
from pipesim.cluster.token_steps import token_step_messages
from pipesim.cluster.transformer import parameter_count
from pipesim.scenario import derive
from pipesim.scenario.profile import Profile, ProfileError, load_profile
from pipesim.scenario.schema import Mode, ScenarioError, ScenarioSpec, first_line, per_stage_costs
from pipesim.schedules import decode as decode_policy
from pipesim.schedules.ir import Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.metrics import Accounting

HAND_KEYS = frozenset({"prefill_ms", "decode_ms", "activation_bytes", "overhead_ms"})
UNUSED_PIPELINE_KEYS = ("schedule", "schedule_file", "virtual_stages", "memory_limit_bytes")


def scenario_fields(spec: ScenarioSpec, source: str) -> dict[str, Any]:
    """The fields of a decode ``pipesim.scenario.build.Scenario``: a checked decode
    scenario's schedule, costs and links (ScenarioError on bad input, naming the key)."""
    _check_keys(spec, source)
    pipe, tokens = spec.pipeline, spec.decode.tokens
    sizes = derive.batch_sizes(spec, source)
    actions = pipe.devices * sizes.microbatches * tokens
    if actions > pipe.max_actions:
        raise ScenarioError(
            f"{source}: pipeline: {pipe.devices} devices x {sizes.microbatches} groups x "
            f"{tokens} token steps (decode.tokens) = {actions:,} actions, over the limit of "
            f"{pipe.max_actions:,}; raise pipeline.max_actions to run it anyway"
        )
    schedule = decode_policy.build(pipe.devices, sizes.microbatches, tokens)
    if spec.model is not None:
        _check_model(spec, source)
    job, accounting = derive.build_job(spec, source, sizes), None
    if spec.model is not None:
        costs, accounting = _model_costs(job, schedule, spec, source)
    elif spec.costs.profile is not None:
        costs = _profile_costs(spec, sizes.microbatch_size, source)
    else:
        costs = _hand_costs(spec, sizes.microbatch_size, source)
    return {
        "name": spec.name,
        "description": spec.description,
        "schedule": schedule,
        "costs": costs,
        "topology": derive.topology(job, schedule, source),
        "microbatch_size": sizes.microbatch_size,
        "mode": Mode.DECODE,
        "seq_len": None,
        "spec": spec,
        "accounting": accounting,
        "costs_per_chunk": False,  # a stage is one token step of one device: nothing to re-cut
        "parameters": None if job.model is None else parameter_count(job.model),
    }


def _check_keys(spec: ScenarioSpec, source: str) -> None:
    pipe = spec.pipeline
    if spec.decode is None:
        raise ScenarioError(
            f"{source}: decode: required with pipeline.mode: decode (decode.tokens, "
            "decode.prompt_tokens)"
        )
    for key in UNUSED_PIPELINE_KEYS:
        if key in pipe.model_fields_set:
            raise ScenarioError(
                f"{source}: pipeline.{key}: not used in decode mode (each device runs its "
                "token steps in order, group after group)"
            )
    if pipe.devices is None:
        raise ScenarioError(f"{source}: pipeline.devices: required in decode mode")
    if spec.variability is not None:
        raise ScenarioError(f"{source}: variability: not supported in decode mode")
    if spec.parallel.data != 1 or spec.parallel.zero_stage:
        field = "data" if spec.parallel.data != 1 else "zero_stage"
        raise ScenarioError(
            f"{source}: parallel.{field}: not used in decode mode (one pipeline replica; "
            "see pipesim serve for replicas)"
        )
    if spec.model is not None:
        typed = sorted(spec.costs.model_fields_set)
        if typed:
            raise ScenarioError(
                f"{source}: costs.{typed[0]}: not allowed with a model section (costs are "
                "derived from the model)"
            )
    elif "parallel" in spec.model_fields_set and spec.parallel.model_fields_set:
        given = sorted(spec.parallel.model_fields_set)[0]
        raise ScenarioError(f"{source}: parallel.{given}: only used with a model section")


# ---------------------------------------------------------------------------
# Hand-typed and profiled costs


def _per_device(value: float | list[float], key: str, devices: int, source: str) -> list[float]:
    return list(per_stage_costs(value, devices, key, source, "one per device"))


def _hand_costs(spec: ScenarioSpec, group_size: int, source: str) -> Costs:
    costs, p = spec.costs, spec.pipeline.devices
    extra = sorted(costs.model_fields_set - HAND_KEYS)
    if extra:
        raise ScenarioError(
            f"{source}: costs.{extra[0]}: not used in decode mode; allowed: prefill_ms, "
            "decode_ms, activation_bytes, overhead_ms (or a profile, or a model section)"
        )
    for key in ("prefill_ms", "decode_ms"):
        if getattr(costs, key) is None:
            raise ScenarioError(
                f"{source}: costs.{key}: required in decode mode (ms per stage: a number or "
                "one per device), or give a model section or costs.profile"
            )
    prefill = _per_device(costs.prefill_ms, "prefill_ms", p, source)
    decode = _per_device(costs.decode_ms, "decode_ms", p, source)
    step_bytes = _per_device(costs.activation_bytes, "activation_bytes", p, source)
    prompt = spec.decode.prompt_tokens
    return step_costs(
        prefill,
        decode,
        [b * prompt for b in step_bytes],
        step_bytes,
        spec,
        group_size,
        costs.overhead_ms,
    )


def _profile_costs(spec: ScenarioSpec, group_size: int, source: str) -> Costs:
    others = sorted(spec.costs.model_fields_set - {"profile"})
    if others:
        raise ScenarioError(
            f"{source}: costs.{others[0]}: not allowed with costs.profile (the profile gives "
            "every cost)"
        )
    path = Path(source).parent / spec.costs.profile
    try:
        profile = load_profile(path)
        prefill, decode, step_bytes = _profile_steps(profile, spec.pipeline.devices)
    except (ProfileError, ValueError) as exc:
        raise ScenarioError(f"{source}: costs.profile: {first_line(exc)}") from None
    overhead = profile.host.overhead_ms if profile.host is not None else 0.0
    prompt = spec.decode.prompt_tokens
    return step_costs(
        prefill, decode, [b * prompt for b in step_bytes], step_bytes, spec, group_size, overhead
    )


def _profile_steps(profile: Profile, devices: int) -> tuple[list, list, list]:
    """Per device prefill and decode medians and boundary bytes (one profiled stage
    stands for every device)."""
    timings = profile.stages
    if len(timings) == 1:
        timings = timings * devices
    elif len(timings) != devices:
        raise ProfileError(
            f"the profile has {len(timings)} stages, the scenario needs {devices} (or 1 for all)"
        )
    prefill, decode = [], []
    for timing in timings:
        p, d = timing.median_ms("prefill"), timing.median_ms("decode")
        if p is None or d is None:
            raise ProfileError(
                f"stage {timing.stage} has no prefill and decode timings (it holds "
                f"{', '.join(sorted(timing.kinds))}); decode mode needs both for every stage"
            )
        prefill.append(p)
        decode.append(d)
    return prefill, decode, [t.activation_bytes for t in timings]


def step_costs(
    prefill_ms: list[float],
    decode_ms: list[float],
    prefill_bytes: list[float],
    decode_bytes: list[float],
    spec: ScenarioSpec,
    group_size: int,
    overhead_ms: float = 0.0,
) -> Costs:
    """Costs of the ``p * T`` virtual stages from per-device prefill and decode figures;
    the last device's message is the sampled token ids."""
    p, steps = spec.pipeline.devices, spec.decode.tokens
    forward = prefill_ms + decode_ms * (steps - 1)
    sent = prefill_bytes + decode_bytes * (steps - 1)
    return token_step_messages(forward, sent, p, group_size, overhead_ms)


# ---------------------------------------------------------------------------
# Costs from a model


def _check_model(spec: ScenarioSpec, source: str) -> None:
    if spec.hardware.gpu is None:
        raise ScenarioError(f"{source}: hardware.gpu: required with a model section")
    derive.check_tensor_parallel(spec, source)


def _model_costs(
    job: Job, schedule: Schedule, spec: ScenarioSpec, source: str
) -> tuple[Costs, Accounting]:
    """Every token step's costs and the accounting, from the model (module docstring)."""
    return derive.token_step_costs(
        job, schedule, spec.decode.tokens, spec.decode.prompt_tokens, source
    )
