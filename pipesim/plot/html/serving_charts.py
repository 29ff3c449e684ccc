"""The serving view's charts: latency CDFs, batch size and KV use over time, requests.

The CDFs are the empirical distributions of the latencies a user feels (time to first
token, time per output token, end to end) with the SLO's limit (dashed red) and its
percentile (the fraction of requests that must meet it, dash-dotted): where the curve
crosses the percentile left of the limit, the SLO holds. Past ``CDF_POINTS`` requests a
curve keeps that many evenly spaced ranks, the first and last included.
"""

from __future__ import annotations

import numpy as np

from pipesim.plot.html.page import RowTable, typed
from pipesim.plot.style import CRITICAL
from pipesim.serving.results import ServeResult

CDF_POINTS = 5000
DEFAULT_PERCENTILE = 99.0
LATENCIES = (
    ("ttft_ms", "time to first token"),
    ("tpot_ms", "time per output token"),
    ("e2e_ms", "end-to-end latency"),
)
MARGIN = {"l": 80, "r": 30, "t": 50, "b": 50}
REQUEST_HOVER = [
    "<b>request {id}</b>  replica {replica}, {prompt_tokens} prompt and {output_tokens} "
    "output tokens",
    "arrival {arrival_s:f3} s · queueing {queue_s:ms3} ms",
    "TTFT {ttft_s:ms3} ms · TPOT {tpot_s:ms3} ms · end to end {e2e_s:ms3} ms",
    "preemptions {preemptions}",
]


def latencies_ms(result: ServeResult) -> dict[str, np.ndarray]:
    """Each latency of the served requests, sorted, in ms (undefined ones left out)."""
    r = result.requests
    served = ~r.rejected
    found = {"ttft_ms": r.ttft_s[served], "tpot_ms": r.tpot_s[served], "e2e_ms": r.e2e_s[served]}
    return {k: np.sort(v[~np.isnan(v)]) * 1e3 for k, v in found.items()}


def cdf_points(values_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(latency, fraction of requests at or under it), at most ``CDF_POINTS`` of them."""
    fraction = np.arange(1, len(values_ms) + 1) / max(len(values_ms), 1)
    if len(values_ms) <= CDF_POINTS:
        return values_ms, fraction
    keep = np.unique(np.linspace(0, len(values_ms) - 1, CDF_POINTS).round().astype(int))
    return values_ms[keep], fraction[keep]


def cdf_figure(
    result: ServeResult,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    percentile: float = DEFAULT_PERCENTILE,
):
    """Three CDFs side by side, each with its SLO limit and the SLO's percentile."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    titles = [title for _, title in LATENCIES]
    figure = make_subplots(rows=1, cols=3, subplot_titles=titles, horizontal_spacing=0.07)
    limits = {"ttft_ms": slo_ttft_ms, "tpot_ms": slo_tpot_ms, "e2e_ms": None}
    latencies = latencies_ms(result)
    for column, (key, title) in enumerate(LATENCIES, 1):
        values, fraction = cdf_points(latencies[key])
        figure.add_trace(
            go.Scatter(
                x=values,
                y=fraction,
                mode="lines",
                line={"shape": "hv", "color": "#1F77B4"},
                name=title,
                showlegend=False,
                hovertemplate="%{x:.3f} ms: %{y:.1%} of requests at or under<extra></extra>",
            ),
            row=1,
            col=column,
        )
        figure.add_hline(
            y=percentile / 100,
            line={"color": "#999999", "dash": "dashdot", "width": 1},
            annotation_text=f"p{percentile:g} (SLO percentile)",
            annotation_position="bottom right",
            row=1,
            col=column,
        )
        if limits[key] is not None:
            figure.add_vline(
                x=limits[key],
                line={"color": CRITICAL, "dash": "dash", "width": 1.5},
                annotation_text=f"SLO {limits[key]:g} ms",
                annotation_position="top left",
                row=1,
                col=column,
            )
        figure.update_xaxes(title_text="ms", row=1, col=column)
    figure.update_yaxes(range=[0, 1.02])
    figure.update_yaxes(title_text="fraction of requests", row=1, col=1)
    figure.update_layout(template="plotly_white", height=380, margin=MARGIN)
    return figure


def usage_figure(result: ServeResult):
    """Per replica: the sequences running after each scheduling step and each iteration's
    batch size (dots); under it, the fraction of its KV blocks in use."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    log, timeline = result.iterations, result.timeline
    for replica, blocks in enumerate(result.kv_blocks):
        colour = f"hsl({(replica * 67) % 360}, 60%, 45%)"
        mine = timeline.replica == replica
        figure.add_trace(
            go.Scattergl(
                x=timeline.time_s[mine],
                y=timeline.running[mine],
                mode="lines",
                line={"shape": "hv", "width": 1, "color": colour},
                name=f"replica {replica}: running",
                hovertemplate="%{y} running at %{x:.3f} s<extra></extra>",
            ),
            row=1,
            col=1,
        )
        batches = log.replica == replica
        figure.add_trace(
            go.Scattergl(
                x=log.start_s[batches, 0],
                y=log.batch_size[batches],
                mode="markers",
                marker={"size": 3, "color": colour, "opacity": 0.5},
                name=f"replica {replica}: batch size",
                hovertemplate="batch of %{y} at %{x:.3f} s<extra></extra>",
            ),
            row=1,
            col=1,
        )
        figure.add_trace(
            go.Scattergl(
                x=timeline.time_s[mine],
                y=timeline.kv_blocks_used[mine] / max(blocks, 1),
                mode="lines",
                line={"shape": "hv", "width": 1, "color": colour},
                name=f"replica {replica}: KV in use",
                hovertemplate="%{y:.1%} of KV blocks at %{x:.3f} s<extra></extra>",
            ),
            row=2,
            col=1,
        )
    figure.update_yaxes(title_text="sequences", rangemode="tozero", row=1, col=1)
    figure.update_yaxes(title_text="KV blocks in use", tickformat=".0%", row=2, col=1)
    figure.update_xaxes(range=[0, max(result.duration_s, 1e-9)])
    figure.update_xaxes(title_text="time (s)", row=2, col=1)
    figure.update_layout(template="plotly_white", height=520, margin=MARGIN, hovermode="closest")
    return figure


def request_table(result: ServeResult, table_id: str) -> RowTable:
    """Every request with its times (s; NaN where never reached) and preemptions."""
    r = result.requests
    return RowTable(
        table_id,
        {
            "id": r.id,
            "replica": r.replica,
            "prompt_tokens": r.prompt_tokens,
            "output_tokens": r.output_tokens,
            "preemptions": r.preemptions,
            "arrival_s": r.arrival_s.astype(np.float64),
            "queue_s": r.queue_s.astype(np.float64),
            "ttft_s": r.ttft_s.astype(np.float64),
            "tpot_s": r.tpot_s.astype(np.float64),
            "e2e_s": r.e2e_s.astype(np.float64),
        },
    )


def requests_figure(result: ServeResult, table_id: str):
    """Each served request at (arrival, TTFT), preempted ones apart; and the table."""
    import plotly.graph_objects as go

    table = request_table(result, table_id)
    r = result.requests
    served = ~r.rejected
    traces = []
    for name, chosen, colour in (
        ("never preempted", served & (r.preemptions == 0), "#1F77B4"),
        ("preempted", served & (r.preemptions > 0), "#D62728"),
    ):
        if not chosen.any():
            continue
        spec = {
            "shape": "point",
            "table": table_id,
            "rows": typed(np.flatnonzero(chosen).astype(np.int32), "i4"),
            "x": "arrival_s",
            "y": "ttft_s",
            "yscale": 1e3,
            "hover": REQUEST_HOVER,
        }
        traces.append(
            go.Scattergl(
                mode="markers",
                name=name,
                marker={"size": 5, "color": colour, "opacity": 0.7},
                meta={"pipesim": spec},
            )
        )
    figure = go.Figure(traces)
    figure.update_layout(
        template="plotly_white",
        height=380,
        margin=MARGIN,
        hovermode="closest",
        xaxis={"title": {"text": "arrival (s)"}, "range": [0, max(result.duration_s, 1e-9)]},
        yaxis={"title": {"text": "time to first token (ms)"}, "rangemode": "tozero"},
    )
    return figure, table
