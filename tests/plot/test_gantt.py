"""Gantt figures as a reader sees them: colours, chunks, labels, legend, ticks, size."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.image import AxesImage

from pipesim.analysis.critical import explain
from pipesim.plot.busy import busy_fractions, kind_bars
from pipesim.plot.figures import (
    COLOURS,
    crosscheck_figure,
    gantt_figure,
    save_figure,
    stacked_gantt_figure,
)
from pipesim.plot.style import MAX_HEIGHT_IN, SAVE_DPI
from pipesim.schedules import get_schedule
from pipesim.sim.trace import KIND_CODES
from tests.plot.builders import run, synthetic, synthetic_report


def drawn(fig):
    fig.canvas.draw()
    return fig


def legend_texts(fig) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def boxes(ax) -> list[PolyCollection]:
    return [c for c in ax.collections if isinstance(c, PolyCollection)]


def test_every_kind_has_its_own_colour_far_from_every_other():
    assert set(COLOURS) == set(KIND_CODES)
    rgb = {k: [int(v[i : i + 2], 16) for i in (1, 3, 5)] for k, v in COLOURS.items()}
    closest = min(
        (math.dist(rgb[a], rgb[b]), a, b) for a, b in itertools.combinations(KIND_CODES, 2)
    )
    assert closest[0] >= 90, closest  # I and SEND_B were 20 apart


def test_interleaved_chunks_are_hatched_and_labelled_microbatch_c_chunk(interleaved):
    trace, report, memory = interleaved
    fig = gantt_figure(trace, report, memory)
    gantt = fig.axes[0]
    hatched = {c.get_hatch() for c in boxes(gantt)}
    assert None in hatched or "" in hatched  # chunk 0 plain
    assert hatched - {None, ""}  # chunk 1 hatched
    labels = {t.get_text() for t in gantt.texts}
    assert {"0c0", "0c1", "3c0", "3c1"} <= labels
    assert not [text for text in labels if "." in text]  # never read as a decimal
    assert {"chunk 0", "chunk 1"} <= set(legend_texts(fig))
    assert fig.legends[0].get_title().get_text() == (
        "box labels: microbatch, c = chunk (3c1 = microbatch 3 on chunk 1)"
    )


def test_plain_schedules_label_microbatches_without_chunks():
    trace, report, memory = run("1f1b", 2, 4, forward_ms=1, backward_ms=2)
    fig = gantt_figure(trace, report, memory)
    assert {t.get_text() for t in fig.axes[0].texts} == {"0", "1", "2", "3"}
    assert not [t for t in legend_texts(fig) if t.startswith("chunk")]


def test_labels_stay_inside_their_boxes_and_a_kind_is_numbered_whole_or_not_at_all():
    trace, report, memory = run("1f1b", 4, 24, forward_ms=1, backward_ms=4)
    fig = drawn(gantt_figure(trace, report, memory))
    gantt = fig.axes[0]
    extents = [t.get_window_extent() for t in gantt.texts]
    to_pixels = gantt.transData.transform
    labelled_kinds = []
    for text, extent in zip(gantt.texts, extents, strict=True):
        x, y = text.get_position()
        (row,) = np.flatnonzero(
            (trace.start < x) & (x < trace.end) & (trace.device == round(y)) & (trace.lane == 0)
        )
        left, right = to_pixels([(trace.start[row], 0), (trace.end[row], 0)])[:, 0]
        assert left <= extent.x0 and extent.x1 <= right, text.get_text()
        labelled_kinds.append(KIND_CODES[trace.kind[row]])
    # B boxes (4 ms) hold two digits; F boxes (1 ms) are too narrow for any
    assert labelled_kinds.count("B") == 4 * 24 and "F" not in labelled_kinds
    for a, b in itertools.combinations(extents, 2):
        assert not a.overlaps(b)


def test_a_large_chart_drops_its_labels():
    trace, report, memory = run(
        "zbv", 4, 48, 2, forward_ms=1, backward_input_ms=1, backward_weight_ms=1
    )
    assert not gantt_figure(trace, report, memory).axes[0].texts


def test_legend_is_readable_inside_the_figure_below_the_axes(interleaved):
    fig = drawn(gantt_figure(*interleaved))
    renderer = fig.canvas.get_renderer()
    (legend,) = fig.legends
    box, page = legend.get_window_extent(renderer), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
    lowest = min(ax.get_tightbbox(renderer).y0 for ax in fig.axes)
    assert box.y1 <= lowest + 1  # under every axes, not over the title
    assert min(t.get_fontsize() for t in legend.get_texts()) >= 8
    assert {"F", "B"} <= set(legend_texts(fig))


def visible_ticks(ax) -> list[str]:
    return [t.get_text() for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]


def test_every_panel_shows_time_tick_numbers(interleaved):
    trace, report, memory = interleaved
    fig = drawn(gantt_figure(trace, report, memory))
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert len(visible_ticks(ax)) >= 3
    stacked = drawn(stacked_gantt_figure([(trace, report), (trace, report)]))
    for ax in stacked.axes:
        assert len(visible_ticks(ax)) >= 3


def test_crosscheck_figure_has_a_legend_of_kinds(interleaved):
    trace, report, _ = interleaved
    fig = crosscheck_figure(trace, trace, "interleaved")
    assert {"F", "B"} <= set(legend_texts(fig))
    assert [ax.get_title() for ax in fig.axes] == [
        "interleaved: measured",
        "interleaved: simulated",
    ]


def test_critical_path_is_outlined_from_dicts_or_objects():
    trace, report, memory = run(
        "gpipe", 3, 4, forward_ms=1, backward_ms=2, latency_ms=0.5, activation_bytes=1e6
    )
    schedule = get_schedule("gpipe", 3, 4, 1)
    path = explain(trace, schedule, None).critical_path
    as_objects = [SimpleNamespace(**dict(e)) for e in path]
    for given in (path, as_objects):
        fig = gantt_figure(trace, report, memory, critical_path=given)
        outlined = [c for c in boxes(fig.axes[0]) if len(c.get_facecolor()) == 0]
        assert len(outlined) == 1 and len(outlined[0].get_paths()) == len(path)
        assert "critical path" in legend_texts(fig)


@pytest.mark.parametrize("devices", [400, 4000])
def test_many_devices_aggregate_into_a_strip_under_the_height_cap(devices, interleaved, tmp_path):
    trace, memory = synthetic(devices, 8)
    report = synthetic_report(trace, interleaved[1])
    fig = gantt_figure(trace, report, memory)
    gantt = fig.axes[0]
    assert fig.get_size_inches()[1] * SAVE_DPI <= MAX_HEIGHT_IN * SAVE_DPI
    assert [type(a) for a in gantt.images] == [AxesImage]
    assert not boxes(gantt) and not gantt.texts  # no artist per action
    assert f"{devices} devices" in gantt.get_title() and "busy" in gantt.get_title()
    if devices < 4000:
        return
    path = tmp_path / "big.png"
    save_figure(fig, str(path))
    header = path.read_bytes()[16:24]
    width, height = int.from_bytes(header[:4], "big"), int.from_bytes(header[4:], "big")
    assert width == 11 * SAVE_DPI and height <= MAX_HEIGHT_IN * SAVE_DPI


def direct_busy(trace, bins, group):
    """Overlap of every compute row with every bin, summed: the definition."""
    width = trace.makespan_ms / bins
    rows = -(-trace.devices // group)
    out = np.zeros((rows, len(KIND_CODES), bins))
    for r in np.flatnonzero(trace.lane == 0):
        for b in range(bins):
            lo, hi = b * width, (b + 1) * width
            overlap = max(0.0, min(hi, trace.end[r]) - max(lo, trace.start[r]))
            out[trace.device[r] // group, trace.kind[r], b] += overlap
    members = np.minimum(group, trace.devices - np.arange(rows) * group)
    return out / (width * members[:, None, None])


@pytest.mark.parametrize("group", [1, 2])
def test_busy_fractions_equal_the_overlap_of_rows_and_bins(group):
    trace, _, _ = run("zb-h1", 5, 6, forward_ms=1.3, backward_input_ms=0.7, backward_weight_ms=0.9)
    assert np.allclose(busy_fractions(trace, 37, group), direct_busy(trace, 37, group))


def tick_boxes(ax):
    return [t.get_window_extent() for t in ax.get_yticklabels() if t.get_text()]


def test_stacked_charts_name_every_kth_device_without_labels_touching(interleaved):
    results = []
    for devices in (32, 32, 16, 32, 8):
        trace, _ = synthetic(devices, 8)
        results.append((trace, synthetic_report(trace, interleaved[1])))
    fig = drawn(stacked_gantt_figure(results))
    for ax, (trace, _) in zip(fig.axes, results, strict=True):
        names = [t.get_text() for t in ax.get_yticklabels()]
        assert names[0] == "device 0" and len(names) >= 2
        step = int(names[1].split()[1])
        assert names == [f"device {d}" for d in range(0, trace.devices, step)]
        for a, b in itertools.combinations(tick_boxes(ax), 2):
            assert not a.overlaps(b), (a, b)
    assert len(fig.axes[0].get_yticklabels()) < 32  # thinned: 32 names would collide
    # with room, every device is named
    single = drawn(gantt_figure(*interleaved))
    assert [t.get_text() for t in single.axes[0].get_yticklabels()] == ["device 0", "device 1"]


def test_strip_ticks_do_not_touch(interleaved):
    trace, memory = synthetic(400, 8)
    fig = drawn(gantt_figure(trace, synthetic_report(trace, interleaved[1]), memory))
    boxes_ = tick_boxes(fig.axes[0])
    assert len(boxes_) >= 10
    for a, b in itertools.combinations(boxes_, 2):
        assert not a.overlaps(b)


def test_a_strip_cell_is_a_bar_of_pure_kind_colours_never_a_blend(interleaved):
    fractions = np.zeros((1, len(KIND_CODES), 1))
    fractions[0, KIND_CODES.index("F"), 0] = 0.25
    fractions[0, KIND_CODES.index("B"), 0] = 0.5
    bar = kind_bars(fractions, columns=8)[0]
    rgb = {k: tuple(int(COLOURS[k][i : i + 2], 16) / 255 for i in (1, 3, 5)) for k in COLOURS}
    assert [tuple(c) for c in bar] == [rgb["F"]] * 2 + [rgb["B"]] * 4 + [(1.0, 1.0, 1.0)] * 2
    trace, memory = synthetic(400, 8)
    fig = gantt_figure(trace, synthetic_report(trace, interleaved[1]), memory)
    image = np.asarray(fig.axes[0].images[0].get_array()).reshape(-1, 3)
    allowed = {rgb[k] for k in KIND_CODES} | {(1.0, 1.0, 1.0)}
    assert {tuple(c) for c in np.unique(image, axis=0)} <= allowed
    assert "white: idle" in fig.legends[0].get_title().get_text()
    assert "each cell a bar" in fig.axes[0].get_title()


def test_the_memory_panel_draws_what_the_oom_check_weighs_against_the_usable_line():
    """With runtime memory, each device's highest point on the panel is its reported peak
    (static + activations + runtime), and the usable line sits at capacity x (1 - headroom)."""
    from pipesim.analysis.run import run_scenario
    from pipesim.plot.memory import Runtime
    from pipesim.scenario.build import load_scenario

    scenario = load_scenario(
        "scenarios/llama-70b-4x8-h100.yaml",
        ["pipeline.schedule=gpipe", "pipeline.virtual_stages=1"],
    )
    result = run_scenario(scenario)
    books = scenario.accounting
    runtime = Runtime(books.runtime_memory_bytes, books.fragmentation, books.usable_bytes)
    fig = gantt_figure(
        result.trace,
        result.report,
        result.memory,
        capacity_bytes=books.memory_capacity_bytes,
        runtime=runtime,
    )
    panel = fig.axes[1]
    curves = {line.get_label(): max(line.get_ydata()) for line in panel.lines}
    for d, device in enumerate(result.report.per_device):
        assert curves[f"device {d}"] == pytest.approx(device.peak_memory_bytes / 2**30, rel=1e-12)
    usable = [line for line in panel.lines if line.get_label().startswith("usable")]
    assert len(usable) == 1
    assert usable[0].get_ydata()[0] == pytest.approx(80 * 0.95)
    assert "runtime" in panel.get_ylabel()


def test_a_moe_step_draws_its_all_to_alls_in_a_band_of_their_own():
    """The combined-1F1B step of tests/sim/test_sublayers.py: its 24 dispatches and
    combines (device 0: 6 lone passes of 2; device 1: 2 lone passes of 2 and 2 units of 4)
    as one collection in the all-to-all colour, named in the legend; none without parts."""
    from matplotlib.colors import to_hex

    from pipesim.plot.style import ALL_TO_ALL
    from pipesim.sim.engine import simulate
    from pipesim.sim.metrics import build_report
    from pipesim.sim.sublayer_rows import sublayer_rows
    from tests.sim.test_sublayers import moe_costs

    schedule = get_schedule("1f1b-a2a-overlap", 2, 3)
    costs = moe_costs(2)
    trace = simulate(schedule, costs)
    report = build_report(trace, schedule, costs)
    parts = sublayer_rows(trace, schedule, costs)
    fig = drawn(gantt_figure(trace, report, sublayers=parts))
    bands = [c for c in boxes(fig.axes[0]) if to_hex(c.get_facecolor()[0]) == ALL_TO_ALL.lower()]
    assert len(bands) == 1 and len(bands[0].get_paths()) == 24
    assert "all-to-all" in legend_texts(fig)
    plain = drawn(gantt_figure(trace, report))
    assert "all-to-all" not in legend_texts(plain)
