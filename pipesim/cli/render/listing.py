"""Short answers: a scenario that checks out (``validate``) and the schedule catalogue
(``schedules``)."""

from __future__ import annotations

from pipesim.schedules import Schedule


def render_validation(scenario: str, schedule: Schedule) -> str:
    """One line: the file is fine, and the schedule it builds."""
    s = schedule
    return (
        f"{scenario}: ok - {s.name}, {s.devices} devices, {s.stages} stages, "
        f"{s.microbatches} microbatches, {s.num_actions} actions\n"
    )


def render_schedules(rows: list[tuple[str, str, str]]) -> str:
    """Each ``(name, summary, constraints)`` as two lines, the names in one column."""
    width = max(len(name) for name, _, _ in rows)
    lines = []
    for name, summary, constraints in rows:
        lines.append(f"{name:<{width}}  {summary}")
        lines.append(f"{'':<{width}}  constraints: {constraints}")
    return "\n".join(lines) + "\n"
