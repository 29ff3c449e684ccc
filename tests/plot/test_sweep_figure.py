"""The sweep figure draws every combination of the grid, never an average over a key."""

from __future__ import annotations

import itertools

import pandas as pd

from pipesim.plot.figures import sweep_figure


def frame(**grid) -> pd.DataFrame:
    """A sweep table over ``grid`` (dotted keys), bubble (p-1)/(m+p-1) scaled per point."""
    keys = list(grid)
    rows = []
    for values in itertools.product(*grid.values()):
        point = dict(zip(keys, values, strict=True))
        m, p = point["pipeline.microbatches"], point.get("pipeline.devices", 4)
        schedule = point.get("pipeline.schedule", "1f1b")
        scale = 1.0 + 0.1 * len(rows) / 100
        rows.append(
            {
                **point,
                "schedule": schedule,
                "devices": p,
                "microbatches": m,
                "bubble_fraction": scale * (p - 1) / (m + p - 1),
                "samples_per_second": 100.0 * m,
                "peak_activation_bytes_max": float(2**20 * m * p),
                "error": "",
            }
        )
    return pd.DataFrame(rows)


def point_lines(fig):
    left = fig.axes[0]
    return [line for line in left.get_lines() if not line.get_label().startswith("(p-1)")]


def test_two_grid_keys_give_one_line_per_value_of_the_other_key():
    table = frame(**{"pipeline.microbatches": [4, 8, 16], "pipeline.devices": [2, 4, 8]})
    lines = point_lines(sweep_figure(table))
    assert sorted(line.get_label() for line in lines) == [
        "1f1b, devices=2",
        "1f1b, devices=4",
        "1f1b, devices=8",
    ]
    for line in lines:
        p = int(line.get_label().rsplit("=", 1)[1])
        expected = table[table["pipeline.devices"] == p]["bubble_fraction"].to_list()
        assert list(line.get_ydata()) == expected  # that key's own points, not a mean


def test_schedule_and_two_more_keys_give_every_combination():
    table = frame(
        **{
            "pipeline.microbatches": [4, 8],
            "pipeline.schedule": ["gpipe", "1f1b"],
            "pipeline.devices": [2, 4],
            "model.recompute": [False, True],
        }
    )
    labels = {line.get_label() for line in point_lines(sweep_figure(table))}
    assert len(labels) == 8
    assert "gpipe, devices=4, recompute=True" in labels


def test_one_grid_key_gives_one_line_per_schedule_and_error_rows_are_left_out():
    table = frame(**{"pipeline.microbatches": [4, 8, 16]})
    table.loc[1, "error"] = "cannot run"
    (line,) = point_lines(sweep_figure(table))
    assert list(line.get_xdata()) == [4, 16]
