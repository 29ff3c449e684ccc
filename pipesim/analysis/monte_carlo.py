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
# a string, so that numpy.random loads with the first study, not with this module
DrawHook = Callable[["np.random.Generator"], DurationHook]
ROUTING_STREAM = 1  # run k's routing draws come from default_rng([seed, k, ROUTING_STREAM])


def monte_carlo(
    variability: Variability,
    schedule: Schedule,
    run_step: RunStep,
    runs: int,
    seed: int,
    progress: Progress | None = None,
    routing: DrawHook | None = None,
) -> MonteCarlo:
    """Run ``runs`` random steps; ``run_step(duration_scale, link_scale)`` simulates one
    and returns ``(makespan_ms, bubble_fraction)``. ``progress(1)`` is called after each.
    ``routing(rng)``, where given, draws a MoE model's routing for a step
    (``pipesim.cluster.expert_draws``), from a generator of its own (``ROUTING_STREAM``),
    so the variability's draws stay what they are without it; its factors multiply the
    variability's."""
    if runs < 1:
        raise ValueError(f"a Monte Carlo study needs at least one run, got {runs=}")
    makespans, bubbles = [], []
    for k in range(runs):
        rng = np.random.default_rng([seed, k])
        durations, links = draw_hooks(variability, schedule, rng)
        if routing is not None:
            durations = _both(durations, routing(np.random.default_rng([seed, k, ROUTING_STREAM])))
        makespan, bubble = run_step(durations, links)
        makespans.append(makespan)
        bubbles.append(bubble)
        if progress is not None:
            progress(1)
    return MonteCarlo(seed, tuple(makespans), tuple(bubbles))


def _both(first: DurationHook | None, second: DurationHook) -> DurationHook:
    """Two duration factors, multiplied."""
    if first is None:
        return second
    return lambda device, action: first(device, action) * second(device, action)
