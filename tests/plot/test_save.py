"""Saved figures are the same bytes on every run (no dates, no random ids)."""

from __future__ import annotations

import io

from pipesim.plot.figures import gantt_figure, save_figure

STAMPS = {"svg": b"<dc:date>", "pdf": b"CreationDate", "png": b"Software"}


def test_two_runs_give_identical_bytes_in_every_format(interleaved, tmp_path):
    first, second = gantt_figure(*interleaved), gantt_figure(*interleaved)
    for fmt, stamp in STAMPS.items():
        path = tmp_path / f"a.{fmt}"
        save_figure(first, str(path), close=False)
        out = io.BytesIO()
        save_figure(second, out, fmt=fmt, close=False)  # a file object: the format given
        assert path.read_bytes() == out.getvalue(), fmt
        assert stamp not in out.getvalue(), fmt
