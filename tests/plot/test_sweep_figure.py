"""The sweep figure draws what the sweep is about against the swept key, in readable
units, every combination of the other keys as its own line, never an average."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pandas as pd

from pipesim.analysis.sweep import parse_grid, run_sweep
from pipesim.plot.figures import sweep_figure
from pipesim.scenario.build import read_mapping

GIB = 2**30
GPIPE = str(Path(__file__).parents[2] / "scenarios" / "gpipe-vs-1f1b.yaml")


def frame(**grid) -> pd.DataFrame:
    """A training sweep table over ``grid`` (dotted keys), every column made up per point."""
    keys = list(grid)
    rows = []
    for n, values in enumerate(itertools.product(*grid.values())):
        point = dict(zip(keys, values, strict=True))
        m, p = point.get("pipeline.microbatches", 8), point.get("pipeline.devices", 4)
        rows.append(
            {
                **point,
                "scenario": "made-up",
                "schedule": point.get("pipeline.schedule", "1f1b"),
                "devices": p,
                "stages": p,
                "microbatches": m,
                "makespan_ms": 10.0 + n,
                "step_time_ms": 10.5 + n,
                "bubble_fraction": (1.0 + n / 100) * (p - 1) / (m + p - 1),
                "samples_per_second": 100.0 * m + n,
                "peak_activation_bytes_max": float(2**20 * m * p),
                "error": "",
            }
        )
    return pd.DataFrame(rows)


def point_lines(ax):
    """The lines of swept points (not the closed forms, which are black)."""
    return [line for line in ax.get_lines() if line.get_color() != "black"]


def legend_texts(fig) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def all_texts(fig) -> list[str]:
    """Every legend entry, tick label and axis label of the figure, as drawn."""
    fig.canvas.draw()
    texts = legend_texts(fig)
    for ax in fig.axes:
        texts += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        texts += [ax.get_xlabel(), ax.get_ylabel()]
        if ax.get_legend():
            texts += [t.get_text() for t in ax.get_legend().get_texts()]
    return texts


def test_two_keys_one_line_per_value_of_the_second_step_time_against_the_first():
    table = frame(**{"pipeline.microbatches": [4, 8, 16], "pipeline.devices": [2, 4, 8]})
    fig = sweep_figure(table)
    step, bubble, _ = fig.axes
    assert step.get_xlabel() == "pipeline.microbatches"
    assert step.get_ylabel() == "step time (ms)" and bubble.get_ylabel() == "bubble fraction"
    lines = point_lines(step)
    assert [line.get_label() for line in lines] == ["devices=2", "devices=4", "devices=8"]
    assert legend_texts(fig) == ["devices=2", "devices=4", "devices=8"]
    for line, bubble_line, p in zip(lines, point_lines(bubble), (2, 4, 8), strict=True):
        own = table[table["pipeline.devices"] == p]
        assert list(line.get_xdata()) == [4, 8, 16]
        assert list(line.get_ydata()) == own["step_time_ms"].to_list()  # its points, no mean
        assert list(bubble_line.get_ydata()) == own["bubble_fraction"].to_list()
    closed = [line.get_label() for line in bubble.get_lines() if line.get_color() == "black"]
    assert closed == [f"(p-1)/(m+p-1), p={p}: 1f1b" for p in (2, 4, 8)]


def test_a_memory_limit_sweep_is_drawn_against_the_limit_in_gib():
    limits = [8 * GIB, 7 * GIB, 6 * GIB, 5 * GIB, 4 * GIB]
    grid = {"pipeline.schedule": ["zb-auto", "v-auto"], "pipeline.memory_limit_bytes": limits}
    table = frame(**grid)
    fig = sweep_figure(table)
    step = fig.axes[0]
    assert step.get_xlabel() == "pipeline.memory_limit_bytes (GiB)"
    assert [t.get_text() for t in step.get_xticklabels()] == ["4", "5", "6", "7", "8"]
    lines = point_lines(step)
    assert [line.get_label() for line in lines] == ["zb-auto", "v-auto"]
    for line in lines:
        own = table[table["pipeline.schedule"] == line.get_label()].iloc[::-1]
        assert list(line.get_xdata()) == [4.0, 5.0, 6.0, 7.0, 8.0]
        assert list(line.get_ydata()) == own["step_time_ms"].to_list()
    assert not [line for line in fig.axes[1].get_lines() if line.get_color() == "black"]
    assert not [t for t in all_texts(fig) if re.search(r"\d{5,}", t)]  # no raw byte counts


def test_byte_values_of_the_line_key_read_in_their_unit_in_the_legend():
    grid = {"pipeline.microbatches": [4, 8], "pipeline.memory_limit_bytes": [3 * 2**29, GIB]}
    fig = sweep_figure(frame(**grid))
    assert legend_texts(fig) == ["memory_limit_bytes=1.5 GiB", "memory_limit_bytes=1 GiB"]
    assert not [t for t in all_texts(fig) if re.search(r"\d{5,}", t)]


def test_closed_forms_only_for_schedules_that_have_one_and_only_against_microbatches():
    grid = {"pipeline.microbatches": [4, 8], "pipeline.schedule": ["gpipe", "zb-h1", "1f1b"]}
    bubble = sweep_figure(frame(**grid)).axes[1]
    closed = [line for line in bubble.get_lines() if line.get_color() == "black"]
    assert [line.get_label() for line in closed] == ["(p-1)/(m+p-1), p=4: gpipe, 1f1b"]
    m, fraction = closed[0].get_data()
    assert list(m) == [4, 5, 6, 7, 8]
    assert np.allclose(fraction, 3 / (m + 3))
    assert bubble.get_legend().get_title().get_text() == "closed form: uniform costs, free links"
    by_devices = sweep_figure(frame(**{"pipeline.devices": [2, 4]})).axes[1]
    assert by_devices.get_xlabel() == "pipeline.devices"
    assert not [line for line in by_devices.get_lines() if line.get_color() == "black"]


def test_every_combination_of_the_other_keys_is_its_own_line():
    table = frame(
        **{
            "pipeline.microbatches": [4, 8],
            "pipeline.schedule": ["gpipe", "1f1b"],
            "pipeline.devices": [2, 4],
            "model.recompute": [False, True],
        }
    )
    labels = [line.get_label() for line in point_lines(sweep_figure(table).axes[0])]
    assert len(labels) == len(set(labels)) == 8
    assert "gpipe, devices=4, recompute=True" in labels


def test_many_microbatches_take_a_log_axis_with_a_tick_at_each_swept_value():
    step = sweep_figure(frame(**{"pipeline.microbatches": [1, 2, 4, 8, 16, 32, 64]})).axes[0]
    assert step.get_xscale() == "log"
    assert [t.get_text() for t in step.get_xticklabels()] == ["1", "2", "4", "8", "16", "32", "64"]
    (line,) = point_lines(step)
    assert list(line.get_xdata()) == [1, 2, 4, 8, 16, 32, 64]
    assert not step.figure.legends  # one line: nothing to tell apart


def test_a_schedule_only_sweep_puts_the_schedules_on_the_axis_as_categories():
    table = frame(**{"pipeline.schedule": ["gpipe", "1f1b", "zbv"]})
    step = sweep_figure(table).axes[0]
    assert [t.get_text() for t in step.get_xticklabels()] == ["gpipe", "1f1b", "zbv"]
    (line,) = point_lines(step)
    assert list(line.get_xdata()) == [0, 1, 2] and line.get_linestyle() == "None"
    assert list(line.get_ydata()) == table["step_time_ms"].to_list()


def test_a_decode_sweep_draws_tpot_ttft_and_tokens_per_second():
    table = frame(**{"pipeline.microbatches": [1, 2, 4]})
    table["schedule"] = "decode"
    table["ttft_ms"] = [488.0, 549.0, 671.0]
    table["tpot_ms"] = [14.4, 14.9, 15.8]
    table["tokens_per_second"] = [442.0, 839.0, 1526.0]
    fig = sweep_figure(table)
    assert [ax.get_ylabel() for ax in fig.axes] == [
        "time per output token, TPOT (ms)",
        "time to first token, TTFT (ms)",
        "throughput (tokens/s)",
    ]
    assert fig.axes[0].get_xlabel() == "pipeline.microbatches (groups in flight)"
    for ax, column in zip(fig.axes, ("tpot_ms", "ttft_ms", "tokens_per_second"), strict=True):
        (line,) = ax.get_lines()  # no closed form, no bubble
        assert list(line.get_xdata()) == [1, 2, 4]
        assert list(line.get_ydata()) == table[column].to_list()


def test_error_rows_are_left_out_and_counted_in_the_title():
    table = frame(**{"pipeline.microbatches": [4, 8, 16]})
    table.loc[1, "error"] = "cannot run"
    fig = sweep_figure(table)
    (line,) = point_lines(fig.axes[0])
    assert list(line.get_xdata()) == [4, 16]
    assert fig.get_suptitle() == "made-up: 3 points, 1 did not run (see the error column)"


def test_a_real_sweep_plots_its_step_time_column_and_meets_the_closed_form():
    grid = parse_grid(["pipeline.microbatches=2,4,8", "pipeline.schedule=gpipe,zb-h1"])
    table = run_sweep(read_mapping(GPIPE), GPIPE, grid)
    step, bubble, _ = sweep_figure(table).axes
    gpipe, zb = point_lines(step)
    assert (gpipe.get_label(), zb.get_label()) == ("gpipe", "zb-h1")
    own = table[table["pipeline.schedule"] == "gpipe"]
    assert list(gpipe.get_ydata()) == own["step_time_ms"].to_list()
    (closed,) = [line for line in bubble.get_lines() if line.get_color() == "black"]
    m, fraction = closed.get_data()
    # uniform costs on ideal links: the simulated bubble is the closed form's
    assert np.allclose(np.interp([2, 4, 8], m, fraction), own["bubble_fraction"])
