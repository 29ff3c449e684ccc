"""A MoE step's expert parallelism in numbers, for the report: where the EP group sits, how
even the routing is, and what the all-to-alls cost.

Each stage's F and I (or B) hold its all-to-alls (``pipesim.cluster.expert_parallel``);
a device's all-to-all time in a step is their sum over the F, I and B actions it runs. ``all_to_all_share`` is the largest of those over the step time:
what the step would lose to exposed dispatch and combine on the busiest device, before any
overlap; ``exposed_all_to_all_share`` what it loses after the schedule's overlap.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipesim.analysis.exposure import device_exposed_ms
from pipesim.scenario.build import Scenario
from pipesim.schedules.columns import ATOM_CODE, columns
from pipesim.schedules.ir import Kind
from pipesim.sim.trace import Trace


def device_all_to_all_ms(scenario: Scenario) -> tuple[float, ...]:
    """Each device's all-to-all time in one step (ms; zeros without expert parallelism):
    every F, I and B it runs holds its stage's share."""
    ep, schedule = scenario.expert_parallel, scenario.schedule
    if ep is None or ep.degree == 1:
        return (0.0,) * schedule.devices
    table = columns(schedule)
    group = np.asarray([schedule.model_stage(s) for s in range(schedule.stages)])[table.stage]
    per_kind = np.zeros((len(ATOM_CODE), len(ep.forward_ms)))
    per_kind[ATOM_CODE[Kind.F]] = ep.forward_ms
    per_kind[ATOM_CODE[Kind.B]] = per_kind[ATOM_CODE[Kind.I]] = ep.backward_input_ms
    held = per_kind[table.kind, group]
    return tuple(np.bincount(table.device, weights=held, minlength=schedule.devices).tolist())


def step_all_to_all_ms(scenario: Scenario, trace: Trace) -> tuple[float, ...]:
    """Each device's all-to-all time the step pays (ms): what its compute waits on where
    the stages have sub-layer parts (the schedule's overlap taken off,
    ``pipesim.analysis.exposure``), else all of it (``device_all_to_all_ms``)."""
    if scenario.costs.moe_parts is None:
        return device_all_to_all_ms(scenario)
    return device_exposed_ms(trace, scenario.schedule, scenario.costs)


def moe_fields(
    scenario: Scenario, step_time_ms: float, trace: Trace | None = None
) -> dict[str, Any] | None:
    """The ``moe`` section of a run's JSON (None for a model without MoE layers): the EP
    layout, the routing's load (``load_factor``, ``imbalance``, ``dropped_fraction``), one
    dispatch's bytes per rank and time, each stage's all-to-all time in F and in I, and the
    busiest device's all-to-all time per step and its share of the step. Given the step's
    ``trace``, under expert parallelism also the most any device's compute waits on
    all-to-alls in the step (``exposed_all_to_all_ms_per_step``: what the schedule's
    overlap left exposed, ``pipesim.analysis.exposure``) and its share of the step."""
    ep = scenario.expert_parallel
    if ep is None:
        return None
    per_step = max(device_all_to_all_ms(scenario), default=0.0)
    a2a = ep.all_to_all
    exposed = {}
    if trace is not None and scenario.costs.moe_parts is not None:
        most = max(device_exposed_ms(trace, scenario.schedule, scenario.costs), default=0.0)
        exposed = {
            "exposed_all_to_all_ms_per_step": most,
            "exposed_all_to_all_share": most / step_time_ms if step_time_ms > 0 else 0.0,
        }
    return {
        "expert_parallel": ep.degree,
        "expert_tensor": ep.tensor,
        "placement": ep.placement(),
        "load_factor": ep.load.load_factor,
        "imbalance": ep.load.imbalance,
        "dropped_fraction": ep.load.dropped_fraction,
        "all_to_all_intra_node_bytes": a2a.intra_bytes if ep.degree > 1 else 0.0,
        "all_to_all_inter_node_bytes": a2a.inter_bytes if ep.degree > 1 else 0.0,
        "all_to_all_ms": a2a.ms(ep.load.load_factor),
        "all_to_all_forward_ms": list(ep.forward_ms),
        "all_to_all_backward_input_ms": list(ep.backward_input_ms),
        "all_to_all_ms_per_step": per_step,
        "all_to_all_share": per_step / step_time_ms if step_time_ms > 0 else 0.0,
        "buffer_bytes": ep.buffer_bytes,
        **exposed,
    }


__all__ = ["device_all_to_all_ms", "moe_fields", "step_all_to_all_ms"]
