"""Sweeps of serving scenarios: one workload and deployment, many variations, one table.

``pipesim sweep`` over a scenario with a ``serving:`` section runs each point of the grid
(``--grid serving.workload.rate=2,4,8 --grid parallel.tensor=4,8``) through the serving
simulator instead of the training engine. The grid is expanded as
``pipesim.analysis.sweep`` expands it (every combination, the first key varying slowest),
and the table has the same shape: the grid keys, the serving report's scalars
(``throughput_rps``, ``ttft_ms_p99``, ``goodput_rps``, ...; see
``pipesim.serving.export.report_scalars``), and an ``error`` column, where a point that
cannot run (a layout that does not fit, say) is a row with its reason.

Points run in a local process pool, or on an existing Dask cluster; rows come back in grid
order whatever order the workers finish in, so the table is the same for any number of
workers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from pipesim.analysis.sweep import GridAxis, error_line, run_sweep
from pipesim.scenario.build import apply_overrides, parse_spec
from pipesim.scenario.serving import build_serving, run_serving
from pipesim.serving.export import report_scalars

Progress = Callable[[int], None]


def run_serving_point(base: dict, source: str, keys: Sequence[str], raw: Sequence[str]) -> dict:
    """Serve one point of the grid; the report's scalars, or ``{"error": text}``."""
    try:
        overrides = [f"{key}={value}" for key, value in zip(keys, raw, strict=True)]
        data = apply_overrides(base, overrides, source="--grid")
        scenario = build_serving(parse_spec(data, source), source)
        return report_scalars(run_serving(scenario).report)
    except Exception as exc:  # noqa: BLE001 - one bad point is a row, never a lost sweep
        return {"error": error_line(exc, source)}


def run_serving_chunk(base: dict, source: str, keys: Sequence[str], chunk: Sequence) -> list:
    """``[(index, row), ...]`` for a chunk of ``(index, raw values)`` points."""
    return [(index, run_serving_point(base, source, keys, raw)) for index, raw in chunk]


def run_serving_sweep(
    base: dict,
    source: str,
    axes: Sequence[GridAxis],
    *,
    jobs: int = 1,
    executor: str = "local",
    scheduler: str | None = None,
    progress: Progress | None = None,
    into: list | None = None,
) -> pd.DataFrame:
    """Serve every point of the grid over ``base`` (a scenario mapping read from
    ``source``) on ``jobs`` local processes or the Dask cluster at ``scheduler``;
    ``progress(n)`` as ``n`` more points finish; ``into`` as ``run_sweep``'s."""
    return run_sweep(
        base,
        source,
        axes,
        jobs=jobs,
        executor=executor,
        scheduler=scheduler,
        progress=progress,
        runner=run_serving_chunk,
        into=into,
    )


def is_serving(base: dict) -> bool:
    """Whether a scenario mapping describes a serving run (has a ``serving`` section)."""
    return isinstance(base, dict) and base.get("serving") is not None
