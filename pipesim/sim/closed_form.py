"""Closed forms for the classic schedules, used to cross-check the engine.

A policy whose makespan has a formula declares it in its registry entry
(``Policy.closed_form``: ``gpipe``, ``1f1b``, ``interleaved-1f1b``; see
``pipesim.schedules``), next to its generator. The formulas hold only when
every stage costs the same (forward F, backward B per microbatch-chunk) and every stage
boundary costs the same hop time c. Links follow LogGP: a message holds its link for
``bytes / bandwidth`` and arrives ``latency`` after that, so c = latency + bytes /
bandwidth, and messages never queue as long as the bandwidth part is no longer than F or
B (latency alone never queues). This module checks those conditions and calls the
policy's formula; it knows no schedule by name.

``closed_form`` returns None where no formula applies; pipesim then shows only the
simulated numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.schedules import closed_form_of
from pipesim.schedules.ir import Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.links import Topology


@dataclass(frozen=True, slots=True)
class Analytic:
    """What the closed form predicts: makespan, bubble fraction and bubble overhead."""

    makespan_ms: float
    bubble_fraction: float
    bubble_overhead: float


def closed_form(schedule: Schedule, costs: Costs, topology: Topology | None) -> Analytic | None:
    """Analytic makespan, bubble fraction and bubble overhead, or None if none applies."""
    formula = closed_form_of(schedule.name)
    if formula is None or costs.overhead_ms or not _uniform(costs, schedule.model_stages):
        return None
    hop_ms = _uniform_hop_ms(schedule, costs, topology)
    if hop_ms is None:
        return None
    p, m = schedule.devices, schedule.microbatches
    f, b = costs.forward_ms[0], costs.backward_ms[0]
    found = formula(p, m, schedule.stages // p, f, b, hop_ms, schedule.is_training)
    if found is None:
        return None
    makespan, busy = found
    return Analytic(
        makespan_ms=makespan,
        bubble_fraction=1 - busy / makespan if makespan else 0.0,
        bubble_overhead=makespan / busy - 1 if busy else 0.0,
    )


def _uniform(costs: Costs, stages: int) -> bool:
    return (
        all(len(set(values[:stages])) == 1 for values in (costs.forward_ms, costs.backward_ms))
        and costs.overlapped_fb_ms is None
    )


def _uniform_hop_ms(schedule: Schedule, costs: Costs, topology: Topology | None) -> float | None:
    """The time of one hop when every stage boundary costs the same, else None.

    A hop is ``latency + bytes / bandwidth`` of the link. Only the bandwidth part holds
    the link, so only it must be no longer than a forward or a backward for messages never
    to queue. Shared channels and blocking sends fall outside every formula.
    """
    if topology is None:
        return 0.0
    if not topology.comm_overlap or topology.channels:
        return None
    pairs = {(schedule.placement[s], schedule.placement[s + 1]) for s in range(schedule.stages - 1)}
    links = {topology.link(a, b) for a, b in pairs} | {topology.link(b, a) for a, b in pairs}
    sizes = set(costs.activation_bytes[: schedule.model_stages])
    if len(links) > 1 or len(sizes) > 1:
        return None
    if not links:
        return 0.0
    link = links.pop()
    nbytes = sizes.pop()
    hop_ms, occupancy_ms = link.transfer_ms(nbytes), link.occupancy_ms(nbytes)
    if occupancy_ms > min(costs.forward_ms[0], costs.backward_ms[0]) and schedule.microbatches > 1:
        return None  # messages would queue on the link
    return hop_ms
