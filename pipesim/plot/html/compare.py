"""The compare view: several schedules of one scenario, side by side.

A table of the schedules (a click on a header sorts it by that column; the numbers are
those of ``pipesim compare --format json``), then every schedule's Gantt chart stacked on
one time axis: zoom into one and all follow, so the same instant can be read across
schedules. Each chart has its critical path; one button shows or hides them all, and a
click on a legend entry hides that kind in every chart.
"""

from __future__ import annotations

from pipesim.analysis.compare import CompareRow, Comparison
from pipesim.plot.html.gantt import (
    MARGIN,
    chart_px,
    critical_button,
    device_axis,
    gantt_table,
    gantt_traces,
)
from pipesim.plot.html.headline import format_bytes, without_timing
from pipesim.plot.html.page import Page
from pipesim.plot.html.tables import Cell, cell, html_table
from pipesim.plot.html.training import explanation_of

GAP_PX = 70  # between two stacked charts: the next one's title


def compare_report(comparison: Comparison) -> str:
    """The whole page of a comparison (rows that did not run are in the table only)."""
    ran = [row for row in comparison.rows if row.result is not None]
    name = ran[0].result.report.scenario if ran else "comparison"
    page = Page(f"pipesim compare - {name}")
    page.heading(f"pipesim compare - {name}", 1)
    page.paragraph(
        f"{len(comparison.rows)} schedules; click a column's header to sort by it. "
        + ("Ranked by p50 makespan, then p99, over random steps." if comparison.ranked else "")
    )
    page.raw(compare_table(comparison))
    if ran:
        page.heading("timelines on one time axis")
        page.paragraph(
            "Drag to zoom (every chart follows), double-click to see it all; hover over a box "
            "for what ran and what released it. The red lines are the critical paths."
        )
        figure, tables = stacked_figure(ran)
        for table in tables:
            page.table_data(table)
        page.figure("compare-gantt", figure)
    page.data({"view": "compare", "rows": [without_timing(r) for r in comparison.to_dicts()]})
    return page.render()


HEADER = (
    "schedule",
    "makespan ms",
    "bubble fraction",
    "span bubble rate",
    "samples/s",
    "peak memory",
    "peak activations",
    "OOM",
    "note",
)


def compare_table(comparison: Comparison) -> str:
    ranked = comparison.ranked
    study = ["p50 ms", "p99 ms"] if ranked else []
    header = (["rank"] if ranked else []) + [*HEADER[:2], *study, *HEADER[2:]]
    rows = [_row(row, ranked) for row in comparison.rows]
    return html_table(header, rows, table_id="compare-table", sortable=True)


def _row(row: CompareRow, ranked: bool) -> list[Cell]:
    rank = [cell(row.rank, "{}")] if ranked else []
    if row.result is None:
        blank = [Cell("-", "")] * (len(HEADER) - 2 + (2 if ranked else 0))
        return [*rank, Cell(row.schedule, css="text"), *blank, Cell(row.error, css="text")]
    report, summary = row.result.report, row.result.monte_carlo
    study = []
    if ranked:
        study = [
            cell(summary.makespan_ms.p50 if summary else None),
            cell(summary.makespan_ms.p99 if summary else None),
        ]
    memory = max(d.peak_memory_bytes for d in report.per_device)
    activations = max(d.peak_activation_bytes for d in report.per_device)
    return [
        *rank,
        Cell(report.schedule, css="text"),
        cell(report.makespan_ms),
        *study,
        cell(report.bubble_fraction, "{:.4f}"),
        cell(report.span_bubble_rate, "{:.4f}"),
        cell(report.samples_per_second, "{:,.1f}"),
        Cell(format_bytes(memory), memory) if memory else Cell("-", 0.0),
        Cell(format_bytes(activations), activations),
        Cell("OOM", 1, "bad") if report.oom else Cell("fits", 0),
        Cell(row.note, css="text"),
    ]


def stacked_figure(rows: list[CompareRow]):
    """Every schedule's chart in one figure, one subplot each, sharing the time axis; and
    the row tables they are drawn from."""
    from plotly.subplots import make_subplots

    heights = [chart_px(row.result.trace.devices, 2) for row in rows]
    total = sum(heights) + GAP_PX * (len(rows) - 1)
    titles = [
        f"{row.result.report.schedule}: makespan {row.result.report.makespan_ms:.3f} ms"
        for row in rows
    ]
    figure = make_subplots(
        rows=len(rows),
        cols=1,
        shared_xaxes=True,
        row_heights=heights,
        vertical_spacing=GAP_PX / total if len(rows) > 1 else 0.0,
        subplot_titles=titles,
    )
    tables, critical, named = [], [], set()
    longest = max(row.result.report.makespan_ms for row in rows)
    for number, row in enumerate(rows, 1):
        result = row.result
        axis = "y" if number == 1 else f"y{number}"
        path, _ = explanation_of(result, idle_causes=False)
        traces, index = gantt_traces(result.trace, f"compare-rows-{number}", path, axis)
        for trace in traces:
            if trace.showlegend is not False:  # one legend entry per kind, for every chart
                trace.showlegend = trace.name not in named
                named.add(trace.name)
            if index is not None and trace is traces[index]:
                critical.append(len(figure.data))
            figure.add_trace(trace, row=number, col=1)
        figure.update_yaxes(device_axis(result.trace.devices), row=number, col=1)
        tables.append(gantt_table(result.trace, f"compare-rows-{number}"))
    figure.update_xaxes(showticklabels=True, range=[0, max(longest, 1e-9)])
    figure.update_xaxes(title_text="time (ms)", row=len(rows), col=1)
    figure.update_layout(
        template="plotly_white",
        height=total + MARGIN["t"] + MARGIN["b"],
        margin=MARGIN,
        hovermode="closest",
        updatemenus=[critical_button(critical)] if critical else [],
    )
    figure.update_annotations(font_size=13)
    return figure, tables
