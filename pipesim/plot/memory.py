"""The memory panel: what each GPU holds over the step, against what it can hold.

A device holds its static memory (weights, gradients, optimizer states) the whole step
and activations on top, rising with each forward and falling with each backward. The
panel draws the sum, in GiB, with the GPU's capacity as a dashed line when it is known,
so a schedule that does not fit shows as a curve through the line. Up to
``MAX_MEMORY_LINES`` devices get a line each; past that, the spread across devices (the
highest, median and lowest in each time bin) keeps the panel readable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipesim.plot.style import CAPACITY, FONT
from pipesim.sim.memory import MemoryTimeline
from pipesim.sim.metrics import Accounting
from pipesim.sim.trace import Trace

GIB = 2**30
MAX_MEMORY_LINES = 8
MEMORY_BINS = 600


def has_memory(memory: Sequence[MemoryTimeline], static_bytes: Sequence[float] = ()) -> bool:
    """Whether there is anything to draw: activations held, or static memory."""
    held = any(len(t.activation_bytes) and np.any(t.activation_bytes) for t in memory)
    return bool(memory) and (held or any(b > 0 for b in static_bytes))


def settled(
    timeline: MemoryTimeline, static: float, makespan: float, runtime: Runtime | None = None
):
    """(times, GiB) of one device as a step function from 0 to the makespan, one value per
    instant (where an action ends and the next starts at once, the value after both); with
    ``runtime``, what the process holds besides its tensors is added at every instant."""
    time, held = timeline.time, timeline.activation_bytes
    last = np.append(time[1:] != time[:-1], True) if len(time) else np.array([], dtype=bool)
    times = np.concatenate([[0.0], time[last], [makespan]])
    values = np.concatenate([[0.0], held[last], [held[last][-1] if last.any() else 0.0]])
    held = values + static
    if runtime is not None:
        held = held * (1.0 + runtime.fragmentation) + runtime.fixed_bytes
    return times, held / GIB


@dataclass(frozen=True, slots=True)
class Runtime:
    """What a GPU process holds besides its tensors (``pipesim.sim.metrics.Accounting``):
    ``fixed_bytes`` (CUDA context, communication buffers) plus ``fragmentation`` times the
    tensors; and the memory the OOM check allows, ``usable_bytes`` (0: the whole GPU)."""

    fixed_bytes: float = 0.0
    fragmentation: float = 0.0
    usable_bytes: float = 0.0


def runtime_for(accounting: Accounting | None) -> Runtime | None:
    """What a scenario's accounting says each process holds besides its tensors, and the
    memory its OOM check allows (None without a model: nothing to add)."""
    if accounting is None:
        return None
    return Runtime(
        accounting.runtime_memory_bytes, accounting.fragmentation, accounting.usable_bytes
    )


def binned_peaks(times: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The highest value a step function takes in each bin ``[edges[k], edges[k+1]]``."""
    index = np.maximum(np.searchsorted(times, edges, side="right") - 1, 0)
    peaks = np.maximum.reduceat(values, index[:-1])
    # reduceat stops short of the next bin's first index: the change inside this bin
    return np.maximum(peaks, values[index[1:]])


def draw_memory(
    ax,
    trace: Trace,
    memory: Sequence[MemoryTimeline],
    static_bytes: Sequence[float] = (),
    capacity_bytes: float = 0.0,
    runtime: Runtime | None = None,
) -> None:
    """Static plus activation memory per device over time (GiB), plus the runtime's where
    it is given, with the capacity line and the usable line under it."""
    makespan = max(trace.makespan_ms, 1e-9)
    static = list(static_bytes) + [0.0] * (len(memory) - len(static_bytes))
    curves = [settled(t, s, makespan, runtime) for t, s in zip(memory, static, strict=False)]
    if len(curves) <= MAX_MEMORY_LINES:
        for d, (times, gib) in enumerate(curves):
            ax.step(times, gib, where="post", label=f"device {d}", linewidth=1.2)
    else:
        draw_spread(ax, curves, makespan)
    usable = runtime.usable_bytes if runtime is not None else 0.0
    limits = [(capacity_bytes, "--", "GPU memory {:.4g} GiB")]
    if 0 < usable < capacity_bytes:
        limits.append((usable, ":", "usable {:.4g} GiB (the OOM check's limit)"))
    for limit, style, label in limits:
        if limit > 0:
            ax.axhline(
                limit / GIB,
                color=CAPACITY,
                linestyle=style,
                linewidth=1.2,
                label=label.format(limit / GIB),
            )
    ax.set_ylim(bottom=0)
    ax.set_xlim(0, makespan)
    ax.set_xlabel("time (ms)")
    what = "static + activations" if any(s > 0 for s in static) else "activations"
    if runtime is not None and (runtime.fixed_bytes > 0 or runtime.fragmentation > 0):
        what += " + runtime"
    ax.set_ylabel(f"{what}\nper device (GiB)", fontsize=FONT)
    ax.legend(fontsize=FONT, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)


def draw_spread(ax, curves: list, makespan: float) -> None:
    """Highest, median and lowest device in each time bin, the band between shaded."""
    edges = np.linspace(0.0, makespan, MEMORY_BINS + 1)
    peaks = np.array([binned_peaks(times, gib, edges) for times, gib in curves])
    low, middle, high = np.percentile(peaks, [0, 50, 100], axis=0)
    ax.fill_between(
        edges[:-1],
        low,
        high,
        step="post",
        color="#1F77B4",
        alpha=0.25,
        label=f"lowest to highest of {len(curves)} devices",
    )
    ax.step(edges[:-1], high, where="post", color="#1F77B4", linewidth=1.2, label="highest")
    ax.step(edges[:-1], middle, where="post", color="#555555", linewidth=1.0, label="median")
