"""The sweep figure: how the bubble shrinks with more microbatches, and what memory buys.

A sweep varies several grid keys at once. The left panel puts microbatches on the x axis
and draws one line per combination of everything else that varied (the schedule and
every other grid key), so no key is silently averaged away; ``(p-1)/(m+p-1)``, the bubble
of GPipe and 1F1B with uniform costs, is drawn for each device count for reference. The
right panel plots throughput against peak activation memory, in the same colours, with
the Pareto front (no point has less memory and more throughput) marked.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipesim.analysis.sweep import pareto_front
from pipesim.plot.style import CRITICAL, FONT, pyplot

X_KEYS = ("pipeline.microbatches", "pipeline.schedule")  # drawn by x and by "schedule"
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
REFERENCE_STYLES = ("--", ":", "-.", (0, (5, 1)), (0, (1, 3)))
MIB, GIB = 2**20, 2**30


def grid_keys(frame: pd.DataFrame) -> list[str]:
    """The sweep's grid keys: the dotted column names (``pipeline.devices``)."""
    return [c for c in frame.columns if "." in str(c)]


def line_keys(frame: pd.DataFrame) -> list[str]:
    """What tells the lines apart: the schedule, then every other grid key that varies
    (the device count too where it varies without being a grid key: a derived size)."""
    keys = [k for k in grid_keys(frame) if k not in X_KEYS]
    if "pipeline.devices" not in keys and "devices" in frame:
        keys.append("devices")
    return ["schedule"] + [k for k in keys if k in frame and frame[k].nunique(dropna=False) > 1]


def line_label(keys: list[str], values: tuple) -> str:
    """``1f1b, devices=4``: the schedule bare, other keys by their last name."""
    short = [k.rsplit(".", 1)[-1] for k in keys]
    names = [k if short.count(s) > 1 else s for k, s in zip(keys, short, strict=True)]
    parts = [
        str(v) if k == "schedule" else f"{n}={v}"
        for k, n, v in zip(keys, names, values, strict=True)
    ]
    return ", ".join(parts)


def draw_bubble(ax, ok: pd.DataFrame, keys: list[str]) -> dict[str, str]:
    """One line per combination of ``keys``; returns each label's colour."""
    colours: dict[str, str] = {}
    groups = ok.groupby(keys, sort=True, dropna=False)
    for n, (values, group) in enumerate(groups):
        label = line_label(keys, values if isinstance(values, tuple) else (values,))
        means = group.groupby("microbatches")["bubble_fraction"].mean()
        # open markers of different shapes: lines that coincide still both show
        (line,) = ax.plot(
            means.index,
            means.to_numpy(),
            marker=MARKERS[n % len(MARKERS)],
            markerfacecolor="none",
            markersize=8 - 3 * n / max(len(groups), 1),
            label=label,
        )
        colours[label] = line.get_color()
    top = max(float(ok["microbatches"].max()), 1.0)
    for p, style in zip(sorted(ok["devices"].dropna().unique()), _styles(), strict=False):
        m = np.linspace(1, top, 200)
        ax.plot(
            m,
            (p - 1) / (m + p - 1),
            color="black",
            linestyle=style,
            linewidth=0.8,
            label=f"(p-1)/(m+p-1), p={p}",
        )
    ax.set_xlabel("microbatches m", fontsize=FONT)
    ax.set_ylabel("bubble fraction", fontsize=FONT)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=FONT - 1, ncol=2 if len(colours) > 8 else 1)
    return colours


def _styles():
    while True:
        yield from REFERENCE_STYLES


def draw_tradeoff(ax, ok: pd.DataFrame, keys: list[str], colours: dict[str, str]) -> None:
    """Throughput against peak activation memory, coloured as the lines, front in red."""
    memory = ok["peak_activation_bytes_max"].astype(float).to_numpy()
    unit, scale = ("GiB", GIB) if np.nanmax(memory, initial=0.0) >= GIB else ("MiB", MIB)
    labels = [
        line_label(keys, v if isinstance(v, tuple) else (v,))
        for v in ok[keys].itertuples(index=False, name=None)
    ]
    ax.scatter(
        memory / scale,
        ok["samples_per_second"],
        s=22,
        c=[colours.get(label, "#7F7F7F") for label in labels],
    )
    front = pareto_front(ok)
    order = np.argsort(memory[front])
    ax.plot(
        memory[front][order] / scale,
        ok["samples_per_second"].to_numpy()[front][order],
        "o-",
        color=CRITICAL,
        markerfacecolor="none",
        label="Pareto front",
    )
    ax.set_xlabel(f"peak activation memory per device ({unit})", fontsize=FONT)
    ax.set_ylabel("throughput (samples/s)", fontsize=FONT)
    ax.legend(fontsize=FONT - 1, title="points: colours as on the left", title_fontsize=FONT - 1)


def sweep_figure(frame: pd.DataFrame):
    """Two panels of a sweep table (``pipesim sweep``): bubble fraction against
    microbatches, one line per combination of the other varied keys; throughput against
    peak activation memory with its Pareto front. Error rows are left out."""
    plt = pyplot()
    ok = frame[frame["error"].fillna("") == ""] if "error" in frame else frame
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.2), layout="constrained")
    if ok.empty:
        fig.suptitle("no point of the sweep ran (see the error column)")
        return fig
    keys = line_keys(ok)
    colours = draw_bubble(left, ok, keys)
    draw_tradeoff(right, ok, keys, colours)
    return fig
