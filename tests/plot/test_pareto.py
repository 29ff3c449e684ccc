"""The plan's Pareto figure: labels of crowded front points never overlap."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from pipesim.plot.pareto import pareto_figure

GIB = 2**30


def row(n: int, step_ms: float, memory_gib: float):
    """A plan row as the figure reads it: a candidate, a step time, a peak memory."""
    candidate = SimpleNamespace(
        tensor=2 ** (n % 3),
        devices=8,
        data=2,
        schedule=("1f1b", "zbv", "zb-h1")[n % 3],
        microbatch_size=1 + n % 2,
        recompute=n % 2 == 0,
    )
    return SimpleNamespace(
        candidate=candidate, step_time_ms=step_ms, peak_memory_bytes=memory_gib * GIB
    )


def crowded_plan():
    """Twelve front points packed into one corner, and one far away that wins."""
    front = [row(n, 100 - 0.3 * n, 10 + 0.05 * n) for n in range(12)] + [row(20, 50, 30)]
    return SimpleNamespace(
        points=tuple((r.step_time_ms, r.peak_memory_bytes) for r in front),
        pareto=front,
        results=[front[-1]],
        capacity_bytes=80 * GIB,
        usable_bytes=76 * GIB,
        scored=len(front),
    )


def test_crowded_front_labels_are_disjoint_inside_the_axes_and_clear_of_the_legend():
    fig = pareto_figure(crowded_plan())
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.axes
    boxes = [text.get_window_extent(renderer) for text in ax.texts]
    assert ax.texts[0].get_text() == "TP4 PP8 DP2 zb-h1 b1 rc"  # the fastest, placed first
    assert 2 <= len(boxes) < 6  # some labels of the crowd had no free spot: left out
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b)
    frame, legend = ax.get_window_extent(renderer), ax.get_legend().get_window_extent(renderer)
    for box in boxes:
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1
        assert frame.y0 <= box.y0 and box.y1 <= frame.y1
        assert not box.overlaps(legend)


def test_a_spread_front_keeps_every_label_it_picks():
    front = [row(n, 100 - 3 * n, 10 + 0.3 * n) for n in range(12)]
    plan = SimpleNamespace(
        points=(), pareto=front, results=[front[-1]], capacity_bytes=0, scored=12
    )
    texts = [t.get_text() for t in pareto_figure(plan).axes[0].texts]
    assert len(texts) == 6  # every second point of twelve, from the fastest
    assert texts[0] == "TP4 PP8 DP2 zb-h1 b2"
