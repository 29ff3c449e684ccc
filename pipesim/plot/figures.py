"""matplotlib figures: Gantt charts and memory over time.

matplotlib is imported inside each function (with the Agg backend when no display is
set), so importing pipesim stays light and the core never touches it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipesim.analysis.sweep import pareto_front
from pipesim.sim.memory import MemoryTimeline
from pipesim.sim.metrics import Report
from pipesim.sim.trace import COMM, COMPUTE, KIND_CODES, Trace

COLOURS = {
    "F": "#4C72B0",
    "B": "#55A868",
    "I": "#8FD18F",
    "W": "#8172B2",
    "OVERLAP_F_B": "#DD8452",
    "SEND_F": "#9FB7D9",
    "SEND_B": "#A9D8B3",
    "ALLREDUCE": "#C44E52",
}
_LABEL_LIMIT = 1500  # above this many boxes, numbers would be unreadable


def _pyplot():
    import matplotlib

    if matplotlib.get_backend().lower() not in (
        "agg",
        "pdf",
        "svg",
        "module://matplotlib_inline.backend_inline",
    ):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw_gantt(ax, trace: Trace, title: str = "", show_comm: bool = True) -> None:
    """Draw one row per device (device 0 on top); compute boxes coloured by kind."""
    rows = len(trace.start)
    label = rows <= _LABEL_LIMIT
    for i in range(rows):
        lane = trace.lane[i]
        if lane == COMM and not show_comm:
            continue
        kind = KIND_CODES[trace.kind[i]]
        device = trace.device[i]
        start, width = trace.start[i], trace.end[i] - trace.start[i]
        if lane == COMPUTE:
            y, height = device - 0.4, 0.6
        else:
            y, height = device + 0.22, 0.16
        ax.broken_barh(
            [(start, width)],
            (y, height),
            facecolors=COLOURS[kind],
            edgecolor="white",
            linewidth=0.4,
        )
        if label and lane == COMPUTE and width > 0:
            action = trace.actions[i]
            text = (
                "/".join(str(a.microbatch) for a in action.atoms)
                if action.sub_actions
                else str(action.microbatch)
            )
            ax.text(
                start + width / 2,
                device - 0.1,
                text,
                ha="center",
                va="center",
                fontsize=7,
                color="white",
            )
    ax.set_ylim(trace.devices - 0.5, -0.6)
    ax.set_yticks(range(trace.devices))
    ax.set_yticklabels([f"device {d}" for d in range(trace.devices)])
    ax.set_xlim(0, max(trace.makespan_ms, 1e-9))
    ax.set_xlabel("time (ms)")
    if title:
        ax.set_title(title, fontsize=10)


def draw_memory(ax, trace: Trace, memory: Sequence[MemoryTimeline]) -> None:
    """Activation memory held per device over time (step lines, MiB)."""
    for d, timeline in enumerate(memory):
        if not len(timeline.time):
            continue
        times = np.concatenate([[0.0], timeline.time, [trace.makespan_ms]])
        values = np.concatenate([[0.0], timeline.activation_bytes, [timeline.activation_bytes[-1]]])
        ax.step(times, values / 2**20, where="post", label=f"device {d}", linewidth=1)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("activations (MiB)")
    ax.set_xlim(0, max(trace.makespan_ms, 1e-9))
    ax.legend(fontsize=7, ncol=min(trace.devices, 8), loc="upper right")


def _title(report: Report) -> str:
    return (
        f"{report.scenario} - {report.schedule}: makespan {report.makespan_ms:.3f} ms, "
        f"bubble fraction {report.bubble_fraction:.4f}"
    )


def _has_memory(memory: Sequence[MemoryTimeline]) -> bool:
    return any(len(t.activation_bytes) and np.any(t.activation_bytes) for t in memory)


def _legend(fig, kinds: set[str]) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(color=COLOURS[k], label=k) for k in KIND_CODES if k in kinds]
    fig.legend(handles=handles, loc="upper right", fontsize=7, ncol=len(handles))


def gantt_figure(
    trace: Trace,
    report: Report,
    memory: Sequence[MemoryTimeline] = (),
    critical_path=None,
):
    """The Gantt chart, with the memory-over-time plot under it when ``memory`` timelines
    are given and hold any activations;
    ``critical_path`` (from ``pipesim.critical``) is outlined in red."""
    plt = _pyplot()
    with_memory = _has_memory(memory)
    height = 0.45 * trace.devices + 1.6
    fig, axes = plt.subplots(
        2 if with_memory else 1,
        1,
        figsize=(11, height + (2.4 if with_memory else 0)),
        sharex=True,
        squeeze=False,
        gridspec_kw={"height_ratios": [height, 2.4]} if with_memory else None,
    )
    draw_gantt(axes[0][0], trace, _title(report))
    if critical_path:
        draw_critical_path(axes[0][0], critical_path)
    if with_memory:
        draw_memory(axes[1][0], trace, memory)
    _legend(fig, {KIND_CODES[k] for k in np.unique(trace.kind)})
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


CRITICAL = "#D62728"


def draw_critical_path(ax, path) -> None:
    """Outline each element of the critical path and join them in time order."""
    from matplotlib.patches import Rectangle

    centres = []
    for element in path:
        device, start, end = element["device"], element["start_ms"], element["end_ms"]
        y, height = (device + 0.22, 0.16) if "->" in element["name"] else (device - 0.4, 0.6)
        ax.add_patch(
            Rectangle(
                (start, y), end - start, height, fill=False, edgecolor=CRITICAL, linewidth=1.6
            )
        )
        centres.append(((start, y + height / 2), (end, y + height / 2)))
    for (_, leave), (arrive, _) in zip(centres, centres[1:], strict=False):
        ax.plot([leave[0], arrive[0]], [leave[1], arrive[1]], color=CRITICAL, linewidth=0.9)
    ax.plot([], [], color=CRITICAL, linewidth=1.6, label="critical path")
    ax.legend(loc="lower right", fontsize=7)


def sweep_figure(frame):
    """Two panels of a sweep: bubble fraction against microbatches per schedule, with
    (p-1)/(m+p-1) for reference; throughput against peak activation memory, with the
    Pareto front (no point has less memory and more throughput) marked."""

    plt = _pyplot()
    ok = frame[frame["error"].fillna("") == ""]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for schedule, group in ok.groupby("schedule", sort=True):
        means = group.groupby("microbatches")["bubble_fraction"].mean()
        left.plot(means.index, means.to_numpy(), marker="o", label=schedule)
    for p in sorted(ok["devices"].dropna().unique()):
        m = np.linspace(1, max(float(ok["microbatches"].max()), 1.0), 200)
        left.plot(m, (p - 1) / (m + p - 1), "k--", linewidth=0.8, label=f"(p-1)/(m+p-1), p={p}")
    left.set_xlabel("microbatches m")
    left.set_ylabel("bubble fraction")
    left.set_ylim(bottom=0)
    left.legend(fontsize=7)
    mib = ok["peak_activation_bytes_max"].astype(float) / 2**20
    right.scatter(mib, ok["samples_per_second"], s=18, color="#7F7F7F", label="points")
    front = pareto_front(ok)
    order = np.argsort(mib.to_numpy()[front])
    right.plot(mib.to_numpy()[front][order], ok["samples_per_second"].to_numpy()[front][order],
               "o-", color=CRITICAL, label="Pareto front")  # fmt: skip
    right.set_xlabel("peak activation memory per device (MiB)")
    right.set_ylabel("throughput (samples/s)")
    right.legend(fontsize=7)
    fig.tight_layout()
    return fig


def stacked_gantt_figure(results: Sequence[tuple[Trace, Report]]):
    """Several Gantt charts stacked with one shared time axis (``pipesim compare``)."""
    plt = _pyplot()
    heights = [0.45 * t.devices + 1.0 for t, _ in results]
    fig, axes = plt.subplots(
        len(results), 1, figsize=(11, sum(heights) + 1), sharex=True, squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )  # fmt: skip
    longest = max(t.makespan_ms for t, _ in results)
    kinds: set[str] = set()
    for (trace, report), row in zip(results, axes, strict=True):
        draw_gantt(row[0], trace, _title(report))
        kinds |= {KIND_CODES[k] for k in np.unique(trace.kind)}
    for row in axes:
        row[0].set_xlim(0, longest)
    _legend(fig, kinds)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig


def save_figure(fig, path: str) -> None:
    """Save and close; the caller handles atomic replacement."""
    plt = _pyplot()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def crosscheck_figure(measured: Trace, simulated: Trace, title: str):
    """Two Gantt charts, measured above simulated, on one time axis."""

    plt = _pyplot()
    height = 0.5 * measured.devices + 1.2
    fig, axes = plt.subplots(2, 1, figsize=(11, 2 * height + 0.5), sharex=True)
    draw_gantt(axes[0], measured, f"{title}: measured", show_comm=False)
    draw_gantt(axes[1], simulated, f"{title}: simulated", show_comm=True)
    longest = max(measured.makespan_ms, simulated.makespan_ms)
    for ax in axes:
        ax.set_xlim(0, longest)
    fig.tight_layout()
    return fig
