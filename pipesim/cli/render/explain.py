"""``pipesim explain`` and the run table's critical path: where the time goes, in words.

Rendering only: the critical path, idle time per cause and the gap sentences were all
computed by ``pipesim.analysis.critical``.
"""

from __future__ import annotations

import json

from pipesim.analysis.critical import Explanation, describe_gap, format_ms
from pipesim.analysis.exposure import CAUSE
from pipesim.analysis.run import Result


def render_explain(result: Result, fmt: str, max_gaps: int) -> str:
    """The explanation as JSON (``Explanation.to_dict()``) or as text."""
    if fmt == "json":
        return json.dumps(result.explanation.to_dict(), indent=2) + "\n"
    return render_explanation(result, max_gaps)


def render_explanation(result: Result, max_gaps: int) -> str:
    """``pipesim explain``: the whole critical path, idle time per cause, and the gaps."""
    report, explanation = result.report, result.explanation
    lines = [
        f"pipesim explain - {report.scenario} ({report.schedule}): "
        f"makespan {format_ms(report.makespan_ms)} ms",
        "",
    ]
    lines += path_lines(explanation, report.makespan_ms, None)
    lines += ["", "idle gaps:"]
    shown: dict[int, int] = {}
    for gap in explanation.gaps:
        shown[gap.device] = shown.get(gap.device, 0) + 1
        if shown[gap.device] <= max_gaps:
            lines.append(f"  {describe_gap(gap)}")
    hidden = sum(max(0, n - max_gaps) for n in shown.values())
    if hidden:
        lines.append(f"  ... {hidden} more (raise --max-gaps, or use --format json)")
    return "\n".join(lines) + "\n"


def path_lines(explanation: Explanation, makespan_ms: float, limit: int | None) -> list[str]:
    """The critical path (at most ``limit`` steps), then idle time per device and cause."""
    path = explanation.critical_path
    lines = [
        f"critical path ({len(path)} steps, 0 to {format_ms(makespan_ms)} ms):",
        f"  {'start ms':>10} {'end ms':>10}  device  action",
    ]
    shown = path if limit is None or len(path) <= limit else path[:limit]
    lines += [
        f"  {format_ms(e['start_ms']):>10} {format_ms(e['end_ms']):>10}  {e['device']:>6}  {e['name']}"
        + _exposed(e)
        for e in shown
    ]
    if len(shown) < len(path):
        lines.append(
            f"  ... {len(path) - len(shown)} more steps (pipesim explain, or --format json)"
        )
    lines += ["", "idle time per device and cause (ms):"]
    for device, causes in sorted(explanation.idle_by_cause().items()):
        parts = ", ".join(f"{cause} {format_ms(idle_ms)}" for cause, idle_ms in causes.items())
        lines.append(f"  device {device}: {parts}")
    return lines + _all_to_all_lines(explanation)


def _exposed(element: dict) -> str:
    """A MoE step's all-to-all wait inside one critical-path action, where it has one."""
    ms = element.get("all_to_all_ms", 0.0)
    return f"  ({CAUSE} {format_ms(ms)} ms exposed)" if ms > 0 else ""


def _all_to_all_lines(explanation: Explanation) -> list[str]:
    """A MoE step's compute waiting on all-to-alls inside its actions, per device, and the
    part of it on the critical path."""
    exposure = explanation.all_to_all
    if exposure is None:
        return []
    per_device = ", ".join(
        f"device {d} {format_ms(ms)}" for d, ms in enumerate(exposure.per_device_ms)
    )
    return [
        "",
        f"compute waiting on {CAUSE} inside actions (ms): {per_device}",
        f"  on the critical path: {format_ms(exposure.critical_path_ms)} ms",
    ]
