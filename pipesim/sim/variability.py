"""Stochastic variation: how a schedule holds up when the hardware is not a metronome.

A simulated step with fixed costs is one sample of a noisy process. On a real cluster a
kernel takes a little longer now and then, one GPU runs hot and throttles, a link is
shared with another job, and microbatches carry sequences of different lengths. A Monte
Carlo study runs the same step many times, each time multiplying every duration by a
random factor, and reports the spread of the results (p50, p90, p99).

The factors, all with mean 1 unless a straggler slows a device on purpose:

* per-kind noise on each action: lognormal with a given coefficient of variation
  ``cv`` (sigma = sqrt(log(1 + cv^2)), mu = -sigma^2 / 2, so the mean stays 1), a
  normal truncated to positive values, draws from measured samples, or the p10-p90
  spread a profile measured per stage;
* stragglers: device ``d`` runs ``factor`` times slower for a whole step, with
  ``probability`` per step;
* link jitter: each transfer's time is multiplied by its own factor;
* per-microbatch factors (variable sequence lengths): every action of microbatch ``i``
  is scaled by ``microbatch_scale[i]`` (a list, repeated if shorter than the number of
  microbatches, or one draw per microbatch from a distribution).

Run ``k`` of a study with seed ``s`` draws from ``numpy.random.default_rng([s, k])``, so
a run does not depend on how many runs the study has, and the same seed gives the same
numbers. Zero variability hands the engine no hooks at all, so it reproduces the
deterministic step exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pipesim.schedules.ir import Action, Kind, Schedule

DISTRIBUTIONS = ("lognormal", "normal", "empirical")
# z-score of the 90th percentile of a standard normal (used to read a p10-p90 band)
_Z90 = 1.2815515655446004


@dataclass(frozen=True, slots=True)
class Noise:
    """Random factors with mean 1.

    ``cv`` is the coefficient of variation (standard deviation / mean); ``cv_by_stage``,
    when set, gives one per model stage instead. ``empirical`` draws from ``samples``
    (rescaled to mean 1) with replacement.
    """

    distribution: str = "lognormal"
    cv: float = 0.0
    samples: tuple[float, ...] | None = None
    cv_by_stage: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(
                f"unknown distribution {self.distribution!r}; allowed: {', '.join(DISTRIBUTIONS)}"
            )
        if self.cv < 0 or any(c < 0 for c in self.cv_by_stage or ()):
            raise ValueError(f"cv must be >= 0, got {self.cv}")
        if self.distribution == "empirical" and not self.samples:
            raise ValueError("the empirical distribution needs a non-empty list of samples")
        if self.samples is not None and any(v <= 0 for v in self.samples):
            raise ValueError("samples must be > 0")

    @property
    def is_zero(self) -> bool:
        if self.distribution == "empirical":
            return len(set(self.samples or ())) <= 1
        return self.cv == 0 and not any(self.cv_by_stage or ())

    def draw(
        self, rng: np.random.Generator, count: int, stages: np.ndarray | None = None
    ) -> np.ndarray:
        """``count`` factors; ``stages`` (model stage per draw) selects ``cv_by_stage``."""
        if self.is_zero:
            return np.ones(count)
        if self.distribution == "empirical":
            values = np.asarray(self.samples, dtype=np.float64)
            return rng.choice(values / values.mean(), size=count)
        cv = self.cv
        if self.cv_by_stage is not None:
            if stages is None:
                raise ValueError("cv_by_stage needs the model stage of each draw")
            cv = np.asarray(self.cv_by_stage, dtype=np.float64)[stages]
        if self.distribution == "lognormal":
            return lognormal_factors(rng, cv, count)
        return truncated_normal_factors(rng, cv, count)


def lognormal_factors(rng: np.random.Generator, cv: float | np.ndarray, count: int) -> np.ndarray:
    """Lognormal factors with mean 1 and coefficient of variation ``cv``."""
    sigma = np.sqrt(np.log1p(np.square(cv)))
    return np.exp(rng.normal(-0.5 * sigma**2, sigma, size=count))


def truncated_normal_factors(
    rng: np.random.Generator, cv: float | np.ndarray, count: int
) -> np.ndarray:
    """Normal(1, cv) factors; a draw at or below 0 is drawn again (a duration stays positive)."""
    cv = np.broadcast_to(np.asarray(cv, dtype=np.float64), (count,))
    values = rng.normal(1.0, cv)
    bad = values <= 0
    while bad.any():
        values[bad] = rng.normal(1.0, cv[bad])
        bad = values <= 0
    return values


def cv_from_spread(median_ms: float, p10_ms: float, p90_ms: float) -> float:
    """The cv of a lognormal whose p10 and p90 sit where a measurement put them.

    A lognormal's p90/p10 ratio is exp(2 * 1.2816 * sigma), so sigma = ln(p90/p10) / 2.563;
    its cv is sqrt(exp(sigma^2) - 1). The median only guards against empty measurements.
    """
    if median_ms <= 0 or p10_ms <= 0 or p90_ms <= p10_ms:
        return 0.0
    sigma = math.log(p90_ms / p10_ms) / (2 * _Z90)
    return math.sqrt(math.expm1(sigma**2))


@dataclass(frozen=True, slots=True)
class Straggler:
    """Device ``device`` runs ``factor`` times slower for a step, with ``probability``."""

    device: int
    factor: float
    probability: float = 1.0

    @property
    def is_zero(self) -> bool:
        return self.factor == 1.0 or self.probability == 0.0


@dataclass(frozen=True, slots=True)
class Variability:
    """Everything that varies from step to step; ``Variability()`` varies nothing.

    ``noise`` maps an action kind (F, B, I, W) to its Noise; an overlapped F+B pair takes
    the mean of its two parts' factors.
    """

    noise: tuple[tuple[Kind, Noise], ...] = ()
    stragglers: tuple[Straggler, ...] = ()
    link_jitter: Noise | None = None
    microbatch_scale: tuple[float, ...] | Noise | None = None

    @property
    def varies_durations(self) -> bool:
        mb = self.microbatch_scale
        mb_zero = (
            mb is None
            or (isinstance(mb, Noise) and mb.is_zero)
            or (isinstance(mb, tuple) and all(v == 1.0 for v in mb))
        )
        return not (
            all(n.is_zero for _, n in self.noise)
            and all(s.is_zero for s in self.stragglers)
            and mb_zero
        )

    @property
    def varies_links(self) -> bool:
        return self.link_jitter is not None and not self.link_jitter.is_zero

    @property
    def is_zero(self) -> bool:
        return not (self.varies_durations or self.varies_links)


DurationHook = Callable[[int, Action], float]
LinkHook = Callable[[int, int], float]


def draw_hooks(
    variability: Variability, schedule: Schedule, rng: np.random.Generator
) -> tuple[DurationHook | None, LinkHook | None]:
    """One step's random factors, as the engine's ``duration_scale`` and ``link_scale``.

    Factors are drawn up front, in schedule order (device by device, action by action),
    so a run's numbers depend only on its generator, never on event order. A hook that
    would always return 1 is None.
    """
    durations = _duration_hook(variability, schedule, rng) if variability.varies_durations else None
    links = _link_hook(variability.link_jitter, rng) if variability.varies_links else None
    return durations, links


def _duration_hook(variability: Variability, schedule: Schedule, rng) -> DurationHook:
    slow = np.ones(schedule.devices)
    for straggler in variability.stragglers:
        if straggler.device < schedule.devices and rng.random() < straggler.probability:
            slow[straggler.device] *= straggler.factor
    per_microbatch = _microbatch_factors(variability.microbatch_scale, schedule.microbatches, rng)
    atoms = [
        (device, action, atom)
        for device, actions in enumerate(schedule.device_actions)
        for action in actions
        for atom in action.atoms
    ]
    factor = np.ones(len(atoms))
    kinds = np.array([str(atom.kind) for _, _, atom in atoms])
    stages = np.array([schedule.model_stage(atom.stage) for _, _, atom in atoms], dtype=np.int64)
    for kind, noise in variability.noise:
        chosen = np.flatnonzero(kinds == str(kind))
        if len(chosen) and not noise.is_zero:
            factor[chosen] = noise.draw(rng, len(chosen), stages[chosen])
    microbatch = np.array([atom.microbatch for _, _, atom in atoms], dtype=np.int64)
    factor *= per_microbatch[microbatch] * slow[[d for d, _, _ in atoms]]
    table: dict[tuple[int, Action], list[float]] = {}
    for (device, action, _), value in zip(atoms, factor.tolist(), strict=True):
        table.setdefault((device, action), []).append(value)
    scale = {key: sum(values) / len(values) for key, values in table.items()}
    return lambda device, action: scale[(device, action)]


def _microbatch_factors(
    spec: tuple[float, ...] | Noise | None, microbatches: int, rng
) -> np.ndarray:
    if spec is None:
        return np.ones(microbatches)
    if isinstance(spec, Noise):
        return spec.draw(rng, microbatches)
    return np.resize(np.asarray(spec, dtype=np.float64), microbatches)


def _link_hook(jitter: Noise, rng: np.random.Generator) -> LinkHook:
    """Each transfer draws its own factor, in the order the engine sends them."""
    return lambda src, dst: float(jitter.draw(rng, 1)[0])
