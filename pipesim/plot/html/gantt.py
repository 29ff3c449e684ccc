"""The interactive Gantt chart: one row per device, a box per action or transfer.

Each device row has two lanes, as the static chart has: compute boxes in the upper part
and a thin transfer lane under them. A box is coloured by its kind (the static chart's
colours) and shaded lighter by its chunk; where boxes are wide enough at the first view,
the microbatch is written in them (``3c1``: microbatch 3 on chunk 1). Hovering over a box
names the action, its stage, chunk and microbatch, its start, end and duration, and what
released it (the engine's cause record, ``pipesim.sim.trace``).

Boxes are drawn with WebGL, each as one thick line segment (its ends a little inside, so
boxes side by side stay apart), the boxes of one colour in a few traces, so 10^5 boxes on
400 devices pan as smoothly as ten: the coordinates and hover texts are made in the
browser from one table of the rows (``page.RowTable``), and a box keeps its lane's height
as the chart is zoomed (``report.js``). The critical path is a red line through its
elements in time order, shown or hidden by a button.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipesim.plot.boxes import COMM_BOX, COMPUTE_BOX, box_label, chunk_count
from pipesim.plot.html.page import RowTable, typed
from pipesim.plot.style import COLOURS, CRITICAL, LEGEND_LABELS, text_colour
from pipesim.sim.trace import END_OF_STEP, KIND_CODES, Cause, Lane, RowKind, Trace

# (centre offset from the row's middle, thickness), in device rows
LANES = {
    Lane.COMPUTE: (COMPUTE_BOX[0] + COMPUTE_BOX[1] / 2, COMPUTE_BOX[1]),
    Lane.COMM: (COMM_BOX[0] + COMM_BOX[1] / 2, COMM_BOX[1]),
}
# a WebGL trace of 10^5 points or more gets a spatial index that plotly builds point by
# point, gaps included (minutes of CPU at 10^6): boxes (4 points each) are cut below it
BOXES_PER_TRACE = 24_000
INSET = 0.03  # each end of a box is drawn this share of its length inside: a gap between two
MAX_LABELS = 1000  # boxes numbered at most: past this, text costs more than it tells
FIRST_VIEW_PX = 1100  # the plot's width as the page opens, to judge where a label fits
LABEL_PX_PER_CHAR = 7
ROW_PX = (3.0, 44.0)  # a device row's height: the least, and the most
LEGEND_LINE_PX = 30  # a legend entry, with the gap to the next
CHART_PX = 880  # rows share this height until they reach the least
MARGIN = {"l": 90, "r": 30, "t": 60, "b": 50}
CAUSE_PHRASES = {
    Cause.START: "the start of the step",
    Cause.DEVICE: "its device, free after",
    Cause.SENDING: "its own transfer arriving:",
    Cause.INPUT: "its input arriving:",
    Cause.PRODUCER: "its producer ending:",
    Cause.CHANNEL: "its channel, free after",
    Cause.FLUSH: "the pipeline flush, after",
    Cause.GATHER: "its parameter gather:",
}
KIND_WORDS = {
    "F": "forward",
    "B": "backward",
    "I": "input-gradient backward",
    "W": "weight-gradient backward",
    "OVERLAP_F_B": "overlapped forward and backward",
    "SEND_F": "activation transfer",
    "SEND_B": "gradient transfer",
    **LEGEND_LABELS,
}
TIMES = "start {start:f3} ms · end {end:f3} ms · duration {_duration:f3} ms"
RELEASED = "released by {cause:lookup=causes} {cause_row:row=name}"


def row_px(devices: int) -> float:
    """A device row's height in the first view, in pixels."""
    low, high = ROW_PX
    return max(low, min(high, CHART_PX / max(devices, 1)))


def chart_px(devices: int, legend_lines: int = 0) -> int:
    """The height of a Gantt chart's plotting area for ``devices`` rows, tall enough for
    ``legend_lines`` legend entries beside it."""
    return max(int(round(row_px(devices) * devices)) + 20, LEGEND_LINE_PX * legend_lines)


def gantt_table(trace: Trace, table_id: str) -> RowTable:
    """Every row of ``trace`` for the page: names, where and when it ran, what released it
    (cause -1 where the trace records none, as a measured one)."""
    causes = trace.cause if trace.cause is not None else np.full(len(trace.start), -1)
    cause_rows = trace.cause_row if trace.cause_row is not None else np.full(len(causes), -1)
    phrases = [CAUSE_PHRASES[cause] for cause in Cause]
    return RowTable(
        table_id,
        {
            "name": trace.names(),
            "device": trace.device,
            "stage": trace.stage,
            "chunk": trace.chunk,
            "microbatch": trace.microbatch,
            "kind": trace.kind,
            "peer": trace.peer,
            "start": trace.start.astype(np.float64),
            "end": trace.end.astype(np.float64),
            "cause": np.where(causes < 0, len(phrases), causes),
            "cause_row": cause_rows,
        },
        {
            "kinds": [KIND_WORDS.get(code, code) for code in KIND_CODES],
            "causes": [*phrases, "not recorded"],
        },
    )


def shade(colour: str, chunk: int, chunks: int) -> str:
    """``colour`` for chunk 0, lighter for each later chunk (at most 55% towards white)."""
    if chunks <= 1 or chunk <= 0:
        return colour
    mix = 0.55 * chunk / (chunks - 1)
    channels = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * mix):02X}" for c in channels)


def hover_lines(kind: int) -> list[str]:
    """What a box's hover says, by its kind (a transfer names its receiver; work beside
    the schedule has no stage)."""
    if kind in (RowKind.SEND_F, RowKind.SEND_B):
        head = "<b>{name}</b>  {kind:lookup=kinds}, device {device} to {peer}"
        where = "stage {stage} · chunk {chunk} · microbatch {microbatch}"
        return [head, where, TIMES, RELEASED]
    if kind in END_OF_STEP or kind >= RowKind.UNSHARD or kind == RowKind.OVERLAP_F_B:
        return ["<b>{name}</b>  {kind:lookup=kinds}, device {device}", TIMES, RELEASED]
    head = "<b>{name}</b>  {kind:lookup=kinds}, device {device}"
    return [head, "stage {stage} · chunk {chunk} · microbatch {microbatch}", TIMES, RELEASED]


def box_traces(trace: Trace, table_id: str, axis: str = "y", legend: bool = True) -> list:
    """One WebGL trace per (lane, kind, chunk), filled from the table in the page."""
    import plotly.graph_objects as go

    chunks = chunk_count(trace)
    # compute boxes by kind and chunk; transfers, thin, by kind alone
    chunk = np.where(trace.lane == Lane.COMPUTE, np.maximum(trace.chunk, 0), 0)
    groups = np.column_stack([trace.lane, trace.kind, chunk])
    traces = []
    for lane, kind, chunk in np.unique(groups, axis=0).tolist():
        rows = np.flatnonzero((groups == (lane, kind, chunk)).all(axis=1))
        code = KIND_CODES[kind]
        name = LEGEND_LABELS.get(code, code)
        if chunks > 1 and lane == Lane.COMPUTE and kind != RowKind.OVERLAP_F_B:
            name += f" chunk {chunk}"
        colour = shade(COLOURS[code], chunk, chunks)
        for part, start in enumerate(range(0, len(rows), BOXES_PER_TRACE)):
            spec = box_spec(table_id, rows[start : start + BOXES_PER_TRACE], lane, kind)
            traces.append(
                go.Scattergl(
                    mode="lines+markers",
                    name=name,
                    legendgroup=name,
                    showlegend=legend and part == 0,
                    line={"color": colour, "width": 2},
                    marker={"size": 1, "opacity": 0},  # hover points: ends and middles
                    yaxis=axis,
                    xaxis="x" + axis[1:],
                    meta={"pipesim": spec},
                )
            )
    return traces


def box_spec(table_id: str, rows: np.ndarray, lane: int, kind: int) -> dict:
    """How the page draws ``rows`` of the table as boxes (``report.js``)."""
    offset, thickness = LANES[Lane(lane)]
    return {
        "shape": "box",
        "table": table_id,
        "rows": typed(rows.astype(np.int32), "i4"),
        "x0": "start",
        "x1": "end",
        "y": "device",
        "offset": offset,
        "thickness": thickness,
        "inset": INSET,
        "hover": hover_lines(kind),
    }


def critical_trace(path: Sequence[dict], axis: str = "y", legend: bool = True):
    """The critical path as one red line through its elements, in time order (a transfer
    in its device's transfer lane), with a hover on each element."""
    import plotly.graph_objects as go

    xs, ys, texts = [], [], []
    for element in path:
        transfer = "->" in str(element["name"])
        lane = element["device"] + LANES[Lane.COMM if transfer else Lane.COMPUTE][0]
        text = (
            f"critical path: <b>{element['name']}</b>, device {element['device']}<br>"
            f"{element['start_ms']:.3f} to {element['end_ms']:.3f} ms"
        )
        xs += [element["start_ms"], element["end_ms"]]
        ys += [lane, lane]
        texts += [text, text]
    return go.Scattergl(
        x=xs,
        y=ys,
        text=texts,
        mode="lines",
        name="critical path",
        legendgroup="critical path",
        showlegend=legend,
        line={"color": CRITICAL, "width": 2.5},
        hovertemplate="%{text}<extra></extra>",
        yaxis=axis,
        xaxis="x" + axis[1:],
    )


def label_trace(trace: Trace, axis: str = "y"):
    """The microbatch written in each compute box that is wide enough in the first view,
    or None where the boxes are too many or too narrow to number."""
    import plotly.graph_objects as go

    compute = np.flatnonzero((trace.lane == Lane.COMPUTE) & (trace.kind < RowKind.ALLREDUCE))
    if not len(compute) or len(compute) > MAX_LABELS:
        return None
    chunks = chunk_count(trace)
    chunk_of_stage = np.full(int(trace.stage.max(initial=0)) + 2, -1)
    chunk_of_stage[trace.stage[trace.stage >= 0]] = trace.chunk[trace.stage >= 0]
    px_per_ms = FIRST_VIEW_PX / max(trace.makespan_ms, 1e-9)
    offset = LANES[Lane.COMPUTE][0]
    xs, ys, texts, colours = [], [], [], []
    for row in compute.tolist():
        text = box_label(trace, row, chunk_of_stage, chunks > 1)
        if (trace.end[row] - trace.start[row]) * px_per_ms < LABEL_PX_PER_CHAR * (len(text) + 1):
            continue
        code = KIND_CODES[trace.kind[row]]
        fill = shade(COLOURS[code], max(int(trace.chunk[row]), 0), chunks)
        xs.append((trace.start[row] + trace.end[row]) / 2)
        ys.append(trace.device[row] + offset)
        texts.append(text)
        colours.append(text_colour(fill))
    if not texts:
        return None
    return go.Scattergl(  # WebGL, as the boxes: an SVG trace would sit under their canvas
        x=xs,
        y=ys,
        text=texts,
        mode="text",
        textfont={"size": 10, "color": colours},
        hoverinfo="skip",
        showlegend=False,
        name="microbatch",
        yaxis=axis,
        xaxis="x" + axis[1:],
    )


def device_axis(devices: int) -> dict:
    """Device 0 on top, one row per device, named ``device d`` (every k-th when many)."""
    step = 1
    while devices / step > 32:
        step *= 2
    ticks = list(range(0, devices, step))
    return {
        "range": [devices - 0.5, -0.5],
        "tickvals": ticks,
        "ticktext": [f"device {d}" for d in ticks],
        "zeroline": False,
        "showgrid": False,
    }


def legend_entries(traces) -> int:
    """How many lines the legend of ``traces`` has."""
    return sum(1 for trace in traces if trace.showlegend is not False)


def critical_button(indices: Sequence[int]) -> dict:
    """A button that hides the critical path's traces and, clicked again, shows them."""
    return {
        "type": "buttons",
        "active": -1,  # not yet clicked: the first click applies ``args`` (hide)
        "showactive": False,
        "x": 1.0,
        "xanchor": "right",
        "y": 1.0,
        "yanchor": "bottom",
        "pad": {"b": 6},
        "buttons": [
            {
                "label": "critical path on/off",
                "method": "restyle",
                "args": [{"visible": False}, list(indices)],
                "args2": [{"visible": True}, list(indices)],
            }
        ],
    }


def gantt_traces(
    trace: Trace, table_id: str, path: Sequence[dict] = (), axis: str = "y", legend: bool = True
) -> tuple[list, int | None]:
    """Boxes, labels and the critical path of one run, in drawing order, and the index of
    the critical path's trace among them (None without a path)."""
    traces = box_traces(trace, table_id, axis, legend)
    critical = None
    if path:
        traces.append(critical_trace(path, axis, legend))
        critical = len(traces) - 1
    labels = label_trace(trace, axis)  # on top: the numbers stay readable over the path
    if labels is not None:
        traces.append(labels)
    return traces, critical


def gantt_figure(trace: Trace, title: str, path: Sequence[dict], table_id: str):
    """One run's chart (with the critical path and its button where ``path`` is given)
    and the table of rows it is drawn from."""
    import plotly.graph_objects as go

    traces, critical = gantt_traces(trace, table_id, path)
    figure = go.Figure(traces)
    figure.update_layout(
        title={"text": title, "x": 0, "xanchor": "left", "font": {"size": 14}},
        template="plotly_white",
        height=chart_px(trace.devices, legend_entries(traces)) + MARGIN["t"] + MARGIN["b"],
        margin=MARGIN,
        hovermode="closest",
        dragmode="zoom",
        xaxis={"title": {"text": "time (ms)"}, "range": [0, max(trace.makespan_ms, 1e-9)]},
        yaxis=device_axis(trace.devices),
        updatemenus=[critical_button([critical])] if critical is not None else [],
    )
    return figure, gantt_table(trace, table_id)
