"""The training view: one simulated step as an interactive page.

From top to bottom: the headline numbers beside their closed forms where one applies (the
values ``pipesim run`` prints, read from the same Result, never recomputed), the Gantt
chart with the critical path, memory per device over the step against the GPU's capacity,
and each device's time split into busy time and idle time by cause. The Gantt chart and
the memory panel share their time axis: zooming one zooms the other.

The idle causes are a walk over the engine's records for every gap
(``pipesim.analysis.critical``); its cost grows with the square of a device's actions, so
a large run (past ``IDLE_CAUSE_WORK``) shows busy and idle time only, unless its Result
already holds them (``pipesim run --critical-path``). The critical path itself is one walk
back from the last row and is always drawn.
"""

from __future__ import annotations

import numpy as np

from pipesim.analysis.critical import (
    BUSY_LINK,
    COLLECTIVE,
    DONE,
    DOWNSTREAM,
    GATHER,
    IN_ORDER,
    SENDING,
    UPSTREAM,
    critical_path,
    explain,
)
from pipesim.analysis.run import Result
from pipesim.plot.html.gantt import MARGIN, chart_px, device_axis, gantt_figure
from pipesim.plot.html.headline import training_data, training_lines
from pipesim.plot.html.memory import memory_figure
from pipesim.plot.html.page import Page
from pipesim.plot.html.tables import headline_table
from pipesim.plot.memory import runtime_for
from pipesim.sim.trace import Lane

# sum over devices of (compute actions on it)^2 past which idle causes are left out (the
# walk takes seconds there; minutes at 10^5 actions)
IDLE_CAUSE_WORK = 150_000
CAUSE_COLOURS = {
    UPSTREAM: "#AEC7E8",
    DOWNSTREAM: "#98DF8A",
    BUSY_LINK: "#FF9896",
    IN_ORDER: "#FFBB78",
    SENDING: "#C5B0D5",
    GATHER: "#9EDAE5",
    COLLECTIVE: "#C49C94",
    DONE: "#D9D9D9",
}
BUSY = "#1F77B4"


def training_report(result: Result) -> str:
    """The whole page of one training (or forward-only, or decode) step."""
    report = result.report
    page = Page(f"pipesim - {report.scenario}")
    page.heading(f"pipesim - {report.scenario}", 1)
    page.paragraph(
        f"{report.schedule} on {report.devices} devices ({report.stages} stages), "
        f"{report.microbatches} microbatches of {report.microbatch_size}; "
        f"evaluator {report.evaluator}"
    )
    add_training(page, result, "pipesim")
    page.data({"view": "training", **training_data(result)})
    return page.render()


def add_training(page: Page, result: Result, prefix: str) -> None:
    """The headline table, Gantt chart, memory panel and idle breakdown of ``result``, with
    element ids starting ``prefix``."""
    report, trace = result.report, result.trace
    page.raw(headline_table(training_lines(result)))
    path, idle = explanation_of(result)
    page.heading("timeline")
    page.paragraph(
        "Drag to zoom, double-click to see it all; hover over a box for what ran and what "
        "released it. Each device row: compute above, transfers in the thin lane below; "
        "the label in a box is its microbatch (3c1: microbatch 3 on chunk 1). The red line "
        "is the critical path (the button hides it)."
    )
    figure, table = gantt_figure(trace, report.schedule, path, f"{prefix}-rows")
    page.table_data(table)
    page.figure(f"{prefix}-gantt", figure, link=f"{prefix}-time")
    accounting = result.scenario.accounting
    capacity = accounting.memory_capacity_bytes if accounting is not None else 0.0
    memory = memory_figure(trace, report, result.memory, capacity, runtime_for(accounting))
    if memory is not None:
        page.heading("memory")
        page.figure(f"{prefix}-memory", memory, link=f"{prefix}-time")
    page.heading("where the time goes")
    if idle is None:
        page.paragraph(
            "Idle time by cause is left out for a run this large (the walk over every gap "
            "takes minutes); pipesim run SCENARIO --critical-path --html FILE adds it."
        )
    page.figure(f"{prefix}-bubbles", bubble_figure(result, idle))


def explanation_of(
    result: Result, idle_causes: bool = True
) -> tuple[list[dict], dict[int, dict[str, float]] | None]:
    """The critical path and each device's idle time by cause (None: not asked for, or
    left out, see the module), from the Result where it holds them."""
    if result.explanation is not None:
        return list(result.explanation.critical_path), result.explanation.idle_by_cause()
    trace, scenario = result.trace, result.scenario
    if trace.cause is None:
        return [], None
    compute = np.bincount(trace.device[trace.lane == Lane.COMPUTE], minlength=trace.devices)
    if not idle_causes or int(np.sum(compute.astype(np.int64) ** 2)) > IDLE_CAUSE_WORK:
        return critical_path(trace), None
    explanation = explain(trace, scenario.schedule, scenario.topology)
    return list(explanation.critical_path), explanation.idle_by_cause()


def bubble_figure(result: Result, idle: dict[int, dict[str, float]] | None):
    """Per device, busy time then idle time by cause (or all idle time, where ``idle`` is
    None), in ms, stacked so each bar is the makespan long."""
    import plotly.graph_objects as go

    report = result.report
    devices = [d.device for d in report.per_device]
    traces = [_bar("busy (computing)", [d.busy_ms for d in report.per_device], devices, BUSY)]
    if idle is None:
        traces.append(_bar("idle", [d.idle_ms for d in report.per_device], devices, "#D9D9D9"))
    else:
        for cause, colour in CAUSE_COLOURS.items():
            values = [idle.get(d, {}).get(cause, 0.0) for d in devices]
            if any(values):
                traces.append(_bar(f"idle: {cause}", values, devices, colour))
    figure = go.Figure(traces)
    figure.update_layout(
        title={"text": "busy and idle time per device", "x": 0, "font": {"size": 14}},
        template="plotly_white",
        barmode="stack",
        bargap=0.15,
        height=chart_px(len(devices), len(traces)) + MARGIN["t"] + MARGIN["b"],
        margin=MARGIN,
        xaxis={"title": {"text": "time (ms)"}, "range": [0, max(report.makespan_ms, 1e-9)]},
        yaxis=device_axis(len(devices)),
    )
    return figure


def _bar(name: str, values: list[float], devices: list[int], colour: str):
    import plotly.graph_objects as go

    return go.Bar(
        x=values,
        y=devices,
        orientation="h",
        name=name,
        marker={"color": colour, "line": {"width": 0}},
        hovertemplate=f"device %{{y}}: {name} %{{x:.3f}} ms<extra></extra>",
    )
