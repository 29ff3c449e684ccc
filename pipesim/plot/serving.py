"""Figures of serving runs: how long users wait, and how full the replicas were.

``serving_figure`` draws one run. The top row holds the cumulative distributions of the
three latencies a user feels (time to first token, time per output token, end to end),
each with the SLO limit where one is set, the SLO's percentile (p90 for an SLO held at
p90; where the curve crosses that fraction left of the limit, the SLO holds) and the
median marked; a CDF shows the whole tail at once, where a mean hides it. Below them, per replica over time: the batch size of
every iteration (continuous batching at work) and the fraction of KV blocks in use
(what limits admission and forces preemptions). The layout is matplotlib's tight layout,
plain arithmetic on the text extents: the constrained layout's solver orders its sums by
memory address, so its axes positions, and the ids an SVG derives from them, moved in the
last bits from one run to the next.

``serving_sweep_figure`` draws a ``pipesim sweep`` of a serving scenario: throughput and
the p99 latencies against the first grid key, one line per combination of the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pipesim.plot.style import CRITICAL, FONT, TITLE_FONT, pyplot
from pipesim.plot.sweep import draw_metric, grid_keys, layout
from pipesim.serving.results import ServeResult

if TYPE_CHECKING:  # frames come in; pandas itself is not needed to draw them
    import pandas as pd

MEDIAN = 50
DEFAULT_PERCENTILE = 99.0  # the SLO's percentile where a scenario names none

LATENCIES = (
    ("ttft_ms", "time to first token"),
    ("tpot_ms", "time per output token"),
    ("e2e_ms", "end-to-end latency"),
)


def _latencies_ms(result: ServeResult) -> dict[str, np.ndarray]:
    r = result.requests
    served = ~r.rejected
    found = {"ttft_ms": r.ttft_s[served], "tpot_ms": r.tpot_s[served], "e2e_ms": r.e2e_s[served]}
    return {k: np.sort(v[~np.isnan(v)]) * 1e3 for k, v in found.items()}


def draw_cdf(
    ax,
    values_ms: np.ndarray,
    title: str,
    limit_ms: float | None,
    percentile: float = DEFAULT_PERCENTILE,
) -> None:
    """The empirical CDF of ``values_ms``: the median dotted, the SLO's ``percentile``
    dash-dotted (with its fraction of requests as a faint horizontal line), the SLO limit
    dashed."""
    ax.set_title(title, fontsize=TITLE_FONT)
    ax.set_xlabel("ms", fontsize=FONT)
    ax.set_ylim(0, 1.02)
    ax.tick_params(labelsize=FONT)
    ax.locator_params(axis="x", nbins=5)  # long latencies' tick labels stay apart
    if not len(values_ms):
        ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
        return
    fraction = np.arange(1, len(values_ms) + 1) / len(values_ms)
    ax.step(values_ms, fraction, where="post", color="#1F77B4")
    marks = {MEDIAN: (":", "")} | {percentile: ("-.", " (SLO percentile)")}
    for q, (style, whose) in marks.items():
        at = float(np.percentile(values_ms, q))
        label = f"p{q:g} {at:.4g} ms{whose}"
        ax.axvline(at, color="#7F7F7F", linestyle=style, linewidth=0.8, label=label)
    ax.axhline(percentile / 100, color="#BBBBBB", linestyle="-.", linewidth=0.6)
    if limit_ms is not None:
        ax.axvline(limit_ms, color=CRITICAL, linestyle="--", label=f"SLO {limit_ms:g} ms")
    ax.legend(fontsize=FONT - 1, loc="lower right")


def draw_batch_size(ax, result: ServeResult) -> None:
    """Each iteration's batch size at its start on the first stage (dots: with a pipeline,
    the virtual engines' batches alternate), and the sequences running on the replica
    (line), per replica."""
    log, t = result.iterations, result.timeline
    for replica in range(len(result.kv_blocks)):
        mine = log.replica == replica
        dots = ax.scatter(log.start_s[mine, 0], log.batch_size[mine], s=2, alpha=0.5, linewidths=0)
        running = t.replica == replica
        ax.plot(
            t.time_s[running],
            t.running[running],
            drawstyle="steps-post",
            linewidth=0.8,
            color=dots.get_facecolor()[0],
            label=f"replica {replica}: running",
        )
    ax.set_ylabel("sequences (dots: per batch)", fontsize=FONT)
    ax.set_ylim(bottom=0)
    ax.tick_params(labelsize=FONT)
    ax.legend(fontsize=FONT - 1, ncol=min(len(result.kv_blocks), 8), loc="upper right")


def draw_kv_use(ax, result: ServeResult) -> None:
    """The fraction of each replica's KV blocks in use after every scheduling step."""
    t = result.timeline
    for replica, blocks in enumerate(result.kv_blocks):
        mine = t.replica == replica
        ax.plot(
            t.time_s[mine],
            t.kv_blocks_used[mine] / blocks,
            drawstyle="steps-post",
            linewidth=0.8,
            label=f"replica {replica}",
        )
    ax.set_ylabel("KV blocks in use (fraction)", fontsize=FONT)
    ax.set_xlabel("time (s)", fontsize=FONT)
    ax.set_ylim(bottom=0)
    ax.tick_params(labelsize=FONT)


def serving_figure(
    result: ServeResult,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
    percentile: float = DEFAULT_PERCENTILE,
):
    """Latency CDFs on top (the SLO's limits and its ``percentile`` marked), batch size and
    KV use over time below (see the module)."""
    plt = pyplot()
    fig, axes = plt.subplot_mosaic(
        [["ttft_ms", "tpot_ms", "e2e_ms"], ["batch"] * 3, ["kv"] * 3],
        figsize=(12, 9),
        layout="tight",
        height_ratios=[1.2, 1, 1],
    )
    latencies = _latencies_ms(result)
    limits = {"ttft_ms": slo_ttft_ms, "tpot_ms": slo_tpot_ms, "e2e_ms": None}
    for key, title in LATENCIES:
        draw_cdf(axes[key], latencies[key], title, limits[key], percentile)
    axes["ttft_ms"].set_ylabel("fraction of requests", fontsize=FONT)
    draw_batch_size(axes["batch"], result)
    draw_kv_use(axes["kv"], result)
    axes["batch"].sharex(axes["kv"])
    return fig


# ---------------------------------------------------------------------------
# Sweeps

SWEEP_PANELS = (
    ("throughput_rps", "completed requests/s"),
    ("goodput_rps", "goodput (requests/s within the SLO)"),
    ("ttft_ms_p90", "p90 TTFT (ms)"),
    ("tpot_ms_p90", "p90 TPOT (ms)"),
)


def serving_sweep_figure(frame: pd.DataFrame):
    """Throughput, goodput and p90 TTFT and TPOT against the swept key in its unit (the
    first grid key whose numbers vary), one line per combination of the other keys that
    vary, as ``sweep_figure`` draws a training sweep; error rows are left out."""
    plt = pyplot()
    ok = frame[frame["error"].fillna("") == ""] if "error" in frame else frame
    fig, axes = plt.subplots(1, len(SWEEP_PANELS), figsize=(17, 4.6))
    if ok.empty or not grid_keys(ok):
        fig.suptitle("no point of the sweep ran (see the error column)")
        return fig
    where = layout(ok.reset_index(drop=True))
    for ax, (column, title) in zip(axes, SWEEP_PANELS, strict=True):
        draw_metric(ax, ok.reset_index(drop=True), where, column, title)
    if len(set(where.labels)) > 1:
        fig.legend(
            *axes[0].get_legend_handles_labels(),
            loc="lower center",
            fontsize=FONT - 1,
            ncol=min(4, len(set(where.labels))),
            frameon=False,
        )
    failed = len(frame) - len(ok)
    fig.suptitle(
        f"{len(frame)} points"
        + (f", {failed} did not run (see the error column)" if failed else ""),
        fontsize=TITLE_FONT,
    )
    # the tight layout is plain arithmetic: the same figure gives the same bytes every run
    fig.tight_layout(rect=(0, 0.12 if len(set(where.labels)) > 1 else 0, 1, 1))
    return fig
