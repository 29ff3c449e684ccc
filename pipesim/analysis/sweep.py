"""Parameter sweeps: one scenario, many variations, one table.

A sweep is a grid: for each key, a list of values (``pipeline.microbatches=4,8,16``,
``pipeline.schedule=1f1b,zb-h1``). Every combination of values (the Cartesian product,
the first key varying slowest) is one *point*: the base scenario with those keys set
(``pipesim.scenario.vary``), validated and simulated exactly as ``pipesim run --set``
would.

Points are independent, so they run in parallel: on a local process pool, or on a Dask
cluster (``dask.distributed``) that already exists. Each worker returns a plain dict, the
Report's scalar fields, or ``{"error": "one line"}`` for a point that cannot run (a
schedule's constraint broken, a bad value): one bad point never aborts a sweep. Rows come
back in grid order whatever order the workers finish in.

The result is a pandas DataFrame: the grid keys, then the report's scalars
(``makespan_ms``, ``bubble_fraction``, ``samples_per_second``, peak memory, ...), then
``error``. Nothing here prints or writes files; ``progress`` is a callback the caller
may turn into a progress bar.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from pipesim.analysis.compare import scenario_for_schedule
from pipesim.analysis.errors import SweepError
from pipesim.analysis.executor import run_chunks
from pipesim.analysis.grid import GridAxis, parse_grid
from pipesim.analysis.run import run_scenario
from pipesim.scenario.load import load_yaml
from pipesim.scenario.vary import vary
from pipesim.sim.fast import EvaluatorCache

MAX_POINTS = 100_000  # points: each is a simulation, and every row is held until the end


def check_size(axes: Sequence[GridAxis], limit: int = MAX_POINTS) -> int:
    """The number of points of the grid (the product of its axes' lengths, counted without
    building it); raise ``SweepError`` with one line where it is over ``limit``."""
    count = math.prod(len(axis.raw) for axis in axes)
    if count > limit:
        raise SweepError(
            f"--grid: {count:,} points, over the limit of {limit:,}; "
            "narrow a --grid, or raise the limit with --max-points N"
        )
    return count


def grid_points(axes: Sequence[GridAxis]) -> list[tuple[str, ...]]:
    """Every combination of raw values, first axis slowest (the order rows come back in)."""
    return list(itertools.product(*(axis.raw for axis in axes)))


# ---------------------------------------------------------------------------
# The worker: plain data in, plain data out (picklable, for processes and Dask)


def run_point(
    base: dict,
    source: str,
    keys: Sequence[str],
    raw: Sequence[str],
    cache: EvaluatorCache | None = None,
) -> dict:
    """Simulate one point; the report's scalars, or ``{"error": text}`` (``cache``: the
    fast evaluator's, shared by the points of a chunk).

    A point of a ``pipeline.schedule`` grid (without a ``pipeline.virtual_stages`` one)
    runs each schedule at the chunk count it needs, the same model cut finer, as
    ``pipesim compare`` does (``pipesim.analysis.compare.scenario_for_schedule``).
    """
    try:
        changes = {key: load_yaml(text) for key, text in zip(keys, raw, strict=True)}
        data = vary(base, changes, source=source)  # as --set KEY=TEXT sets each key
        refit = "pipeline.schedule" in keys and "pipeline.virtual_stages" not in keys
        pipeline = data.get("pipeline")
        name = pipeline.get("schedule") if refit and isinstance(pipeline, dict) else None
        scenario, _ = scenario_for_schedule(data, source, name)
        return run_scenario(scenario, cache=cache).scalars()
    except Exception as exc:  # noqa: BLE001 - one bad point is a row, never a lost sweep
        return {"error": error_line(exc, source)}


def run_chunk(base: dict, source: str, keys: Sequence[str], chunk: Sequence) -> list:
    """``[(index, row), ...]`` for a chunk of ``(index, raw values)`` points (one
    evaluator cache for them all: points that share a schedule lay it out once)."""
    cache = EvaluatorCache()
    return [(index, run_point(base, source, keys, raw, cache)) for index, raw in chunk]


def error_line(exc: BaseException, source: str) -> str:
    """Why a point did not run, in one line for its row: the first line of the error
    without the scenario's name, prefixed with the exception's type unless it is one of
    pipesim's own user errors."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    line = line.removeprefix(f"{source}: ")
    known = ("ScenarioError", "ScheduleError", "ConstraintError", "DeadlockError")
    if type(exc).__name__ not in known:
        line = f"{type(exc).__name__}: {line}"
    return line


# ---------------------------------------------------------------------------
# Running a sweep

Progress = Callable[[int], None]
CHUNK_POINTS = 8  # points of one chunk at most (they share one evaluator cache)


def run_sweep(
    base: dict,
    source: str,
    axes: Sequence[GridAxis],
    *,
    jobs: int = 1,
    executor: str = "local",
    scheduler: str | None = None,
    progress: Progress | None = None,
    runner: Callable[..., list] | None = None,
    max_points: int = MAX_POINTS,
    into: list | None = None,
) -> pd.DataFrame:
    """Run every point of the grid over ``base`` (a scenario mapping read from ``source``).

    ``jobs`` local processes (1: in this process), or ``executor="dask"`` on the cluster
    at ``scheduler`` (``tcp://host:port``). ``runner(base, source, keys, chunk)`` computes
    a chunk's rows (default ``run_chunk``: one training step per point; a module-level
    function, so worker processes can find it). ``progress(n)`` is called as ``n`` more
    points finish. A grid of more than ``max_points`` points raises ``SweepError`` before
    any point runs (``check_size``). ``into``: a list each ``(index, row)`` is appended to
    as it comes back, so a caller stopped midway can still tabulate what finished
    (``finished_frame``).
    """
    check_size(axes, max_points)
    keys = [axis.key for axis in axes]
    points = list(enumerate(grid_points(axes)))
    work = partial(runner or run_chunk, base, source, keys)
    results = run_chunks(
        work,
        points,
        chunks,
        jobs=jobs,
        executor=executor,
        scheduler=scheduler,
        progress=progress,
        error=SweepError,
        into=into,
    )
    return finished_frame(axes, results)


def finished_frame(axes: Sequence[GridAxis], results: Sequence[tuple[int, dict]]) -> pd.DataFrame:
    """The table of the points in ``results`` (``(index, row)`` in any order), in grid
    order: the whole sweep once every point is back, else the part that finished."""
    raw = grid_points(axes)
    done = sorted(results, key=lambda item: item[0])
    return sweep_frame(axes, [raw[index] for index, _ in done], [row for _, row in done])


def chunks(points: list, parts: int) -> list[list]:
    """Contiguous chunks, about four per worker and at most ``CHUNK_POINTS``: few enough
    that pickling stays small next to the work, enough to balance slow and fast points,
    keep a progress bar moving and lose little to a stop."""
    size = max(1, min(CHUNK_POINTS, math.ceil(len(points) / (parts * 4))))
    return [points[i : i + size] for i in range(0, len(points), size)]


def sweep_frame(
    axes: Sequence[GridAxis], points: Sequence[tuple[str, ...]], rows: Sequence[dict]
) -> pd.DataFrame:
    """The table: grid keys (``grid_column``), then report scalars, then ``error``."""
    scalar_columns: list[str] = []
    for row in rows:
        for name in row:
            if name != "error" and name not in scalar_columns:
                scalar_columns.append(name)
    columns: dict[str, pd.Series] = {}
    for n, axis in enumerate(axes):
        columns[axis.key] = grid_column(axis, [raw[n] for raw in points])
    for name in scalar_columns:
        columns[name] = _typed([row.get(name) for row in rows])
    columns["error"] = pd.Series([row.get("error", "") for row in rows], dtype=object)
    return pd.DataFrame(columns)


INT64 = range(-(2**63), 2**63)


def grid_column(axis: GridAxis, column: Sequence[str]) -> pd.Series:
    """One grid key's column for the points whose raw values are ``column``.

    Where the key's values are all of one kind that every table format holds, the column
    holds them as read: integers stay integers (``4``, never ``4.0``), numbers mixing
    integers and fractions keep each as given (``1`` and ``2.5``; parquet, one type to a
    column, stores both as floats), booleans and strings as they are, ``null`` a hole.
    Otherwise (lists, mappings, or kinds mixed, as in ``name=a,1``) it holds the text as
    written after ``--grid``, so every format writes it and reads it back as typed.
    """
    value_of = dict(zip(axis.raw, axis.values, strict=True))
    values = [value_of[raw] for raw in column]
    holes = any(v is None for v in values)
    match _kind(axis.values):
        case "bool":
            return pd.Series(values, dtype="boolean" if holes else bool)
        case "int":
            return pd.Series(values, dtype="Int64" if holes else np.int64)
        case "float":
            return pd.Series([np.nan if v is None else v for v in values], dtype=np.float64)
        case "number":
            return pd.Series(values, dtype=object)
        case "str":
            return pd.Series(values)
    return pd.Series(list(column), dtype=object)


def _kind(values: Sequence[Any]) -> str:
    """``bool``, ``int``, ``float``, ``number`` (both), ``str``, or ``text`` for the
    rest; ``None`` (a hole) goes with any kind but is none by itself."""
    kinds = set()
    for value in values:
        if isinstance(value, bool):
            kinds.add("bool")
        elif isinstance(value, int) and value in INT64:
            kinds.add("int")
        elif isinstance(value, float | str):
            kinds.add(type(value).__name__)
        elif value is not None:
            return "text"
    if kinds == {"int", "float"}:
        return "number"
    return kinds.pop() if len(kinds) == 1 else "text"


def _typed(values: list) -> pd.Series:
    """Counts stay integers and flags booleans where error rows leave holes (nullable)."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool | np.bool_) for v in present):
        return pd.Series(values, dtype="boolean")
    if present and all(isinstance(v, int | np.integer) for v in present):
        return pd.Series(values, dtype="Int64")
    if present and all(isinstance(v, float | int) for v in present):
        return pd.Series([np.nan if v is None else v for v in values], dtype=np.float64)
    return pd.Series(values, dtype=object)


# ---------------------------------------------------------------------------
# Reading a sweep


def pareto_front(
    frame: pd.DataFrame,
    cost: str = "peak_activation_bytes_max",
    benefit: str = "samples_per_second",
) -> np.ndarray:
    """Boolean mask of the points no other point beats: none has lower-or-equal ``cost``
    and higher-or-equal ``benefit`` with one of them strictly better. Error rows are
    never on the front."""
    ok = frame["error"].fillna("") == "" if "error" in frame else np.ones(len(frame), bool)
    costs = frame[cost].to_numpy(dtype=np.float64)
    gains = frame[benefit].to_numpy(dtype=np.float64)
    valid = np.asarray(ok) & np.isfinite(costs) & np.isfinite(gains)
    mask = np.zeros(len(frame), dtype=bool)
    for i in np.flatnonzero(valid):
        others = valid & (costs <= costs[i]) & (gains >= gains[i])
        others &= (costs < costs[i]) | (gains > gains[i])
        mask[i] = not others.any()
    return mask


__all__ = [
    "MAX_POINTS",
    "GridAxis",
    "SweepError",
    "check_size",
    "grid_points",
    "pareto_front",
    "parse_grid",
    "run_point",
    "run_sweep",
    "sweep_frame",
]
