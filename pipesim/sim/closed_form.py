"""Closed forms for the classic schedules, used to cross-check the engine.

With every stage costing the same (forward F, backward B per microbatch-chunk) and every
stage boundary costing the same hop time c (latency + bytes / bandwidth, no longer than F
or B, so messages never queue):

* GPipe and 1F1B, training, no latency: makespan = (m + p - 1)(F + B); bubble fraction
  (p - 1)/(m + p - 1) (GPipe paper); bubble overhead (p - 1)/m (Megatron-LM).
* GPipe with hop time c: the first microbatch crosses p - 1 hops forward and p - 1 back,
  (m + p - 1)(F + B) + 2(p - 1)c.
* Interleaved 1F1B with v chunks (m a multiple of p, no latency):
  (m v + p - 1)(F + B), bubble overhead (p - 1)/(v m) (Narayanan et al. 2021).
* Forward only (inference), GPipe/1F1B: (m + p - 1)F.

``closed_form`` returns None where none of these applies; pipesim then shows only the
simulated numbers.
"""

from __future__ import annotations

from pipesim.schedules.ir import Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.links import Topology


def closed_form(
    schedule: Schedule, costs: Costs, topology: Topology | None
) -> dict[str, float] | None:
    """Analytic makespan, bubble fraction and bubble overhead, or None if none applies."""
    latency_ms = _uniform_latency_ms(schedule, costs, topology)
    if latency_ms is None or costs.overhead_ms or not _uniform(costs, schedule.model_stages):
        return None
    p, m, s = schedule.devices, schedule.microbatches, schedule.stages
    v = s // p
    f, b = costs.forward_ms[0], costs.backward_ms[0]
    name = schedule.name.split(":")[0]
    if not schedule.is_training:
        if name in ("gpipe", "1f1b") and latency_ms == 0:
            return _summary((m + p - 1) * f, m * f, p)
        return None
    if name == "gpipe" or (name == "1f1b" and latency_ms == 0):
        return _summary((m + p - 1) * (f + b) + 2 * (p - 1) * latency_ms, m * (f + b), p)
    if name == "interleaved-1f1b" and latency_ms == 0 and m % p == 0:
        return _summary((m * v + p - 1) * (f + b), m * v * (f + b), p)
    return None


def _summary(makespan: float, busy: float, devices: int) -> dict[str, float]:
    return {
        "makespan_ms": makespan,
        "bubble_fraction": 1 - busy / makespan if makespan else 0.0,
        "bubble_overhead": makespan / busy - 1 if busy else 0.0,
    }


def _uniform(costs: Costs, stages: int) -> bool:
    return (
        all(len(set(values[:stages])) == 1 for values in (costs.forward_ms, costs.backward_ms))
        and costs.overlapped_fb_ms is None
    )


def _uniform_latency_ms(
    schedule: Schedule, costs: Costs, topology: Topology | None
) -> float | None:
    """The time of one hop when every stage boundary costs the same, else None.

    A hop is ``latency + bytes / bandwidth`` of the link; the closed forms also need it to
    be no longer than a forward or a backward, so that messages never queue on a link.
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
    hop = links.pop().transfer_ms(sizes.pop())
    if hop > min(costs.forward_ms[0], costs.backward_ms[0]) and schedule.microbatches > 1:
        return None  # messages would queue on the link
    return hop
