"""How a decode pipeline's Gantt chart reads: prefill and decode steps told apart, each box
named by its token step and group (``t3 g1``).

A decode schedule holds one virtual stage per token step on every device, so the chunk
hatches of training charts (one per chunk) would cycle through hundreds of steps. Here the
prefill (step 0) is drawn plain and every later step hatched, and the step and group are
written in the boxes where they fit.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipesim.plot.boxes import MAX_LABELS, axes_scale, text_width_px
from pipesim.plot.style import (
    CHUNK_HATCHES,
    COLOURS,
    LABEL_FONT,
    critical_handle,
    figure_legend,
    kind_handles,
    set_hatch,
    text_colour,
)
from pipesim.schedules.decode import NAME
from pipesim.sim.decode import row_names
from pipesim.sim.metrics import Report
from pipesim.sim.trace import KIND_CODES, Lane, Trace


def is_decode(report: Report) -> bool:
    return report.schedule == NAME


def prefill_decode_view(trace: Trace) -> Trace:
    """The trace with chunk 0 for the prefill and 1 for every decode step (two hatches)."""
    return dataclasses.replace(trace, chunk=np.minimum(trace.chunk, 1))


def decode_legend(fig, kinds: set[str], critical: bool = False) -> None:
    from matplotlib.patches import Patch

    decode = Patch(facecolor="#7F7F7F", edgecolor="white", label="decode steps")
    set_hatch(decode, CHUNK_HATCHES[1])
    handles = kind_handles(kinds)
    handles += [Patch(facecolor="#7F7F7F", edgecolor="white", label="prefill (step 0)"), decode]
    if critical:
        handles.append(critical_handle())
    figure_legend(fig, handles, "box labels: t = token step (t0: the prefill), g = group")


SMALLEST_FONT = 5


def _fitting(name: str, box_px: float) -> tuple[str, float] | None:
    """``(text, font)``: ``t3 g1`` in the largest font that fits, else ``t3g1``."""
    for text in (name, name.replace(" ", "")):
        for font in (LABEL_FONT, LABEL_FONT - 1, SMALLEST_FONT):
            if text_width_px(text, font) + 3 <= box_px:
                return text, font
    return None


def draw_decode_labels(ax, trace: Trace) -> int:
    """Write ``t<step> g<group>`` in the compute boxes where it fits; returns how many."""
    from matplotlib import patheffects

    scale = axes_scale(ax)
    width_px = (trace.end - trace.start) * scale.x_px_per_ms
    narrowest = text_width_px("t0g0", SMALLEST_FONT) + 3
    rows = np.flatnonzero((trace.lane == Lane.COMPUTE) & (width_px >= narrowest))
    if len(rows) > MAX_LABELS:
        return 0
    names = row_names(trace)
    written = 0
    for row in rows.tolist():
        fitting = _fitting(names[row], width_px[row])
        if fitting is None:
            continue
        text, font = fitting
        colour = COLOURS[KIND_CODES[trace.kind[row]]]
        # a halo in the box's colour keeps the text readable over the decode hatch
        ax.text(
            (trace.start[row] + trace.end[row]) / 2,
            trace.device[row] - 0.1,
            text,
            ha="center",
            va="center",
            fontsize=font,
            color=text_colour(colour),
            path_effects=[patheffects.withStroke(linewidth=3, foreground=colour)],
        )
        written += 1
    return written
