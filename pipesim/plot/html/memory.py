"""Memory over the step, per device, against the GPU's capacity: the interactive panel.

The same numbers as the static panel (``pipesim.plot.memory``): static memory plus the
activations held, plus what the process holds besides its tensors where the scenario
models it, in GiB, as a step function from 0 to the makespan. Up to ``MAX_LINES`` devices
get a line each (hover names the device); past that, the spread across devices (the
lowest to the highest in each time bin, and the median) with the line of the device whose
peak is highest. The capacity is a dashed line, the memory the OOM check allows a dotted
one under it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipesim.plot.memory import (
    GIB,
    MEMORY_BINS,
    Runtime,
    binned_peaks,
    has_memory,
    settled,
)
from pipesim.plot.style import CAPACITY
from pipesim.sim.memory import MemoryTimeline
from pipesim.sim.metrics import Report
from pipesim.sim.trace import Trace

MAX_LINES = 16
SPREAD = "#1F77B4"
HEIGHT_PX = 340
MARGIN = {"l": 90, "r": 30, "t": 50, "b": 50}


def memory_figure(
    trace: Trace,
    report: Report,
    memory: Sequence[MemoryTimeline],
    capacity_bytes: float = 0.0,
    runtime: Runtime | None = None,
):
    """The memory panel of one run, or None where nothing is held."""
    import plotly.graph_objects as go

    static = [d.static_memory_bytes for d in report.per_device]
    if not has_memory(memory, static):
        return None
    makespan = max(trace.makespan_ms, 1e-9)
    curves = [settled(t, s, makespan, runtime) for t, s in zip(memory, static, strict=False)]
    if len(curves) <= MAX_LINES:
        traces = [_device_line(d, times, gib) for d, (times, gib) in enumerate(curves)]
    else:
        traces = _spread(curves, makespan)
    usable = runtime.usable_bytes if runtime is not None else 0.0
    limits = [(capacity_bytes, "dash", "GPU memory")]
    if 0 < usable < capacity_bytes:
        limits.append((usable, "dot", "usable (the OOM check's limit)"))
    for limit, dash, label in limits:
        if limit > 0:
            traces.append(
                go.Scatter(
                    x=[0.0, makespan],
                    y=[limit / GIB, limit / GIB],
                    mode="lines",
                    name=f"{label} {limit / GIB:.4g} GiB",
                    line={"color": CAPACITY, "dash": dash, "width": 1.2},
                    hovertemplate=f"{label}: %{{y:.3f}} GiB<extra></extra>",
                )
            )
    figure = go.Figure(traces)
    figure.update_layout(
        title={"text": "memory per device over the step", "x": 0, "font": {"size": 14}},
        template="plotly_white",
        height=HEIGHT_PX,
        margin=MARGIN,
        hovermode="closest",
        xaxis={"title": {"text": "time (ms)"}, "range": [0, makespan]},
        yaxis={"title": {"text": _what(static, runtime) + " (GiB)"}, "rangemode": "tozero"},
    )
    return figure


def _what(static: Sequence[float], runtime: Runtime | None) -> str:
    what = "static + activations" if any(s > 0 for s in static) else "activations"
    if runtime is not None and (runtime.fixed_bytes > 0 or runtime.fragmentation > 0):
        what += " + runtime"
    return what


def _device_line(device: int, times: np.ndarray, gib: np.ndarray, name: str = ""):
    import plotly.graph_objects as go

    label = name or f"device {device}"
    return go.Scattergl(
        x=times,
        y=gib,
        mode="lines",
        line={"shape": "hv", "width": 1.5},
        name=label,
        hovertemplate=f"{label}: %{{y:.3f}} GiB at %{{x:.3f}} ms<extra></extra>",
    )


def _spread(curves: list, makespan: float) -> list:
    """Lowest to highest device per time bin (shaded), the median, and the device whose
    peak is highest, drawn whole."""
    import plotly.graph_objects as go

    edges = np.linspace(0.0, makespan, MEMORY_BINS + 1)
    peaks = np.array([binned_peaks(times, gib, edges) for times, gib in curves])
    low, middle, high = np.percentile(peaks, [0, 50, 100], axis=0)
    band = {"shape": "hv", "width": 0.5, "color": SPREAD}
    worst = int(np.argmax([gib.max() for _, gib in curves]))
    times, gib = curves[worst]
    return [
        go.Scatter(
            x=edges[:-1], y=low, mode="lines", line=band, showlegend=False, hoverinfo="skip"
        ),
        go.Scatter(
            x=edges[:-1],
            y=high,
            mode="lines",
            line=band,
            fill="tonexty",
            fillcolor="rgba(31, 119, 180, 0.25)",
            name=f"lowest to highest of {len(curves)} devices",
            hovertemplate="highest: %{y:.3f} GiB<extra></extra>",
        ),
        go.Scatter(
            x=edges[:-1],
            y=middle,
            mode="lines",
            line={"shape": "hv", "width": 1, "color": "#555555"},
            name="median",
            hovertemplate="median: %{y:.3f} GiB<extra></extra>",
        ),
        _device_line(worst, times, gib, f"device {worst} (highest peak)"),
    ]
