"""A Gantt chart for many devices: how busy each device is, and with what, over time.

Past ``MAX_BOX_DEVICES`` rows a box per action is thinner than a pixel, so the chart
becomes a strip of small bars: time cut into ``TIME_BINS`` bins, and each cell (a device,
or a group of neighbouring devices, in one bin) a bar that fills its bin from the left
with the share spent on each kind, in that kind's own colour, the rest white (idle). A
fully busy forward bin is all forward blue; a bin one third forward and two thirds
backward is a third blue, then green. Colours are never mixed, so every colour on the
chart is one of the legend's, and the pipeline's fill and drain show as white triangles.
"""

from __future__ import annotations

import math

import numpy as np

from pipesim.plot.boxes import fit_device_ticks
from pipesim.plot.style import COLOURS, TITLE_FONT
from pipesim.sim.trace import KIND_CODES, Lane, Trace

TIME_BINS = 150
BAR_COLUMNS = 8  # image columns per bin: a kind's share is drawn to the nearest eighth
MAX_STRIP_ROWS = 512


def device_groups(devices: int) -> int:
    """Devices per image row: 1 until there are more devices than ``MAX_STRIP_ROWS``."""
    return max(1, math.ceil(devices / MAX_STRIP_ROWS))


def busy_fractions(trace: Trace, bins: int = TIME_BINS, group: int = 1) -> np.ndarray:
    """(rows, kinds, bins): the share of each time bin each group of ``group`` devices
    spent computing each kind (0 to 1).

    The busy time up to a bin edge ``e`` is ``sum(e - start) - sum(e - end)`` over the
    starts and ends before ``e``, so per-bin sums of starts and ends (one ``bincount``
    each) give every bin at once, however many actions there are.
    """
    compute = trace.lane == Lane.COMPUTE
    rows = math.ceil(trace.devices / group)
    kinds = len(KIND_CODES)
    width = max(trace.makespan_ms, 1e-9) / bins
    right_edges = np.arange(1, bins + 1) * width
    cell = (trace.device[compute] // group * kinds + trace.kind[compute]) * bins

    def elapsed_since(times: np.ndarray) -> np.ndarray:
        index = cell + np.minimum((times / width).astype(np.int64), bins - 1)
        size = rows * kinds * bins
        count = np.bincount(index, minlength=size).reshape(rows, kinds, bins)
        total = np.bincount(index, weights=times, minlength=size).reshape(rows, kinds, bins)
        return right_edges * np.cumsum(count, axis=2) - np.cumsum(total, axis=2)

    busy_until = elapsed_since(trace.start[compute]) - elapsed_since(trace.end[compute])
    busy = np.diff(busy_until, axis=2, prepend=0.0)
    members = np.minimum(group, trace.devices - np.arange(rows) * group)
    return np.clip(busy / (width * members[:, None, None]), 0.0, 1.0)


def kind_bars(fractions: np.ndarray, columns: int = BAR_COLUMNS) -> np.ndarray:
    """(rows, bins * columns, 3) RGB: each bin's ``columns`` image columns split among the
    kinds in proportion to their shares (in the IR's kind order), white for the idle rest;
    a column takes the kind under its middle, so each is one kind's colour or white."""
    rgb = np.array([[int(COLOURS[k][i : i + 2], 16) / 255 for i in (1, 3, 5)] for k in KIND_CODES])
    palette = np.vstack([rgb, np.ones(3)])  # the last entry: idle, white
    upto = np.cumsum(fractions, axis=1)  # (rows, kinds, bins): where each kind's part ends
    middles = (np.arange(columns) + 0.5) / columns
    # the first kind whose part ends past a column's middle; past every kind: idle
    kind = (upto[:, :, :, None] <= middles).sum(axis=1)  # (rows, bins, columns)
    return palette[kind.reshape(len(fractions), -1)]


def draw_busy_strip(ax, trace: Trace, title: str = "") -> str:
    """The strip on ``ax``; returns the sentence that says how rows were aggregated and
    what a cell shows (it is the title's second line)."""
    group = device_groups(trace.devices)
    image = kind_bars(busy_fractions(trace, TIME_BINS, group))
    makespan = max(trace.makespan_ms, 1e-9)
    ax.imshow(
        image,
        extent=(0, makespan, trace.devices - 0.5, -0.5),
        aspect="auto",
        interpolation="nearest",
        origin="upper",
    )
    ax.set_xlim(0, makespan)
    ax.set_ylim(trace.devices - 0.5, -0.5)
    fit_device_ticks(ax, trace.devices, "{}")
    ax.set_ylabel("device")
    ax.set_xlabel("time (ms)")
    per_row = f", groups of {group} devices per row" if group > 1 else ""
    note = (
        f"{trace.devices} devices in {TIME_BINS} time bins{per_row}: each cell a bar of "
        "the busy share of each kind in its colour, white: idle"
    )
    if title:
        ax.set_title(f"{title}\n{note}", fontsize=TITLE_FONT)
    return note
