"""The step x rank grid: how schedules draw themselves in error messages.

Step t of rank d is the t-th entry of device d's list, as torch's
``_format_pipeline_order`` prints it; a marked cell points at what is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence


def format_grid(
    schedule: object | Sequence[Sequence[object]],
    marks: dict[tuple[int, int], str] | None = None,
) -> str:
    """The step x rank grid (torch's ``_format_pipeline_order``), with marked cells.

    ``schedule`` is a Schedule or its per-device lists (of anything that prints: actions,
    or a lowered program's actions and posts).

    ``marks`` maps ``(device, step)`` to a note; a marked cell is drawn ``>>2F0<<`` and the
    note is appended to its row as ``<-- ERROR HERE: ...``.
    """
    lists = getattr(schedule, "device_actions", schedule)
    marks = marks or {}
    steps = max((len(a) for a in lists), default=0)
    cells = [
        [
            (f">>{lists[d][t]}<<" if (d, t) in marks else str(lists[d][t]))
            if t < len(lists[d])
            else ""
            for d in range(len(lists))
        ]
        for t in range(steps)
    ]
    header = [f"Rank {d}" for d in range(len(lists))]
    widths = [max([len(header[d])] + [len(row[d]) for row in cells]) for d in range(len(lists))]
    step_width = len(f"Step {steps - 1:02d}") if steps else 7
    lines = [
        " " * (step_width + 1) + " ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    ]
    for t, row in enumerate(cells):
        line = (
            f"Step {t:02d}".ljust(step_width)
            + " "
            + " ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
        )
        notes = [marks[(d, t)] for d in range(len(lists)) if (d, t) in marks]
        if notes:
            line = line.rstrip() + "  <-- ERROR HERE: " + "; ".join(notes)
        lines.append(line.rstrip())
    return "\n".join(lines)
