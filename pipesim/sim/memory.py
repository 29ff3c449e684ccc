"""Memory over time: the activation bytes each device holds, derived from a Trace.

The engine records when actions start and end; what they take and give back is a
question of accounting, answered here, after the run, in bulk (NumPy).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipesim.schedules.ir import Kind, Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.trace import COMPUTE, KIND_CODE, Trace


@dataclass(frozen=True, slots=True)
class MemoryTimeline:
    """Activation bytes and in-flight count on one device after each change, in time order."""

    time: np.ndarray
    activation_bytes: np.ndarray
    inflight: np.ndarray


def memory_timelines(trace: Trace, schedule: Schedule, costs: Costs) -> tuple[MemoryTimeline, ...]:
    """Activation bytes and microbatch-chunks in flight on each device over time.

    An activation is taken when its F starts; a full B gives it all back when it ends; a
    split backward gives back all but ``weight_grad_memory_bytes`` when I ends and the rest
    when W ends. Inference (no backward at all) keeps an activation only while its F runs.
    At one instant a device first gives back (an action that ends) and then takes (the
    next action that starts), as it runs them in that order.
    """
    devices, actions = trace.devices, trace.actions
    ints = np.column_stack([trace.device, trace.lane, trace.stage, trace.microbatch, trace.kind])
    table = np.column_stack([ints, trace.start, trace.end]).astype(np.float64)
    model_stage = np.array([schedule.model_stage(s) for s in range(schedule.stages)] + [0])
    act = np.asarray(costs.activation_memory_bytes, dtype=np.float64)
    wgrad = np.asarray(costs.weight_grad_memory_bytes, dtype=np.float64)
    keeps = schedule.is_training
    compute = ints[:, 1] == COMPUTE
    index = np.flatnonzero(compute)
    kinds, stages = ints[index, 4], ints[index, 2]
    events: list[tuple[np.ndarray, ...]] = []  # (device, time, row, order, bytes, count)

    def add(rows, time, change_bytes, change_count, order):
        events.append(
            (ints[rows, 0], time, rows.astype(np.float64), np.full(len(rows), order),
             change_bytes, np.full(len(rows), change_count, dtype=np.float64))
        )  # fmt: skip

    def simple(code):
        chosen = kinds == code
        return index[chosen], model_stage[stages[chosen]]

    rows, ms = simple(KIND_CODE[Kind.F])
    add(rows, table[rows, 5], act[ms], 1, 0)
    if not keeps:
        add(rows, table[rows, 6], -act[ms], -1, 1)
    rows, ms = simple(KIND_CODE[Kind.B])
    add(rows, table[rows, 6], -act[ms], -1, 1)
    rows, ms = simple(KIND_CODE[Kind.I])
    add(rows, table[rows, 6], -(act[ms] - wgrad[ms]), -1, 1)
    rows, ms = simple(KIND_CODE[Kind.W])
    add(rows, table[rows, 6], -wgrad[ms], 0, 1)
    for row in index[kinds == KIND_CODE[Kind.OVERLAP_F_B]]:
        fwd, bwd = actions[row].sub_actions
        f_ms, b_ms = schedule.model_stage(fwd.stage), schedule.model_stage(bwd.stage)
        freed = act[b_ms] if bwd.kind == Kind.B else act[b_ms] - wgrad[b_ms]
        one = np.array([row])
        add(one, table[one, 5], act[[f_ms]], 1, 0)
        add(one, table[one, 6], np.array([-freed]), -1, 1)
    device, time, row, order, change, count = (np.concatenate(c) for c in zip(*events, strict=True))
    sort = np.lexsort((order, row, time, device))
    device, time, change, count = device[sort], time[sort], change[sort], count[sort]
    bounds = np.searchsorted(device, np.arange(devices + 1))
    timelines = []
    for d in range(devices):
        part = slice(bounds[d], bounds[d + 1])
        timelines.append(
            MemoryTimeline(
                time[part], np.cumsum(change[part]), np.cumsum(count[part]).astype(np.int64)
            )
        )
    return tuple(timelines)
