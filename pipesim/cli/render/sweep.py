"""``pipesim sweep``: one row per grid point, as a terminal table or a file, and its figure.

A training sweep shows makespan, bubble, throughput and peak memory; a serving sweep (the
scenario has a ``serving:`` section) shows throughput, goodput and p99 latencies. Every
column is in ``-o table.csv``; the terminal table picks the ones a reader compares.

A partial sweep (stopped by a signal, ``--partial-on-interrupt``) says so first: a
``# partial sweep`` line above the CSV, a JSON object with ``"complete": false``, the
signal and the counts around the rows (a complete sweep's JSON is the bare list of rows),
a ``PARTIAL SWEEP`` line above the terminal table; it has no figure, and no parquet form
(a parquet table has nowhere a reader would see the mark).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import pandas as pd

from pipesim.cli.output import Files, figure_bytes, suffix_of
from pipesim.cli.render.units import format_bytes
from pipesim.plot.figures import sweep_figure
from pipesim.plot.serving import serving_sweep_figure

SWEEP_SUFFIXES = (".csv", ".parquet", ".json")


def frame_bytes(frame: pd.DataFrame, suffix: str) -> bytes:
    """A sweep table as a ``.csv``, ``.json`` (records) or ``.parquet`` file's content."""
    if suffix == ".parquet":
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        return buffer.getvalue()
    if suffix == ".json":
        text = frame.to_json(orient="records", indent=2, double_precision=15) + "\n"
        return text.encode("utf-8")
    return frame.to_csv(index=False).encode("utf-8")


def render_sweep_table(frame: pd.DataFrame) -> str:
    """The sweep for a terminal: grid keys, then makespan, bubble, throughput and peak
    memory in human units, and the reason of any point that did not run (every column is
    in ``-o table.csv``)."""
    columns = list(frame.columns)
    grid = columns[: columns.index("scenario")] if "scenario" in columns else columns[:-1]
    shown = {key: [grid_cell(v) for v in frame[key]] for key in grid}
    if "makespan_ms" in frame:
        memory = "peak_memory_bytes_max"
        if not (frame[memory].fillna(0) > frame["peak_activation_bytes_max"].fillna(0)).any():
            memory = "peak_activation_bytes_max"  # no static memory known
        for label, key, fmt in (
            ("makespan ms", "makespan_ms", "{:.3f}"),
            ("bubble", "bubble_fraction", "{:.4f}"),
            ("samples/s", "samples_per_second", "{:,.1f}"),
        ):
            shown[label] = [_cell(v, fmt) for v in frame[key]]
        if "ttft_ms" in frame and frame["ttft_ms"].notna().any():  # decode mode
            for label, key, fmt in (
                ("TTFT ms", "ttft_ms", "{:.3f}"),
                ("TPOT ms", "tpot_ms", "{:.3f}"),
                ("tokens/s", "tokens_per_second", "{:,.1f}"),
            ):
                shown[label] = [_cell(v, fmt) for v in frame[key]]
        if memory == "peak_memory_bytes_max":
            shown.update(_memory_columns(frame))
        else:
            shown["peak activations"] = _bytes_cells(frame[memory])
    return sweep_rows(shown, [str(e) for e in frame["error"]])


def _memory_columns(frame: pd.DataFrame) -> dict[str, list[str]]:
    """Peak memory (static plus activations, the most any device needs), the most static
    memory of any device, and ``OOM`` where a device passes the GPU's memory, as ``pipesim
    run`` flags it (``fits``; ``-`` where the point did not run or the GPU's memory is
    unknown)."""
    verdicts = [
        "-" if pd.isna(oom) else "OOM" if bool(oom) else "-" if pd.isna(capacity) else "fits"
        for oom, capacity in zip(frame["oom"], frame["memory_capacity_bytes"], strict=True)
    ]
    return {
        "peak memory": _bytes_cells(frame["peak_memory_bytes_max"]),
        "static": _bytes_cells(frame["static_memory_bytes_max"]),
        "on GPU": verdicts,
    }


def _bytes_cells(values: pd.Series) -> list[str]:
    return ["-" if pd.isna(v) else format_bytes(float(v)) for v in values]


def sweep_rows(shown: dict[str, list[str]], errors: list[str]) -> str:
    """Columns of cells, right-aligned under their names, and the reason of each row that
    did not run after its cells (an ``error`` heading only when some row has one)."""
    widths = {name: max(len(name), *(len(c) for c in cells)) for name, cells in shown.items()}
    lines = ["  ".join(name.rjust(widths[name]) for name in shown)]
    if any(errors):
        lines[0] += "  error"
    for i, error in enumerate(errors):
        cells = "  ".join(shown[name][i].rjust(widths[name]) for name in shown)
        lines.append((cells + (f"  {error}" if error else "")).rstrip())
    return "\n".join(lines) + "\n"


def grid_cell(value: object) -> str:
    """A grid value as typed; a hole (``null`` on the command line) as ``null``."""
    return "null" if pd.api.types.is_scalar(value) and pd.isna(value) else str(value)


def _cell(value: object, fmt: str) -> str:
    return "-" if pd.isna(value) else fmt.format(float(value))


SERVING_COLUMNS = (
    ("requests/s", "throughput_rps", "{:.3f}"),
    ("tokens/s", "output_tokens_per_second", "{:,.1f}"),
    ("goodput/s", "goodput_rps", "{:.3f}"),
    ("TTFT p99 ms", "ttft_ms_p99", "{:.2f}"),
    ("TPOT p99 ms", "tpot_ms_p99", "{:.2f}"),
    ("e2e p99 ms", "e2e_ms_p99", "{:.1f}"),
    ("preempted", "preemptions", "{:.0f}"),
)


def render_serving_sweep_table(frame: pd.DataFrame) -> str:
    """A serving sweep for a terminal: the grid keys, throughput, goodput and p99
    latencies, and the reason of any point that did not run (every column is in ``-o``)."""
    shown = {key: [grid_cell(v) for v in frame[key]] for key in frame.columns if "." in str(key)}
    for label, key, fmt in SERVING_COLUMNS:
        if key in frame:
            shown[label] = ["-" if pd.isna(v) else fmt.format(float(v)) for v in frame[key]]
    return sweep_rows(shown, [str(e) for e in frame["error"]])


def sweep_files(frame: pd.DataFrame, serving: bool, output: str | None, plot: str | None) -> Files:
    """The figure (if asked for), then the table: into ``output`` by its suffix, else as
    text on standard output."""
    files: Files = []
    if plot:
        figure = serving_sweep_figure(frame) if serving else sweep_figure(frame)
        files.append((plot, figure_bytes(figure, suffix_of(plot))))
    if output:
        files.append((output, frame_bytes(frame, suffix_of(output))))
    else:
        table = render_serving_sweep_table if serving else render_sweep_table
        files.append(("-", table(frame)))
    return files


@dataclass(frozen=True, slots=True)
class SweepStop:
    """Why a sweep is partial: the signal that stopped it, and the points that finished."""

    signal: str  # its name, e.g. SIGINT
    finished: int
    total: int

    def line(self, head: str) -> str:
        return f"{head}: stopped by {self.signal} after {self.finished:,} of {self.total:,} points"

    def to_dict(self) -> dict[str, object]:
        return {
            "complete": False,
            "interrupted": self.signal,
            "points_finished": self.finished,
            "points_total": self.total,
        }


def partial_sweep_files(
    frame: pd.DataFrame, serving: bool, output: str | None, stop: SweepStop
) -> Files:
    """The finished part of a stopped sweep, marked (see the module's docstring)."""
    if not output:
        table = render_serving_sweep_table if serving else render_sweep_table
        rows = table(frame) if len(frame) else "no point finished before the stop\n"
        return [("-", f"{stop.line('PARTIAL SWEEP')}\n{rows}")]
    suffix = suffix_of(output)
    if suffix == ".json":
        rows = json.loads(frame.to_json(orient="records", double_precision=15))
        return [(output, json.dumps(stop.to_dict() | {"rows": rows}, indent=2) + "\n")]
    return [(output, f"# {stop.line('partial sweep')}\n".encode() + frame_bytes(frame, suffix))]
