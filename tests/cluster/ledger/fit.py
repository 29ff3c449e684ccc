"""Refit the cost model's calibrated numbers on the ledger's calibration rows.

The fitted set is a list of ``Parameter`` (``tests.cluster.ledger.scenarios``): a name,
how it enters a scenario, its bounds and its start. ``DEFAULT_PARAMETERS`` are the three
fractions of ``model.efficiency`` pipesim calibrates today; a new calibrated field (of
``Efficiency``, of a GPU profile, of a collective model) is one more ``Parameter`` whose
``apply`` writes the scenario key that sets it. Only ``calibrate`` rows enter the
objective: ``fit`` refuses any other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pipesim.cluster.efficiency import CALIBRATED_STEP_GEMM_FRACTION
from pipesim.cluster.gpus import A100_STEP
from tests.cluster.ledger.evaluate import evaluate
from tests.cluster.ledger.rows import Row
from tests.cluster.ledger.scenarios import Parameter, efficiency_field, for_gpu

DEFAULT_PARAMETERS: tuple[Parameter, ...] = (
    # the share of the measured GEMM rate a step keeps: H100's is pipesim's default for
    # every GPU without rows of its own (CALIBRATED_STEP_GEMM_FRACTION), A100's its own
    # (pipesim.cluster.gpus.A100_STEP)
    for_gpu("h100-sxm", efficiency_field("gemm_fraction", start=CALIBRATED_STEP_GEMM_FRACTION)),
    for_gpu("a100-sxm-80gb", efficiency_field("gemm_fraction", start=A100_STEP)),
    efficiency_field("memory_fraction"),
    efficiency_field("tensor_overlap_fraction", low=0.0),
    efficiency_field("overlap_slowdown", low=0.0),
)


def objective(
    rows: Sequence[Row], parameters: Sequence[Parameter], values: Sequence[float]
) -> float:
    """What the fit minimises: the median plus half the largest |error| over ``rows``
    (infinite outside a parameter's bounds); rows waiting for a feature do not count."""
    if any(not p.low <= v <= p.high for p, v in zip(parameters, values, strict=True)):
        return float("inf")
    settings = list(zip(parameters, map(float, values), strict=True))
    errors = np.abs([o.error for o in evaluate(rows, settings) if o.error is not None])
    return float(np.median(errors) + 0.5 * np.max(errors))


def nelder_mead(f: Callable[[np.ndarray], float], start: Sequence[float], iterations: int):
    """Plain Nelder-Mead (reflect, expand, contract, shrink), no dependency beyond NumPy."""
    points = [np.asarray(start, float)]
    points += [points[0] + 0.1 * np.eye(len(start))[i] for i in range(len(start))]
    values = [f(p) for p in points]
    for _ in range(iterations):
        order = np.argsort(values)
        points, values = [points[i] for i in order], [values[i] for i in order]
        centre = np.mean(points[:-1], axis=0)
        reflected = 2 * centre - points[-1]
        f_reflected = f(reflected)
        if f_reflected < values[0]:
            expanded = 3 * centre - 2 * points[-1]
            f_expanded = f(expanded)
            best = (expanded, f_expanded) if f_expanded < f_reflected else (reflected, f_reflected)
            points[-1], values[-1] = best
        elif f_reflected < values[-2]:
            points[-1], values[-1] = reflected, f_reflected
        else:
            contracted = (centre + points[-1]) / 2
            f_contracted = f(contracted)
            if f_contracted < values[-1]:
                points[-1], values[-1] = contracted, f_contracted
            else:
                points = [points[0]] + [(p + points[0]) / 2 for p in points[1:]]
                values = [values[0]] + [f(p) for p in points[1:]]
    best = int(np.argmin(values))
    return points[best], values[best]


def fit(
    rows: Sequence[Row],
    parameters: Sequence[Parameter] = DEFAULT_PARAMETERS,
    iterations: int = 150,
) -> dict[str, float]:
    """The values of ``parameters`` that minimise ``objective`` on ``rows``, from each
    parameter's start (Nelder-Mead finds a local minimum: try several starts)."""
    if any(row.role != "calibrate" for row in rows):
        raise ValueError("fit: only calibrate rows may be fitted on")
    start = [p.start for p in parameters]
    best, _ = nelder_mead(lambda x: objective(rows, parameters, x), start, iterations)
    return {p.name: float(v) for p, v in zip(parameters, best, strict=True)}
