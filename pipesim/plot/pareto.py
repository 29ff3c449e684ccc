"""The plan's Pareto front: step time against peak memory per device.

Every scored candidate of ``pipesim plan`` is a grey dot at (peak memory on its fullest
GPU, step time). The front joins the candidates that no other beats on both: for each
memory budget, the fastest configuration that fits in it. Its points are labelled with
their layout and schedule, the winner is marked, and the GPU's memory is a vertical line:
everything right of it was pruned before scoring.

Front points often crowd together, so labels are placed once the figure is laid out: each
tries a few spots around its point and takes the first where it overlaps no label placed
before it, nor the legend, and stays inside the axes; a label with no such spot is left
out rather than written over another (the fastest points are placed first).
"""

from __future__ import annotations

from pipesim.analysis.plan import Plan, PlanRow
from pipesim.plot.style import CRITICAL, FONT, LABEL_FONT, pyplot

GIB = 2**30
MAX_LABELS = 6  # front points labelled at most, spread along it from the fastest
# where a label may go, in points from its dot: (dx, dy, horizontal alignment), nearest first
LABEL_SPOTS = (
    (5, 4, "left"),
    (5, -11, "left"),
    (-5, 4, "right"),
    (-5, -11, "right"),
    (5, 14, "left"),
    (-5, 14, "right"),
    (5, -21, "left"),
    (-5, -21, "right"),
)


def _label(row: PlanRow) -> str:
    """``TP4 PP8 DP2 zbv b2``: the layout, the schedule and the microbatch size."""
    c = row.candidate
    return f"TP{c.tensor} PP{c.devices} DP{c.data} {c.schedule} b{c.microbatch_size}" + (
        " rc" if c.recompute else ""
    )


def pareto_figure(plan: Plan, capacity_bytes: float | None = None, title: str = ""):
    """A figure of every scored candidate and the Pareto front of ``plan``, with the GPU's
    memory (``capacity_bytes``, by default the plan's; 0: none) as a vertical line."""
    if capacity_bytes is None:
        capacity_bytes = plan.capacity_bytes
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.0, 5.0), layout="constrained")
    if plan.points:
        times, peaks = zip(*plan.points, strict=True)
        ax.scatter(
            [p / GIB for p in peaks],
            times,
            s=6,
            color="0.75",
            label="scored candidates",
            rasterized=len(times) > 2000,
        )
    front = sorted(plan.pareto, key=lambda row: row.peak_memory_bytes)
    if front:
        xs = [row.peak_memory_bytes / GIB for row in front]
        ys = [row.step_time_ms for row in front]
        ax.step(xs, ys, where="post", color="C0", linewidth=1.2)
        ax.plot(xs, ys, "o", color="C0", label="Pareto front")
    if plan.results:
        best = plan.results[0]
        ax.plot(
            [best.peak_memory_bytes / GIB],
            [best.step_time_ms],
            "*",
            markersize=14,
            color=CRITICAL,
            label="winner",
        )
    if capacity_bytes:
        ax.axvline(
            capacity_bytes / GIB,
            color="0.3",
            linestyle="--",
            linewidth=1,
            label=f"GPU memory ({capacity_bytes / GIB:.0f} GiB)",
        )
    if capacity_bytes and 0 < plan.usable_bytes < capacity_bytes:
        ax.axvline(
            plan.usable_bytes / GIB,
            color="0.3",
            linestyle=":",
            linewidth=1,
            label=f"usable ({plan.usable_bytes / GIB:.1f} GiB, what the plan pruned against)",
        )
    ax.set_xlabel("peak memory per device (GiB)", fontsize=FONT)
    ax.set_ylabel("step time (ms)", fontsize=FONT)
    ax.tick_params(labelsize=FONT)
    ax.legend(fontsize=FONT, loc="upper right")
    ax.set_title(
        title or f"{plan.scored:,} candidates scored, {len(front)} on the front", fontsize=FONT + 1
    )
    stride = max(1, -(-len(front) // MAX_LABELS))
    place_labels(ax, front[::-1][::stride])  # the fastest first, evenly along the front
    return fig


def place_labels(ax, rows: list[PlanRow]) -> list:
    """Annotate ``rows`` in order, each at the first of ``LABEL_SPOTS`` where it stays
    inside the axes and overlaps neither the legend nor a label placed before it; a row
    with no free spot goes unlabelled. Returns the annotations written."""
    fig = ax.figure
    engine = fig.get_layout_engine()
    if engine is not None:
        engine.execute(fig)  # place on the final layout: it does not move afterwards
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    legend = ax.get_legend()
    taken = [legend.get_window_extent(renderer)] if legend is not None else []
    placed = []
    for row in rows:
        point = (row.peak_memory_bytes / GIB, row.step_time_ms)
        for dx, dy, align in LABEL_SPOTS:
            text = ax.annotate(
                _label(row),
                point,
                xytext=(dx, dy),
                textcoords="offset points",
                ha=align,
                fontsize=LABEL_FONT,
                annotation_clip=False,
            )
            box = text.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1
            inside = inside and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(other) for other in taken):
                taken.append(box)
                placed.append(text)
                break
            text.remove()
    return placed
