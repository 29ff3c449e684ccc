"""Routing as a source of variation: each microbatch's MoE layers see their own loads.

A deterministic step prices every MoE layer at the router's expected loads
(``pipesim.cluster.expert_load``). A real router's loads differ from microbatch to
microbatch and from layer to layer, and each MoE layer waits for its slowest expert-
parallel rank, so a Monte Carlo step draws them: for every model stage and microbatch,
one load vector per MoE layer of the stage (``drawn_load_factors``). The stage's routed-
expert GEMMs then take the mean drawn ``load_factor`` of its layers times their even-load
time, and each layer's dispatch and combine are priced at its own factor. What this
changes in a pass becomes a factor on its duration (``routing_hook``, the engine's
``duration_scale``): the F, I and B of one microbatch on one stage share its draws, and
W changes with the experts' GEMMs alone.

Every stage and microbatch is drawn, in that order, from the generator it is given, so a
seed gives the same step.
"""

from __future__ import annotations

import numpy as np

from pipesim.cluster.expert_load import drawn_load_factors
from pipesim.cluster.expert_parallel import ExpertParallelCosts
from pipesim.schedules.columns import ATOM_CODE
from pipesim.schedules.ir import Action, Kind, Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.variability import DurationHook


def varies(ep: ExpertParallelCosts | None) -> bool:
    """Whether drawn routing can change a step: experts spread over several ranks, or a
    capacity that may drop copies."""
    return ep is not None and (ep.degree > 1 or ep.moe.capacity_factor is not None)


def routing_factors(
    ep: ExpertParallelCosts, costs: Costs, microbatches: int, rng: np.random.Generator
) -> np.ndarray:
    """``factor[kind, stage, microbatch]``: each pass's drawn duration over its
    deterministic one (kinds in ``ATOM_CODE`` order: F, B, I, W)."""
    stages = len(ep.layers)
    factor = np.ones((len(ATOM_CODE), stages, microbatches))
    expected = ep.load.load_factor
    for k, layers in enumerate(ep.layers):
        if not layers:
            continue
        drawn = drawn_load_factors(ep.moe, ep.degree, ep.tokens, layers * microbatches, rng)
        drawn = drawn.reshape(microbatches, layers)
        gemms = drawn.mean(axis=1) - expected  # per microbatch, of the even-load GEMMs
        a2a = np.zeros(microbatches)
        if ep.degree > 1:
            times = np.vectorize(ep.all_to_all.ms)(drawn)
            a2a = 2 * times.sum(axis=1) - ep.forward_ms[k]  # dispatch and combine
        f_ms, i_ms, w_ms = ep.experts_ms[k]
        again = 2 if ep.recompute else 1
        forward = f_ms * gemms + a2a
        inputs = i_ms * gemms + again * a2a
        weights = w_ms * gemms
        backward = inputs + weights
        for kind, change, base in (
            (Kind.F, forward, costs.forward_ms[k]),
            (Kind.B, backward, costs.backward_ms[k]),
            (Kind.I, inputs, costs.backward_input_ms[k]),
            (Kind.W, weights, costs.backward_weight_ms[k]),
        ):
            if base > 0:
                factor[ATOM_CODE[kind], k] = np.maximum(base + change, 0.0) / base
    return factor


def routing_hook(
    ep: ExpertParallelCosts, schedule: Schedule, costs: Costs, rng: np.random.Generator
) -> DurationHook:
    """One step's drawn routing as the engine's ``duration_scale``: an action's factor is
    its atoms' mean (an overlapped F&B pair averages its two parts, as other noise does)."""
    factor = routing_factors(ep, costs, schedule.microbatches, rng)
    stage_of = [schedule.model_stage(s) for s in range(schedule.stages)]
    cache: dict[Action, float] = {}

    def scale(device: int, action: Action) -> float:
        if action not in cache:
            parts = [
                factor[ATOM_CODE[atom.kind], stage_of[atom.stage], atom.microbatch]
                for atom in action.atoms
            ]
            cache[action] = float(sum(parts) / len(parts))
        return cache[action]

    return scale


__all__ = ["routing_factors", "routing_hook", "varies"]
