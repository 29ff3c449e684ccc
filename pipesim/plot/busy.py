"""A Gantt chart for many devices: how busy each device is, and with what, over time.

Past ``MAX_BOX_DEVICES`` rows a box per action is thinner than a pixel, so the chart
becomes a heat strip: time cut into bins, each cell the share of its bin a device (or a
group of neighbouring devices) spent on each kind, blended over white in the kinds'
colours. A fully busy forward bin is forward blue; a half-busy one, a paler blue; idle
time stays white, so the pipeline's fill and drain still show as white triangles.
"""

from __future__ import annotations

import math

import numpy as np

from pipesim.plot.style import COLOURS, TITLE_FONT
from pipesim.sim.trace import KIND_CODES, Lane, Trace

TIME_BINS = 600
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


def blend(fractions: np.ndarray) -> np.ndarray:
    """(rows, bins, 3) RGB: each kind's colour laid over white by its share."""
    rgb = np.array([[int(COLOURS[k][i : i + 2], 16) / 255 for i in (1, 3, 5)] for k in KIND_CODES])
    shade = np.einsum("rkb,kc->rbc", fractions, 1.0 - rgb)
    return np.clip(1.0 - shade, 0.0, 1.0)


def draw_busy_strip(ax, trace: Trace, title: str = "") -> str:
    """The heat strip on ``ax``; returns the sentence that says how rows were aggregated."""
    from matplotlib.ticker import MaxNLocator

    group = device_groups(trace.devices)
    image = blend(busy_fractions(trace, TIME_BINS, group))
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
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=12))
    ax.set_ylabel("device")
    ax.set_xlabel("time (ms)")
    per_row = f", groups of {group} devices per row" if group > 1 else ""
    note = (
        f"{trace.devices} devices: busy share per device in {TIME_BINS} time bins{per_row} "
        "(colour: kind, white: idle)"
    )
    if title:
        ax.set_title(f"{title}\n{note}", fontsize=TITLE_FONT)
    return note
