"""Monte Carlo studies: many random steps of one scenario, and their percentiles."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pipesim.schedules.ir import Schedule
from pipesim.sim.variability import DurationHook, LinkHook, Variability, draw_hooks

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class Percentiles:
    """p50, p90 and p99 of one figure over the runs of a study."""

    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: tuple[float, ...]) -> Percentiles:
        return cls(*(float(v) for v in np.percentile(np.asarray(values), PERCENTILES)))


@dataclass(frozen=True, slots=True)
class MonteCarloSummary:
    """What a study says: its size, its seed, and the percentiles of each figure."""

    runs: int
    seed: int
    makespan_ms: Percentiles
    bubble_fraction: Percentiles

    def to_dict(self) -> dict[str, float | int]:
        """Flat keys, as the JSON and CSV reports have them: ``monte_carlo_runs``,
        ``monte_carlo_seed``, ``makespan_ms_p50`` ... ``bubble_fraction_p99``."""
        out: dict[str, float | int] = {"monte_carlo_runs": self.runs, "monte_carlo_seed": self.seed}
        for name in ("makespan_ms", "bubble_fraction"):
            figure = getattr(self, name)
            for p in PERCENTILES:
                out[f"{name}_p{p}"] = getattr(figure, f"p{p}")
        return out


@dataclass(frozen=True, slots=True)
class MonteCarlo:
    """Makespans and bubble fractions of ``runs`` random steps."""

    seed: int
    makespan_ms: tuple[float, ...]
    bubble_fraction: tuple[float, ...]

    @property
    def runs(self) -> int:
        return len(self.makespan_ms)

    def summary(self) -> MonteCarloSummary:
        return MonteCarloSummary(
            runs=self.runs,
            seed=self.seed,
            makespan_ms=Percentiles.of(self.makespan_ms),
            bubble_fraction=Percentiles.of(self.bubble_fraction),
        )


RunStep = Callable[[DurationHook | None, LinkHook | None], tuple[float, float]]
Progress = Callable[[int], None]


def monte_carlo(
    variability: Variability,
    schedule: Schedule,
    run_step: RunStep,
    runs: int,
    seed: int,
    progress: Progress | None = None,
) -> MonteCarlo:
    """Run ``runs`` random steps; ``run_step(duration_scale, link_scale)`` simulates one
    and returns ``(makespan_ms, bubble_fraction)``. ``progress(1)`` is called after each."""
    if runs < 1:
        raise ValueError(f"a Monte Carlo study needs at least one run, got {runs=}")
    makespans, bubbles = [], []
    for k in range(runs):
        rng = np.random.default_rng([seed, k])
        makespan, bubble = run_step(*draw_hooks(variability, schedule, rng))
        makespans.append(makespan)
        bubbles.append(bubble)
        if progress is not None:
            progress(1)
    return MonteCarlo(seed, tuple(makespans), tuple(bubbles))
