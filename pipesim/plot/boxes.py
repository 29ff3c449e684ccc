"""A Gantt chart drawn box by box: one row per device, one box per action or transfer.

Think of a bar chart turned on its side: device 0 on top, time to the right, a compute
box in the upper part of each row and a thin transfer box under it (and, for a MoE step,
a thinner band of its all-to-alls under that). Boxes of one kind
and chunk are drawn as one collection (thousands of boxes cost about as much as one);
a box carries its microbatch (``1``, or ``1c0`` = microbatch 1 on chunk 0 when devices hold
several chunks) only where the label fits inside it at the saved size. Device rows are
named on the left, every k-th one where rows are too thin for a name each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipesim.plot.style import (
    ALL_TO_ALL,
    CHUNK_HATCHES,
    COLOURS,
    CRITICAL,
    FONT,
    LABEL_FONT,
    SAVE_DPI,
    TITLE_FONT,
    set_hatch,
    text_colour,
)
from pipesim.sim.sublayer_rows import SublayerRows
from pipesim.sim.sublayers import Stream
from pipesim.sim.trace import KIND_CODES, Lane, Trace

COMPUTE_BOX = (-0.4, 0.6)  # (offset from the row's centre, height), in rows
COMM_BOX = (0.22, 0.16)
ALL_TO_ALL_BOX = (0.40, 0.12)  # a MoE step's all-to-all stream, under the transfers
MAX_LABELS = 2500  # past this, text costs more than it tells
LABELLED_SHARE = 0.9  # a kind is numbered only if this share of its boxes hold their label
CHAR_EMS = {".": 0.32, "/": 0.34, "c": 0.55}  # DejaVu Sans; digits are 0.64 em
TICK_LINE = 1.3  # a tick label's height, in font sizes, with room between neighbours


@dataclass(frozen=True, slots=True)
class Scale:
    """Pixels per millisecond and per device row of an axes, at ``SAVE_DPI``."""

    x_px_per_ms: float
    row_px: float


def axes_scale(ax) -> Scale:
    """The axes' size in pixels where it stands now (before a layout, its default place),
    over its current time and row limits."""
    box = ax.get_position()
    width_in, height_in = ax.figure.get_size_inches()
    left, right = ax.get_xlim()
    bottom, top = ax.get_ylim()
    return Scale(
        x_px_per_ms=box.width * width_in * SAVE_DPI / max(abs(right - left), 1e-9),
        row_px=box.height * height_in * SAVE_DPI / max(abs(top - bottom), 1e-9),
    )


def chunk_count(trace: Trace) -> int:
    """How many model chunks a device holds (1 for plain schedules)."""
    return int(trace.chunk.max()) + 1 if len(trace.chunk) else 1


def box_vertices(start, end, bottom, height) -> np.ndarray:
    """(n, 4, 2) corners of n boxes, for a PolyCollection."""
    top = bottom + height
    return np.stack(
        [np.column_stack(c) for c in ((start, bottom), (start, top), (end, top), (end, bottom))],
        axis=1,
    )


def draw_boxes(ax, trace: Trace, show_comm: bool = True) -> None:
    """One PolyCollection per (lane, kind, chunk): colour by kind, hatch by chunk."""
    from matplotlib.collections import PolyCollection

    scale = axes_scale(ax)
    hatched = chunk_count(trace) > 1
    lanes = (Lane.COMPUTE, Lane.COMM) if show_comm else (Lane.COMPUTE,)
    groups = np.column_stack([trace.lane, trace.kind, trace.chunk])
    for lane, kind, chunk in np.unique(groups, axis=0):
        if lane not in lanes:
            continue
        rows = np.flatnonzero((groups == (lane, kind, chunk)).all(axis=1))
        offset, height = COMPUTE_BOX if lane == Lane.COMPUTE else COMM_BOX
        start, end = trace.start[rows], trace.end[rows]
        verts = box_vertices(start, end, trace.device[rows] + offset, np.full(len(rows), height))
        # White gaps between boxes only where boxes are wide enough to keep their colour.
        wide = np.median(end - start) * scale.x_px_per_ms >= 4
        boxes = PolyCollection(
            verts,
            facecolors=COLOURS[KIND_CODES[kind]],
            edgecolors="white",
            linewidths=0.4 if wide else 0.0,
            closed=True,
        )
        if hatched and lane == Lane.COMPUTE and chunk > 0:
            set_hatch(boxes, CHUNK_HATCHES[chunk % len(CHUNK_HATCHES)])
        ax.add_collection(boxes, autolim=False)


def draw_all_to_all(ax, sublayers: SublayerRows) -> None:
    """A MoE step's dispatch and combine all-to-alls (``pipesim.sim.sublayer_rows``) as a
    thin band of their own under each device's transfers: the device's all-to-all stream."""
    from matplotlib.collections import PolyCollection

    comm = np.flatnonzero(sublayers.stream == Stream.COMM)
    offset, height = ALL_TO_ALL_BOX
    where = sublayers.device[comm] + offset
    verts = box_vertices(
        sublayers.start[comm], sublayers.end[comm], where, np.full(len(comm), height)
    )
    ax.add_collection(PolyCollection(verts, facecolors=ALL_TO_ALL, linewidths=0.0), autolim=False)


def box_label(trace: Trace, row: int, chunk_of_stage: np.ndarray, hatched: bool) -> str:
    """``7`` (microbatch), ``7c1`` (microbatch 7 on chunk 1), ``7c1/3c0`` (an overlapped
    pair): never ``7.1``, which reads as a decimal."""
    atoms = trace.actions[row].atoms if trace.actions[row].sub_actions else [trace.actions[row]]
    if not hatched:
        return "/".join(str(a.microbatch) for a in atoms)
    return "/".join(f"{a.microbatch}c{chunk_of_stage[a.stage]}" for a in atoms)


def text_width_px(text: str, font_pt: float) -> float:
    """Width of ``text`` in DejaVu Sans at ``font_pt``, in pixels at ``SAVE_DPI``."""
    ems = sum(CHAR_EMS.get(c, 0.64) for c in text)
    return ems * font_pt * SAVE_DPI / 72


def label_font(text: str, box_px: float) -> float | None:
    """The largest label size that fits ``text`` in a box ``box_px`` wide, or None."""
    for font in (LABEL_FONT, LABEL_FONT - 1):
        if text_width_px(text, font) + 3 <= box_px:
            return font
    return None


def fitting_labels(trace: Trace, width_px: np.ndarray) -> list[tuple[int, str, float]]:
    """``(row, text, font)`` of each compute box whose label fits it, kind by kind: a kind
    whose labels fit fewer than ``LABELLED_SHARE`` of its boxes gets none (a chart
    numbered in patches reads worse than one not numbered)."""
    hatched = chunk_count(trace) > 1
    compute = trace.lane == Lane.COMPUTE
    narrowest = text_width_px("0c0" if hatched else "0", LABEL_FONT - 1) + 3
    rows = np.flatnonzero(compute & (width_px >= narrowest))
    if len(rows) > MAX_LABELS:
        return []
    chunk_of_stage = np.full(int(trace.stage.max(initial=0)) + 2, -1)
    chunk_of_stage[trace.stage[trace.stage >= 0]] = trace.chunk[trace.stage >= 0]
    fits = []
    for row in rows.tolist():
        text = box_label(trace, row, chunk_of_stage, hatched)
        font = label_font(text, width_px[row])
        if font is not None:
            fits.append((row, text, font))
    boxes = np.bincount(trace.kind[compute], minlength=len(KIND_CODES))
    labelled = np.bincount([trace.kind[r] for r, _, _ in fits], minlength=len(KIND_CODES))
    keep = labelled >= LABELLED_SHARE * boxes
    return [(r, text, font) for r, text, font in fits if keep[trace.kind[r]]]


def draw_labels(ax, trace: Trace) -> int:
    """Write the compute boxes' labels where they fit; returns how many were written."""
    from matplotlib import patheffects

    scale = axes_scale(ax)
    if COMPUTE_BOX[1] * scale.row_px < 1.1 * (LABEL_FONT - 1) * SAVE_DPI / 72:
        return 0
    hatched = chunk_count(trace) > 1
    labels = fitting_labels(trace, (trace.end - trace.start) * scale.x_px_per_ms)
    for row, text, font in labels:
        colour = COLOURS[KIND_CODES[trace.kind[row]]]
        # a halo in the box's own colour keeps the number readable over a chunk's hatch
        halo = [patheffects.withStroke(linewidth=3, foreground=colour)] if hatched else None
        ax.text(
            (trace.start[row] + trace.end[row]) / 2,
            trace.device[row] - 0.1,
            text,
            ha="center",
            va="center",
            fontsize=font,
            color=text_colour(colour),
            path_effects=halo,
        )
    return len(labels)


def device_step(ax, devices: int) -> int:
    """Name every k-th device row, k a power of two, so that tick labels never touch: a
    label (``FONT``, as every Gantt axes has its ticks) takes ``TICK_LINE`` times its font
    size in height."""
    needed = TICK_LINE * FONT * SAVE_DPI / 72 / max(axes_scale(ax).row_px, 1e-9)
    step = 1
    while step < needed and step < devices:
        step *= 2
    return step


def fit_device_ticks(ax, devices: int, name: str = "device {}") -> None:
    """One tick per k-th device (``device_step``) at the axes' present size: called
    again once a figure is laid out, since a stacked chart's rows shrink then."""
    step = device_step(ax, devices)
    ax.set_yticks(range(0, devices, step))
    ax.set_yticklabels([name.format(d) for d in range(0, devices, step)])


def device_axis(ax, trace: Trace, title: str) -> None:
    """Rows top to bottom, devices named as often as they fit, time from 0 to the
    makespan."""
    ax.set_ylim(trace.devices - 0.5, -0.6)
    fit_device_ticks(ax, trace.devices)
    ax.set_xlim(0, max(trace.makespan_ms, 1e-9))
    ax.set_xlabel("time (ms)")
    if title:
        ax.set_title(title, fontsize=TITLE_FONT)


def draw_gantt_boxes(
    ax, trace: Trace, title: str = "", show_comm: bool = True, labels: bool = True
) -> None:
    """The whole box-by-box chart on ``ax``: axis, boxes, and (``labels``) the numbers in
    them, measured on the axes as they are now (a figure that lays itself out later
    labels afterwards, with ``draw_labels``)."""
    device_axis(ax, trace, title)
    draw_boxes(ax, trace, show_comm)
    if labels:
        draw_labels(ax, trace)


def _field(element, name: str):
    return element[name] if isinstance(element, dict) else getattr(element, name)


def draw_critical_path(ax, path) -> None:
    """Outline each element of the critical path and join them in time order.

    ``path`` holds elements with ``name``, ``device``, ``start_ms`` and ``end_ms`` (dicts or
    objects); a transfer (``->`` in its name) is outlined in its device's transfer lane.
    """
    from matplotlib.collections import LineCollection, PolyCollection

    if not path:
        return
    device = np.array([_field(e, "device") for e in path], dtype=float)
    start = np.array([_field(e, "start_ms") for e in path], dtype=float)
    end = np.array([_field(e, "end_ms") for e in path], dtype=float)
    transfer = np.array(["->" in str(_field(e, "name")) for e in path])
    offset = np.where(transfer, COMM_BOX[0], COMPUTE_BOX[0])
    height = np.where(transfer, COMM_BOX[1], COMPUTE_BOX[1])
    verts = box_vertices(start, end, device + offset, height)
    ax.add_collection(
        PolyCollection(verts, facecolors="none", edgecolors=CRITICAL, linewidths=1.6),
        autolim=False,
    )
    middle = device + offset + height / 2
    hops = np.stack(
        [np.column_stack([end[:-1], middle[:-1]]), np.column_stack([start[1:], middle[1:]])], axis=1
    )
    ax.add_collection(LineCollection(hops, colors=CRITICAL, linewidths=0.9), autolim=False)
