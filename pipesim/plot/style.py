"""The look shared by every pipesim figure: colours, sizes, the legend, matplotlib itself.

A figure is read by kind first (what runs), then by chunk (where it runs): each kind has
its own colour, far from every other kind's, and each model chunk of an interleaved or
V-shaped schedule its own hatch. Sizes are chosen for the saved image (``SAVE_DPI``), and
a figure never grows past ``MAX_HEIGHT_IN`` however many devices it shows.

matplotlib is imported inside functions (with the Agg backend when no display is set),
so importing pipesim stays light and the core never touches it.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipesim.sim.metrics import Report
from pipesim.sim.trace import BESIDE_LABELS, KIND_CODES

# One colour per kind (tab10 hues): every pair at least 90 apart in RGB (0-255 units).
# Transfers take a light tint of the compute kind they carry.
COLOURS = {
    "F": "#1F77B4",
    "B": "#2CA02C",
    "I": "#BCBD22",
    "W": "#9467BD",
    "OVERLAP_F_B": "#FF7F0E",
    "SEND_F": "#AEC7E8",
    "SEND_B": "#98DF8A",
    "ALLREDUCE": "#8C564B",
    "UNSHARD": "#00E5E5",
    "RESHARD": "#CC00CC",
    "OPTIMIZER": "#F781BF",
}
# Legend words where a kind's code would not say what it is (end-of-step work)
LEGEND_LABELS = {KIND_CODES[kind]: label for kind, label in BESIDE_LABELS.items()}
CRITICAL = "#D62728"
ALL_TO_ALL = "#393B79"  # a MoE step's dispatch and combine, on the all-to-all stream
CAPACITY = "#000000"
CHUNK_HATCHES = ("", "///", "...", "xxx", "\\\\\\", "+++", "oo", "**")

SAVE_DPI = 120
WIDTH_IN = 11.0
MAX_HEIGHT_IN = 15.0  # 1800 px at SAVE_DPI, however many devices
ROW_IN = 0.42  # one device row of a Gantt chart while they fit
MAX_GANTT_IN = 8.5  # the Gantt axes never grow past this
MAX_BOX_DEVICES = 64  # past this, rows become a busy-fraction strip
FONT = 9  # legends, ticks, axis labels
LABEL_FONT = 7  # numbers inside boxes
TITLE_FONT = 10


def pyplot():
    """matplotlib.pyplot, on the Agg backend unless a file or notebook backend is set."""
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


def new_figure(height_in: float, rows: int, height_ratios: list[float] | None = None):
    """A figure of ``WIDTH_IN`` x ``height_in`` (capped) with ``rows`` axes in one column
    that share the time axis; every row keeps its own tick numbers."""
    plt = pyplot()
    fig, axes = plt.subplots(
        rows,
        1,
        figsize=(WIDTH_IN, min(height_in, MAX_HEIGHT_IN)),
        sharex=True,
        squeeze=False,
        layout="constrained",
        gridspec_kw={"height_ratios": height_ratios} if height_ratios else None,
    )
    column = [row[0] for row in axes]
    for ax in column:
        ax.tick_params(labelbottom=True, labelsize=FONT)
    return fig, column


def gantt_height_in(devices: int) -> float:
    """Height of one Gantt axes: a row per device up to ``MAX_GANTT_IN``."""
    if devices > MAX_BOX_DEVICES:
        return MAX_GANTT_IN
    return min(max(ROW_IN * devices, 1.0), MAX_GANTT_IN)


def title(report: Report) -> str:
    return (
        f"{report.scenario} - {report.schedule}: makespan {report.makespan_ms:.3f} ms, "
        f"bubble fraction {report.bubble_fraction:.4f}"
    )


def text_colour(colour: str) -> str:
    """Black on light fills, white on dark ones (relative luminance)."""
    red, green, blue = (int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return "black" if 0.2126 * red + 0.7152 * green + 0.0722 * blue > 0.55 else "white"


def set_hatch(artist, hatch: str) -> None:
    """Hatch in white (the box edges' colour) where matplotlib lets the hatch colour be set."""
    artist.set_hatch(hatch or None)
    if hatch and hasattr(artist, "set_hatchcolor"):
        artist.set_hatchcolor("white")
    if hatch and hasattr(artist, "set_hatch_linewidth"):
        artist.set_hatch_linewidth(0.7)


def kind_handles(kinds: Iterable[str]) -> list:
    """Legend patches for the given kinds, in the IR's kind order; end-of-step work by
    what it is (``gradient all-reduce``, ``optimizer step``)."""
    from matplotlib.patches import Patch

    present = set(kinds)
    return [
        Patch(facecolor=COLOURS[k], label=LEGEND_LABELS.get(k, k))
        for k in KIND_CODES
        if k in present
    ]


def chunk_handles(chunks: int) -> list:
    """Legend patches for the hatches of chunks 0 .. chunks-1."""
    from matplotlib.patches import Patch

    handles = []
    for chunk in range(chunks):
        patch = Patch(facecolor="#7F7F7F", edgecolor="white", label=f"chunk {chunk}")
        set_hatch(patch, CHUNK_HATCHES[chunk % len(CHUNK_HATCHES)])
        handles.append(patch)
    return handles


def critical_handle():
    from matplotlib.lines import Line2D

    return Line2D([], [], color=CRITICAL, linewidth=1.6, label="critical path")


def all_to_all_handle():
    from matplotlib.patches import Patch

    return Patch(facecolor=ALL_TO_ALL, label="all-to-all")


def figure_legend(fig, handles: list, note: str = "") -> None:
    """One legend for the whole figure, under the axes, in a readable size; ``note``
    (what the numbers in the boxes mean) is its title."""
    if not handles:
        return
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncol=min(len(handles), 8),
        fontsize=FONT,
        title=note or None,
        title_fontsize=FONT,
        frameon=False,
    )
