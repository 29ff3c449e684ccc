"""The memory panel: static plus activations per device, in GiB, against the capacity."""

from __future__ import annotations

import numpy as np

from pipesim.plot.figures import gantt_figure
from tests.plot.builders import GIB, run


def memory_axes(fig):
    (ax,) = [ax for ax in fig.axes if "GiB" in ax.get_ylabel()]
    return ax


def device_lines(ax):
    return [line for line in ax.get_lines() if line.get_label().startswith("device")]


def test_panel_shows_static_plus_activations_in_gib_and_the_capacity_line():
    trace, report, memory = run(
        "1f1b", 3, 6, static_gib=2.0, forward_ms=1, backward_ms=2, activation_memory_bytes=GIB / 2
    )
    fig = gantt_figure(trace, report, memory, capacity_bytes=8 * GIB)
    ax = memory_axes(fig)
    assert "static + activations" in ax.get_ylabel()
    lines = device_lines(ax)
    assert len(lines) == 3
    for d, line in enumerate(lines):
        gib = np.asarray(line.get_ydata(), dtype=float)
        assert gib[0] == 2.0  # static alone before the first forward
        assert gib.max() == report.per_device[d].peak_memory_bytes / GIB  # the peak is kept
    capacity = [line for line in ax.get_lines() if line.get_label().startswith("GPU memory")]
    assert len(capacity) == 1 and list(capacity[0].get_ydata()) == [8.0, 8.0]
    assert "GPU memory 8 GiB" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_no_capacity_line_when_the_capacity_is_unknown():
    trace, report, memory = run(
        "1f1b", 2, 4, forward_ms=1, backward_ms=2, activation_memory_bytes=GIB
    )
    ax = memory_axes(gantt_figure(trace, report, memory))
    assert ax.get_ylabel().startswith("activations")
    assert not [line for line in ax.get_lines() if line.get_label().startswith("GPU memory")]


def test_many_devices_show_the_spread_whose_top_is_the_highest_peak():
    trace, report, memory = run(
        "1f1b", 12, 12, forward_ms=1, backward_ms=2, activation_memory_bytes=GIB / 4
    )
    ax = memory_axes(gantt_figure(trace, report, memory))
    assert not device_lines(ax)  # no twelve-line tangle
    (highest,) = [line for line in ax.get_lines() if line.get_label() == "highest"]
    peak = max(d.peak_activation_bytes for d in report.per_device) / GIB
    assert np.max(highest.get_ydata()) == peak
