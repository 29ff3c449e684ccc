"""The sweep figure: what the swept keys do to the number the sweep is about.

A sweep varies one or more grid keys. The figure puts one of them on the x axis (the
first, in ``--grid`` order, whose values are numbers and vary; else the first that
varies, its values as categories) and draws one line per combination of the other keys
that vary, so no key is silently averaged away. Values read in their units: a key ending
in ``_bytes`` in GiB (or MiB, KiB), ``_ms`` in ms, ``_us`` in µs, on the axis and in the
legend alike.

What is drawn against that axis depends on the sweep:

* a training sweep: step time, then bubble fraction, then throughput against peak
  activation memory with its Pareto front (no point has less memory and more
  throughput). Where x is ``pipeline.microbatches`` and a line's schedule has a closed
  form (GPipe and 1F1B: ``(p-1)/(m+p-1)``; interleaved 1F1B), the bubble panel draws it
  for reference: it holds for uniform stage costs and free links.
* a decode sweep (``pipeline.mode: decode``): time per output token, time to first token
  and tokens/s.

Rows with an error are left out, and the title counts them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pipesim.analysis.sweep import pareto_front
from pipesim.plot.style import CRITICAL, FONT, TITLE_FONT, pyplot
from pipesim.schedules import closed_form_of

if TYPE_CHECKING:  # frames come in; pandas itself is not needed to draw them
    import pandas as pd

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
REFERENCE_STYLES = ("--", ":", "-.", (0, (5, 1)), (0, (1, 3)))
BYTE_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))
SUFFIX_UNITS = {
    "_ms": "ms",
    "_us": "µs",
    "_s": "s",
    "_gbps": "GB/s",
    "_gb": "GB",
    ".rate": "requests/s",  # serving.workload.rate
}
MAX_TICKS = 12  # up to this many swept values, each gets its own tick
TRAINING_PANELS = (("step time (ms)", "step_time_ms"), ("bubble fraction", "bubble_fraction"))
DECODE_PANELS = (
    ("time per output token, TPOT (ms)", "tpot_ms"),
    ("time to first token, TTFT (ms)", "ttft_ms"),
    ("throughput (tokens/s)", "tokens_per_second"),
)


@dataclass(frozen=True, slots=True)
class Unit:
    """How a key's values read: divided by ``scale``, followed by ``name`` ('' for none)."""

    name: str = ""
    scale: float = 1.0

    def text(self, value) -> str:
        """``8 GiB``, ``2.5 ms``, ``4``, ``zbv``: a value as the legend writes it."""
        number = numeric_value(value)
        if number is None:
            return str(value)
        shown = f"{number / self.scale:.4g}"
        return f"{shown} {self.name}" if self.name else shown


def numeric_value(value) -> float | None:
    """The value as a float when it is a number (never a flag), else None."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
        return None
    return float(value)


def is_numeric(values: pd.Series) -> bool:
    return all(numeric_value(v) is not None and math.isfinite(v) for v in values)


def unit_of(key: str, values: pd.Series) -> Unit:
    """The unit a key's name says: ``_bytes`` scaled to the largest binary unit its values
    reach, ``_ms`` ms, and so on; none for other keys or values that are not numbers."""
    if not is_numeric(values):
        return Unit()
    if key.endswith("bytes"):
        largest = max((abs(float(v)) for v in values), default=0.0)
        name, scale = next(((n, s) for n, s in BYTE_UNITS if largest >= s), BYTE_UNITS[-1])
        return Unit(name, float(scale))
    for suffix, name in SUFFIX_UNITS.items():
        if key.endswith(suffix):
            return Unit(name)
    return Unit()


def grid_keys(frame: pd.DataFrame) -> list[str]:
    """The sweep's grid keys: the dotted column names (``pipeline.devices``)."""
    return [c for c in frame.columns if "." in str(c)]


def varies(values: pd.Series) -> bool:
    return values.map(str).nunique() > 1


def x_key(frame: pd.DataFrame) -> str:
    """The key on the x axis: the first grid key with numbers that vary, else the first
    that varies, else the first."""
    keys = grid_keys(frame)
    varying = [k for k in keys if varies(frame[k])]
    numeric = [k for k in varying if is_numeric(frame[k])]
    return (numeric or varying or keys)[0]


def line_label(keys: list[str], values: tuple, units: dict[str, Unit]) -> str:
    """``zbv, memory_limit_bytes=6 GiB``: the schedule bare, other keys by their last name
    (the whole key where two share a last name), values in their units."""
    short = [k.rsplit(".", 1)[-1] for k in keys]
    names = [k if short.count(s) > 1 else s for k, s in zip(keys, short, strict=True)]
    parts = [
        units[k].text(v) if k == "pipeline.schedule" else f"{n}={units[k].text(v)}"
        for k, n, v in zip(keys, names, values, strict=True)
    ]
    return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where every row of a sweep goes: its x position, and the line (label) it is on."""

    key: str
    unit: Unit
    x: np.ndarray  # per row
    ticks: tuple[float, ...]  # positions of the ticks, one per swept value (if few)
    tick_labels: tuple[str, ...]
    categorical: bool
    labels: list[str]  # per row


def layout(ok: pd.DataFrame) -> Layout:
    """The x positions (a number's value in its unit; a category's place in grid order)
    and each row's line label."""
    key = x_key(ok)
    units = {k: unit_of(k, ok[k]) for k in grid_keys(ok)}
    values = ok[key].tolist()
    categorical = not is_numeric(ok[key])
    if categorical:
        names = list(dict.fromkeys(str(v) for v in values))
        x = np.array([names.index(str(v)) for v in values], dtype=float)
        ticks, tick_labels = tuple(range(len(names))), tuple(names)
    else:
        x = np.array([float(v) for v in values]) / units[key].scale
        distinct = sorted(set(x.tolist()))
        few = len(distinct) <= MAX_TICKS
        ticks = tuple(distinct) if few else ()
        tick_labels = tuple(f"{v:.4g}" for v in ticks)
    others = [k for k in grid_keys(ok) if k != key and varies(ok[k])]
    labels = [
        line_label(others, row, units) for row in ok[others].itertuples(index=False, name=None)
    ]
    return Layout(key, units[key], x, ticks, tick_labels, categorical, labels)


def lines(where: Layout) -> dict[str, np.ndarray]:
    """Each line's rows (positions into the frame), lines in grid order, rows by x."""
    found: dict[str, list[int]] = {}
    for row, label in enumerate(where.labels):
        found.setdefault(label, []).append(row)
    return {
        label: np.array(rows)[np.argsort(where.x[rows], kind="stable")]
        for label, rows in found.items()
    }


def draw_metric(ax, ok: pd.DataFrame, where: Layout, column: str, ylabel: str) -> dict:
    """``column`` against x, one line per label (markers only over categories); returns
    each label's colour."""
    colours = {}
    groups = lines(where)
    values = ok[column].to_numpy(dtype=float)
    for n, (label, rows) in enumerate(groups.items()):
        # open markers of different shapes: lines that coincide still both show
        (line,) = ax.plot(
            where.x[rows],
            values[rows],
            marker=MARKERS[n % len(MARKERS)],
            markerfacecolor="none",
            markersize=8 - 3 * n / len(groups),
            linestyle="none" if where.categorical else "-",
            label=label,
        )
        colours[label] = line.get_color()
    x_axis(ax, where)
    ax.set_ylabel(ylabel, fontsize=FONT)
    ax.tick_params(labelsize=FONT)
    return colours


def x_axis(ax, where: Layout) -> None:
    """The swept key and its unit; a log scale where positive values span 16x or more; a
    tick at each swept value where there are few."""
    from matplotlib.ticker import FixedLocator, NullLocator

    positive = not where.categorical and bool(where.x.size) and where.x.min() > 0
    if positive and where.x.max() / where.x.min() >= 16:
        powers = all(float(v).is_integer() and math.log2(v).is_integer() for v in where.x)
        ax.set_xscale("log", base=2 if powers else 10)
    if where.ticks:
        ax.xaxis.set_major_locator(FixedLocator(where.ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels(where.tick_labels)
    if where.categorical and len(where.ticks) > 4:
        ax.tick_params(axis="x", labelrotation=30)
    name = f"{where.key} ({where.unit.name})" if where.unit.name else where.key
    ax.set_xlabel(name, fontsize=FONT)


def bubble_closed_form(schedule: str, p: int, v: int, ms: range) -> tuple[tuple, ...]:
    """``((m, bubble fraction), ...)`` of the schedule's closed form, at each ``m`` where it
    holds (none: the schedule has no closed form)."""
    formula = closed_form_of(schedule)
    found = []
    for m in ms if formula is not None else ():
        times = formula(p, m, v, 1.0, 2.0, 0.0, True)  # any F and B: the bubble is the same
        if times is not None and times[0] > 0:
            found.append((m, 1 - times[1] / times[0]))
    return tuple(found)


def closed_form_curves(ok: pd.DataFrame, where: Layout) -> dict[str, tuple]:
    """``label: (m, bubble)`` of the closed form of each line's schedule, where x is the
    microbatch count and the schedule has one; lines that share a curve share a label."""
    shape = ["schedule", "devices", "stages"]
    if where.key != "pipeline.microbatches" or where.categorical or not set(shape) <= set(ok):
        return {}
    ms = range(max(1, int(where.x.min())), int(where.x.max()) + 1)
    shapes = ok[shape].drop_duplicates()
    curves: dict[tuple, list[str]] = {}
    for schedule, p, stages in shapes.itertuples(index=False, name=None):
        v = max(1, int(stages) // max(int(p), 1))
        points = bubble_closed_form(str(schedule), int(p), v, ms)
        names = curves.setdefault((int(p), v, points), []) if points else []
        if points and str(schedule) not in names:
            names.append(str(schedule))
    labelled = {}
    for (p, v, points), names in sorted(curves.items()):
        which = ", ".join(names)
        label = f"(p-1)/(m+p-1), p={p}: {which}" if v == 1 else f"{which}, p={p}, v={v}"
        labelled[label] = tuple(np.array(c, dtype=float) for c in zip(*points, strict=True))
    return labelled


def draw_closed_forms(ax, ok: pd.DataFrame, where: Layout) -> None:
    """The closed forms of ``closed_form_curves``, black, one line style each."""
    curves = closed_form_curves(ok, where)
    for n, (label, (m, bubble)) in enumerate(curves.items()):
        style = REFERENCE_STYLES[n % len(REFERENCE_STYLES)]
        ax.plot(m, bubble, color="black", linestyle=style, linewidth=0.8, label=label)
    if curves:
        ax.legend(
            handles=[line for line in ax.get_lines() if line.get_label() in curves],
            fontsize=FONT - 1,
            title="closed form: uniform costs, free links",
            title_fontsize=FONT - 1,
        )


def draw_tradeoff(ax, ok: pd.DataFrame, where: Layout, colours: dict[str, str]) -> None:
    """Throughput against peak activation memory, coloured as the lines, front in red;
    against x instead where no point holds any activation memory."""
    import pandas as pd

    memory = ok["peak_activation_bytes_max"].to_numpy(dtype=float)
    if not np.nanmax(memory, initial=0.0) > 0:
        draw_metric(ax, ok, where, "samples_per_second", "throughput (samples/s)")
        return
    unit = unit_of("peak_activation_bytes", pd.Series(memory))
    gains = ok["samples_per_second"].to_numpy(dtype=float)
    ax.scatter(
        memory / unit.scale, gains, s=22, c=[colours.get(label, "0.5") for label in where.labels]
    )
    front = pareto_front(ok)
    order = np.argsort(memory[front])
    ax.plot(
        memory[front][order] / unit.scale,
        gains[front][order],
        "o-",
        color=CRITICAL,
        markerfacecolor="none",
        label="Pareto front",
    )
    ax.set_xlabel(f"peak activation memory per device ({unit.name})", fontsize=FONT)
    ax.set_ylabel("throughput (samples/s)", fontsize=FONT)
    ax.tick_params(labelsize=FONT)
    ax.legend(fontsize=FONT - 1, title="points: colours of the lines", title_fontsize=FONT - 1)


def heading(frame: pd.DataFrame, ok: pd.DataFrame) -> str:
    """``decode-pipeline-fill: 8 points`` (and how many did not run)."""
    scenarios = frame["scenario"].dropna() if "scenario" in frame.columns else ()
    names = list(dict.fromkeys(str(s) for s in scenarios))
    failed = len(frame) - len(ok)
    text = f"{', '.join(names) + ': ' if names else ''}{len(frame)} points"
    return text + (f", {failed} did not run (see the error column)" if failed else "")


def sweep_figure(frame: pd.DataFrame):
    """The figure of a sweep table (``pipesim sweep --plot``): the metric the sweep is
    about against the first numeric grid key that varies, one line per combination of
    the other keys that vary (see the module's docstring). Error rows are left out."""
    plt = pyplot()
    ok = frame[frame["error"].fillna("") == ""] if "error" in frame else frame
    ok = ok.reset_index(drop=True)
    decode = "ttft_ms" in ok and bool(ok["ttft_ms"].notna().any())
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8), layout="constrained")
    fig.suptitle(heading(frame, ok), fontsize=TITLE_FONT)
    if ok.empty or not grid_keys(ok):
        fig.suptitle("no point of the sweep ran (see the error column)", fontsize=TITLE_FONT)
        return fig
    where = layout(ok)
    if decode:
        for ax, (ylabel, column) in zip(axes, DECODE_PANELS, strict=True):
            colours = draw_metric(ax, ok, where, column, ylabel)
            if where.key == "pipeline.microbatches":
                ax.set_xlabel(f"{where.key} (groups in flight)", fontsize=FONT)
    else:
        step = "step_time_ms" if "step_time_ms" in ok else "makespan_ms"
        panels = ((TRAINING_PANELS[0][0], step), TRAINING_PANELS[1])
        for ax, (ylabel, column) in zip(axes, panels, strict=False):
            colours = draw_metric(ax, ok, where, column, ylabel)
        axes[1].set_ylim(bottom=0)
        draw_closed_forms(axes[1], ok, where)
        draw_tradeoff(axes[2], ok, where, colours)
    if any(colours):
        handles = [line for line in axes[0].get_lines() if line.get_label() in colours]
        fig.legend(
            handles=handles,
            loc="outside lower center",
            ncol=min(len(handles), 5),
            fontsize=FONT,
            frameon=False,
        )
    return fig
