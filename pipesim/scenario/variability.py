"""A scenario's ``variability:`` section turned into the engine's Variability."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pipesim.schedules.ir import Kind
from pipesim.sim.variability import Noise, Straggler, Variability, cv_from_spread

# ---------------------------------------------------------------------------
# From a scenario's ``variability:`` section (plain data, already validated)

_KINDS_OF = {
    "forward": (Kind.F,),
    "backward": (Kind.B, Kind.I, Kind.W),
    "backward_input": (Kind.I,),
    "backward_weight": (Kind.W,),
}


def noise_from_mapping(data: dict) -> Noise:
    samples = data.get("samples")
    return Noise(
        distribution=data.get("distribution", "lognormal"),
        cv=float(data.get("cv", 0.0)),
        samples=None if samples is None else tuple(float(v) for v in samples),
    )


def variability_from_mapping(
    data: dict, devices: int, stage_cvs: dict[str, Sequence[float]] | None = None
) -> Variability:
    """Build a Variability from the section's plain mapping.

    Keys ``forward``, ``backward`` (B, I and W), ``backward_input`` and ``backward_weight``
    (the last two override ``backward``) hold noise; ``stragglers`` a list of
    ``{device, factor, probability}`` (device in ``[0, devices)``); ``link_jitter`` noise; ``microbatch_scale`` a list
    of factors or noise. ``stage_cvs`` maps a kind key to per-stage cvs read from a
    profile's spread, for kind sections that name a profile.
    """
    noise: dict[Kind, Noise] = {}
    for key in ("forward", "backward", "backward_input", "backward_weight"):
        section = data.get(key)
        if section is None:
            continue
        item = noise_from_mapping(section)
        if stage_cvs and key in stage_cvs:
            item = replace(item, distribution="lognormal", cv_by_stage=tuple(stage_cvs[key]))
        for kind in _KINDS_OF[key]:
            noise[kind] = item
    stragglers = tuple(
        Straggler(int(s["device"]), float(s["factor"]), float(s.get("probability", 1.0)))
        for s in data.get("stragglers") or ()
    )
    for n, straggler in enumerate(stragglers):
        if not 0 <= straggler.device < devices:
            raise ValueError(
                f"stragglers[{n}].device: {straggler.device} is not a device; "
                f"allowed: 0 to {devices - 1}"
            )
    jitter = data.get("link_jitter")
    scale = data.get("microbatch_scale")
    if isinstance(scale, dict):
        scale = noise_from_mapping(scale)
    elif scale is not None:
        scale = tuple(float(v) for v in scale)
    return Variability(
        noise=tuple(sorted(noise.items())),
        stragglers=stragglers,
        link_jitter=None if jitter is None else noise_from_mapping(jitter),
        microbatch_scale=scale,
    )


KIND_LETTERS = {"forward": "F", "backward": "B", "backward_input": "I", "backward_weight": "W"}


def profile_stage_cvs(profile, key: str, stages: int) -> tuple[float, ...]:
    """Per-stage cvs of one kind section (``forward``, ``backward``, ...) from a profile's
    measured p10-p90 spread; a one-stage profile applies to every stage."""
    letter = KIND_LETTERS[key]
    timings = list(profile.stages)
    if len(timings) == 1:
        timings *= stages
    if len(timings) != stages:
        raise ValueError(
            f"the profile has {len(profile.stages)} stages, "
            f"the scenario needs {stages} (or 1 for all)"
        )
    cvs = []
    for timing in timings:
        spread = timing.kinds.get(letter)
        if spread is None and letter == "B":
            spread = timing.kinds.get("I")
        if spread is None:
            raise ValueError(f"stage {timing.stage} of the profile has no {letter} timings")
        cvs.append(cv_from_spread(spread.median_ms, spread.p10_ms, spread.p90_ms))
    return tuple(cvs)
