"""Short answers: a scenario that checks out (``validate``) and the schedule catalogue
(``schedules``)."""

from __future__ import annotations

import json

from pipesim.analysis.validation import Validation, serving_summary
from pipesim.cli.render.units import format_bytes


def render_validation(validation: Validation, fmt: str = "table") -> str:
    """The file is fine, and what it builds: the schedule for run, the memory of the device
    that needs the most (with its OOM flag, as ``pipesim run`` flags it) where a model
    gives static memory, and the replicas for serve. JSON: ``Validation.to_dict()``."""
    if fmt == "json":
        return json.dumps(validation.to_dict(), indent=2) + "\n"
    source, scenario = validation.source, validation.scenario
    if scenario is None:
        return f"{source}: ok for pipesim serve - {_serving_line(validation)}\n"
    s = scenario.schedule
    lines = [
        f"{source}: ok - {s.name}, {s.devices} devices, {s.stages} stages, "
        f"{s.microbatches} microbatches, {s.num_actions} actions"
    ]
    if validation.has_static_memory:
        lines.append(f"  memory: {_memory_line(validation)}")
    if validation.serving is not None:
        lines.append(f"  serve: {_serving_line(validation)}")
    return "\n".join(lines) + "\n"


def validation_notes(validation: Validation) -> list[str]:
    """What to read beside the answer: why ``pipesim run`` would refuse a serving file."""
    if validation.scenario is None:
        return [f"pipesim run would refuse it: {validation.run_refusal}"]
    return []


def _memory_line(validation: Validation) -> str:
    """``OOM: device k needs X (static + activations + runtime) of Y; n of D devices over``, or the
    peak that fits, or the peak where the GPU's memory is unknown."""
    worst = max(validation.memory, key=lambda d: d.peak_memory_bytes)
    parts = (
        f"{format_bytes(worst.static_memory_bytes)} static + "
        f"{format_bytes(worst.peak_activation_bytes)} activations + "
        f"{format_bytes(worst.runtime_memory_bytes)} runtime"
    )
    if worst.transient_bytes:
        parts += f" + {format_bytes(worst.transient_bytes)} all-to-all buffers"
    if validation.memory_capacity_bytes is None:
        return (
            f"peak {format_bytes(worst.peak_memory_bytes)} on device {worst.device} ({parts}); "
            "the GPU's memory is unknown, not checked"
        )
    if not validation.oom:
        return (
            f"fits, peak {format_bytes(worst.peak_memory_bytes)} of {_usable(validation)} "
            f"on device {worst.device} ({parts})"
        )
    over = sum(d.oom for d in validation.memory)
    return (
        f"OOM: device {worst.device} needs {format_bytes(worst.peak_memory_bytes)} ({parts}) "
        f"of {_usable(validation)}; {over} of {len(validation.memory)} devices over"
    )


def _usable(validation: Validation) -> str:
    """The memory the OOM check allows: "76.00 GiB usable (80.00 GiB less 5% headroom)"."""
    capacity = validation.memory_capacity_bytes or 0.0
    headroom = validation.memory_headroom
    if not headroom:
        return format_bytes(capacity)
    usable = format_bytes(capacity * (1 - headroom))
    return f"{usable} usable ({format_bytes(capacity)} less {headroom * 100:.3g}% headroom)"


def _serving_line(validation: Validation) -> str:
    serving = serving_summary(validation.serving)
    return (
        f"{serving['replicas']} replicas x ({serving['pipeline']} pipeline stages x "
        f"{serving['tensor']} tensor GPUs), {serving['kv_blocks']:,} KV blocks of "
        f"{serving['block_size']} tokens, {serving['requests']:,} requests, costs "
        f"{serving['costs']}"
    )


def render_schedules(rows: list[tuple[str, str, str]]) -> str:
    """Each ``(name, summary, constraints)`` as two lines, the names in one column."""
    width = max(len(name) for name, _, _ in rows)
    lines = []
    for name, summary, constraints in rows:
        lines.append(f"{name:<{width}}  {summary}")
        lines.append(f"{'':<{width}}  constraints: {constraints}")
    return "\n".join(lines) + "\n"
