"""Gantt figures: one run (with its memory panel), several runs stacked, or a measured run
above its simulation.

Each figure puts one Gantt axes per run on a shared time axis, every axes with its own
time tick numbers, and one legend under them all: the kinds' colours, the chunks'
hatches, the critical path, and what the labels in the boxes mean (``3c1``: microbatch 3
on chunk 1). Up to ``MAX_BOX_DEVICES`` devices a run is drawn box by box; past that, as a
strip of per-device bars of busy shares, and the title says so. The figure's height is
capped whatever the device count; device rows are named as often as their height lets
the names stand apart, in each axes once the figure is laid out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipesim.plot.boxes import (
    chunk_count,
    draw_all_to_all,
    draw_critical_path,
    draw_gantt_boxes,
    draw_labels,
    fit_device_ticks,
)
from pipesim.plot.busy import draw_busy_strip
from pipesim.plot.decode import (
    decode_legend,
    draw_decode_labels,
    is_decode,
    prefill_decode_view,
)
from pipesim.plot.memory import Runtime, draw_memory, has_memory
from pipesim.plot.style import (
    MAX_BOX_DEVICES,
    all_to_all_handle,
    chunk_handles,
    critical_handle,
    figure_legend,
    gantt_height_in,
    kind_handles,
    new_figure,
)
from pipesim.plot.style import title as report_title
from pipesim.sim.memory import MemoryTimeline
from pipesim.sim.metrics import Report
from pipesim.sim.sublayer_rows import SublayerRows
from pipesim.sim.trace import KIND_CODES, Lane, Trace

MEMORY_IN = 2.4  # the memory panel's height
DECORATION_IN = 1.5  # title, time axis and legend around the axes


def draw_gantt(
    ax, trace: Trace, title: str = "", show_comm: bool = True, labels: bool = True
) -> None:
    """One run on ``ax``: a box per action up to ``MAX_BOX_DEVICES`` devices, else the
    busy-fraction strip; ``labels=False`` leaves the numbers in the boxes to
    ``label_after_layout``."""
    if trace.devices > MAX_BOX_DEVICES:
        draw_busy_strip(ax, trace, title)
    else:
        draw_gantt_boxes(ax, trace, title, show_comm, labels)


def label_after_layout(fig, charts: Sequence[tuple[object, Trace]], draw_text=draw_labels) -> None:
    """Name the time axis once, under the lowest axes (every axes keeps its tick numbers),
    then, once the figure is laid out, name as many device rows as fit each axes' final
    height and number the boxes, so a label is kept where it fits its box (labels sit
    inside the axes: they do not move the layout)."""
    for ax in fig.axes[:-1]:
        ax.set_xlabel("")
    engine = fig.get_layout_engine()
    if engine is not None:
        engine.execute(fig)
    for ax, trace in charts:
        boxed = trace.devices <= MAX_BOX_DEVICES
        fit_device_ticks(ax, trace.devices, "device {}" if boxed else "{}")
        if boxed:
            draw_text(ax, trace)


def kinds_shown(trace: Trace, show_comm: bool = True) -> set[str]:
    """Kinds whose colour appears on the chart (compute only on a busy-fraction strip)."""
    lanes = (
        [Lane.COMPUTE]
        if trace.devices > MAX_BOX_DEVICES or not show_comm
        else [Lane.COMPUTE, Lane.COMM]
    )
    return {KIND_CODES[k] for k in np.unique(trace.kind[np.isin(trace.lane, lanes)])}


def legend(
    fig, traces: Sequence[Trace], kinds: set[str], critical: bool = False, moe: bool = False
) -> None:
    """The figure legend: kinds, a MoE step's all-to-alls (``moe``), chunk hatches (where
    a device holds several chunks), the critical path; its title says what the numbers in
    the boxes are."""
    boxed = [t for t in traces if t.devices <= MAX_BOX_DEVICES]
    chunks = max((chunk_count(t) for t in boxed), default=1)
    handles = kind_handles(kinds) + ([all_to_all_handle()] if moe else [])
    if chunks > 1:
        handles += chunk_handles(chunks)
    if critical:
        handles.append(critical_handle())
    notes = []
    if boxed:
        notes.append(
            "box labels: microbatch, c = chunk (3c1 = microbatch 3 on chunk 1)"
            if chunks > 1
            else "box labels: microbatch"
        )
    if len(boxed) < len(traces):
        notes.append("bars: each kind's share of a time bin in its colour, white: idle")
    figure_legend(fig, handles, "; ".join(notes))


def gantt_figure(
    trace: Trace,
    report: Report,
    memory: Sequence[MemoryTimeline] = (),
    critical_path=None,
    *,
    capacity_bytes: float = 0.0,
    runtime: Runtime | None = None,
    sublayers: SublayerRows | None = None,
):
    """The Gantt chart of one run, with the memory panel under it when ``memory``
    timelines are given and anything is held (static memory from ``report``, activations
    from the timelines); ``sublayers``: a MoE step's parts, whose all-to-alls get a band
    of their own in each device's row (where devices are drawn box by box).

    ``critical_path`` (elements with ``name``, ``device``, ``start_ms``, ``end_ms``, as
    ``pipesim.analysis.critical`` gives them) is outlined in red; ``capacity_bytes`` (one
    GPU's memory, 0: unknown) is drawn as a dashed line on the memory panel; ``runtime``
    adds what each process holds besides its tensors and draws the usable line.
    """
    static = [d.static_memory_bytes for d in report.per_device]
    with_memory = has_memory(memory, static)
    chart_in = gantt_height_in(trace.devices)
    ratios = [chart_in, MEMORY_IN] if with_memory else None
    height = chart_in + DECORATION_IN + (MEMORY_IN + 0.3 if with_memory else 0.0)
    fig, axes = new_figure(height, 2 if with_memory else 1, ratios)
    decode = is_decode(report)  # prefill and decode steps, not hundreds of chunks
    draw_gantt(
        axes[0], prefill_decode_view(trace) if decode else trace, report_title(report), labels=False
    )
    if critical_path:
        draw_critical_path(axes[0], critical_path)
    all_to_all = sublayers is not None and len(sublayers) and trace.devices <= MAX_BOX_DEVICES
    if all_to_all:
        draw_all_to_all(axes[0], sublayers)
    if with_memory:
        draw_memory(axes[1], trace, memory, static, capacity_bytes, runtime)
    if decode:
        decode_legend(fig, kinds_shown(trace), critical=bool(critical_path))
        label_after_layout(fig, [(axes[0], trace)], draw_decode_labels)
        return fig
    legend(fig, [trace], kinds_shown(trace), critical=bool(critical_path), moe=bool(all_to_all))
    label_after_layout(fig, [(axes[0], trace)])
    return fig


def stacked_gantt_figure(results: Sequence[tuple[Trace, Report]]):
    """Several Gantt charts stacked with one shared time axis (``pipesim compare``)."""
    heights = [gantt_height_in(t.devices) + 0.5 for t, _ in results]
    fig, axes = new_figure(sum(heights) + DECORATION_IN, len(results), heights)
    kinds: set[str] = set()
    for (trace, report), ax in zip(results, axes, strict=True):
        draw_gantt(ax, trace, report_title(report), labels=False)
        kinds |= kinds_shown(trace)
    longest = max(max(t.makespan_ms for t, _ in results), 1e-9)
    for ax in axes:
        ax.set_xlim(0, longest)
    legend(fig, [t for t, _ in results], kinds)
    label_after_layout(fig, [(ax, t) for ax, (t, _) in zip(axes, results, strict=True)])
    return fig


def crosscheck_figure(measured: Trace, simulated: Trace, title: str):
    """Two Gantt charts, measured above simulated, on one time axis (the measured run
    has no transfer rows worth drawing: its sends are inside the compute times)."""
    height = gantt_height_in(max(measured.devices, simulated.devices)) + 0.5
    fig, axes = new_figure(2 * height + DECORATION_IN, 2)
    draw_gantt(axes[0], measured, f"{title}: measured", show_comm=False, labels=False)
    draw_gantt(axes[1], simulated, f"{title}: simulated", show_comm=True, labels=False)
    longest = max(measured.makespan_ms, simulated.makespan_ms, 1e-9)
    for ax in axes:
        ax.set_xlim(0, longest)
    kinds = kinds_shown(measured, show_comm=False) | kinds_shown(simulated)
    legend(fig, [measured, simulated], kinds)
    label_after_layout(fig, [(axes[0], measured), (axes[1], simulated)])
    return fig
