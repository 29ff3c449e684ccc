"""The serving view: one serving run as an interactive page.

From top to bottom: the report's numbers (``ServeReport``, what ``pipesim serve`` prints),
the iterations on every pipeline stage of every replica as a Gantt chart (one row per
stage, a box per iteration, coloured by the batch in flight it belongs to: with a
pipeline of p stages a replica keeps up to p batches in flight, vLLM's virtual engines),
the latency CDFs with the SLO's limit and percentile, batch size and KV-cache use over
time, and every request (time to first token against arrival; hover for its queueing,
TTFT, TPOT and preemptions). The Gantt chart, the batch and KV panels and the requests
share their time axis.
"""

from __future__ import annotations

import numpy as np

from pipesim.plot.html.gantt import INSET, MARGIN, chart_px
from pipesim.plot.html.page import Page, RowTable, typed
from pipesim.plot.html.serving_charts import cdf_figure, requests_figure, usage_figure
from pipesim.plot.html.tables import Cell, cell, headline_table, html_table
from pipesim.scenario.serving import ServeRun
from pipesim.serving.report import ServeReport
from pipesim.serving.results import ServeResult

ENGINE_COLOURS = ("#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B", "#E377C2")
ITERATION_HOVER = [
    "<b>iteration {iteration}</b>  replica {replica}, stage {stage}",
    "batch in flight {engine}: {batch_size} sequences, {prefill_tokens} prefill tokens, "
    "{decode_seqs} decoding",
    "start {start:ms3} ms · end {end:ms3} ms · duration {_duration:ms3} ms",
]
LATENCIES = (
    ("TTFT", "ttft_ms"),
    ("TPOT", "tpot_ms"),
    ("inter-token", "itl_ms"),
    ("end to end", "e2e_ms"),
    ("queueing", "queue_ms"),
)


def serving_report(run: ServeRun) -> str:
    """The whole page of one serving run."""
    scenario, report, result = run.scenario, run.report, run.result
    slo = scenario.slo
    page = Page(f"pipesim serve - {scenario.name}")
    page.heading(f"pipesim serve - {scenario.name}", 1)
    page.paragraph(
        f"{len(result.kv_blocks)} replicas x {result.stages} pipeline stages, "
        f"router {scenario.config.router}, costs {scenario.costs_from}; {_slo_words(slo)}"
    )
    page.raw(headline_table(serving_lines(report, result)))
    page.raw(latency_table(report))
    page.heading("iterations per pipeline stage")
    page.paragraph(
        "One row per stage of each replica, a box per iteration, coloured by the batch in "
        "flight it carries; hover for its batch. Drag to zoom, double-click to see it all."
    )
    figure, table = iteration_figure(result, "serve-iterations")
    page.table_data(table)
    page.figure("serve-gantt", figure, link="serve-time")
    page.heading("latencies")
    page.figure("serve-cdf", cdf_figure(result, slo.ttft_ms, slo.tpot_ms, slo.percentile))
    page.heading("batch size and KV cache over time")
    page.figure("serve-usage", usage_figure(result), link="serve-time")
    page.heading("requests")
    page.paragraph(
        "Each completed request at its arrival time and its time to first token; hover for "
        "its queueing, TTFT, TPOT and preemptions (rejected requests have no first token)."
    )
    figure, table = requests_figure(result, "serve-requests")
    page.table_data(table)
    page.figure("serve-requests-chart", figure, link="serve-time")
    page.data({"view": "serving", "report": report.to_dict()})
    return page.render()


def _slo_words(slo) -> str:
    limits = [
        f"{name} <= {value:g} ms"
        for name, value in (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms))
        if value is not None
    ]
    return f"SLO {', '.join(limits)} at p{slo.percentile:g}" if limits else "no SLO"


def serving_lines(report: ServeReport, result: ServeResult) -> list[tuple[str, str, str]]:
    """The run's numbers, as ``pipesim serve`` prints them."""
    return [
        (
            "requests",
            f"{report.requests} ({report.completed} completed, {report.rejected} rejected), "
            f"{report.preemptions} preemptions",
            "",
        ),
        ("duration", f"{report.duration_s:.3f} s", ""),
        (
            "throughput",
            f"{report.throughput_rps:.3f} requests/s, "
            f"{report.output_tokens_per_second:.1f} output tokens/s",
            "",
        ),
        ("goodput", f"{report.goodput_rps:.3f} requests/s within the SLO", ""),
        ("in system (mean)", f"{report.mean_in_system:.3f} requests", ""),
        (
            "batch size",
            f"mean {report.batch_size.mean:.2f}, peak {report.batch_size.peak:.0f} sequences",
            "",
        ),
        (
            "KV cache in use",
            f"mean {report.kv_utilization.mean:.1%}, peak {report.kv_utilization.peak:.1%} of "
            f"{result.kv_blocks[0]:,} blocks per replica",
            "",
        ),
        ("bubble fraction", f"{report.bubble_fraction:.4f}", ""),
    ]


def latency_table(report: ServeReport) -> str:
    """Mean, p50, p90 and p99 of each latency, in ms (``-`` where undefined)."""
    rows = []
    for label, key in LATENCIES:
        stats = getattr(report, key)
        rows.append(
            [
                Cell(label, css="text"),
                *(cell(getattr(stats, q)) for q in ("mean", "p50", "p90", "p99")),
            ]
        )
    return html_table(["latency (ms)", "mean", "p50", "p90", "p99"], rows, table_id="serve-latency")


def iteration_table(result: ServeResult, table_id: str) -> RowTable:
    """One row per (iteration, stage): where it ran (``row``: replica x stages + stage),
    when, and its batch."""
    log = result.iterations
    count, stages = log.start_s.shape
    repeat = np.repeat(np.arange(count), stages)
    return RowTable(
        table_id,
        {
            "iteration": repeat,
            "replica": log.replica[repeat],
            "stage": np.tile(np.arange(stages), count),
            "row": log.replica[repeat] * stages + np.tile(np.arange(stages), count),
            "engine": log.engine[repeat],
            "batch_size": log.batch_size[repeat],
            "prefill_tokens": log.prefill_tokens[repeat],
            "decode_seqs": log.decode_seqs[repeat],
            "start": log.start_s.ravel().astype(np.float64),
            "end": log.end_s.ravel().astype(np.float64),
        },
    )


def iteration_figure(result: ServeResult, table_id: str):
    """The iterations as boxes, one WebGL trace per batch in flight, and their table."""
    import plotly.graph_objects as go

    table = iteration_table(result, table_id)
    engines = np.asarray(table.columns["engine"])
    rows = len(result.kv_blocks) * result.stages
    traces = []
    for engine in np.unique(engines).tolist():
        spec = {
            "shape": "box",
            "table": table_id,
            "rows": typed(np.flatnonzero(engines == engine).astype(np.int32), "i4"),
            "x0": "start",
            "x1": "end",
            "y": "row",
            "offset": 0.0,
            "thickness": 0.7,
            "inset": INSET,
            "hover": ITERATION_HOVER,
        }
        traces.append(
            go.Scattergl(
                mode="lines+markers",
                name=f"batch in flight {engine}",
                line={"color": ENGINE_COLOURS[engine % len(ENGINE_COLOURS)], "width": 2},
                marker={"size": 1, "opacity": 0},
                meta={"pipesim": spec},
            )
        )
    step = max(1, rows // 32)
    ticks = list(range(0, rows, step))
    figure = go.Figure(traces)
    figure.update_layout(
        template="plotly_white",
        height=chart_px(rows, len(traces)) + MARGIN["t"] + MARGIN["b"],
        margin=MARGIN,
        hovermode="closest",
        xaxis={"title": {"text": "time (s)"}, "range": [0, max(result.duration_s, 1e-9)]},
        yaxis={
            "range": [rows - 0.5, -0.5],
            "tickvals": ticks,
            "ticktext": [f"r{t // result.stages} stage {t % result.stages}" for t in ticks],
            "showgrid": False,
            "zeroline": False,
        },
    )
    return figure, table
