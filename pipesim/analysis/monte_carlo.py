"""Monte Carlo studies: many random steps of one scenario, and their percentiles."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from pipesim.schedules.ir import Schedule
from pipesim.sim.variability import DurationHook, LinkHook, Variability, draw_hooks

# ---------------------------------------------------------------------------
# Monte Carlo


PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class MonteCarlo:
    """Makespans and bubble fractions of ``runs`` random steps, and their percentiles."""

    seed: int
    makespan_ms: tuple[float, ...]
    bubble_fraction: tuple[float, ...]

    @property
    def runs(self) -> int:
        return len(self.makespan_ms)

    def summary(self) -> dict[str, float | int]:
        """``makespan_ms_p50`` ... ``bubble_fraction_p99``, plus the run count and seed."""
        out: dict[str, float | int] = {"monte_carlo_runs": self.runs, "monte_carlo_seed": self.seed}
        for name in ("makespan_ms", "bubble_fraction"):
            values = np.asarray(getattr(self, name))
            for p, value in zip(PERCENTILES, np.percentile(values, PERCENTILES), strict=True):
                out[f"{name}_p{p}"] = float(value)
        return out


RunStep = Callable[[DurationHook | None, LinkHook | None], tuple[float, float]]


def monte_carlo(
    variability: Variability, schedule: Schedule, run_step: RunStep, runs: int, seed: int
) -> MonteCarlo:
    """Run ``runs`` random steps; ``run_step(duration_scale, link_scale)`` simulates one
    and returns ``(makespan_ms, bubble_fraction)``."""
    if runs < 1:
        raise ValueError(f"a Monte Carlo study needs at least one run, got {runs=}")
    makespans, bubbles = [], []
    for k in range(runs):
        rng = np.random.default_rng([seed, k])
        makespan, bubble = run_step(*draw_hooks(variability, schedule, rng))
        makespans.append(makespan)
        bubbles.append(bubble)
    return MonteCarlo(seed, tuple(makespans), tuple(bubbles))


def with_monte_carlo(report, result: MonteCarlo):
    """The report with the study's percentiles added (``makespan_ms_p50``, ...)."""
    return replace(report, extra={**report.extra, **result.summary()})
