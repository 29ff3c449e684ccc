"""Runs and traces for the figure tests: small real runs, and a large synthetic trace
(thousands of devices, built with NumPy in milliseconds instead of simulated)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pipesim.schedules import get_schedule
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import simulate
from pipesim.sim.links import Link, Topology
from pipesim.sim.memory import MemoryTimeline, memory_timelines
from pipesim.sim.metrics import Accounting, Report, build_report
from pipesim.sim.trace import KIND_CODES, Lane, Trace

GIB = 2**30


def run(name, devices, microbatches, virtual_stages=1, static_gib=0.0, latency_ms=0.0, **costs):
    """(trace, report, memory) of a policy with uniform costs."""
    schedule = get_schedule(name, devices, microbatches, virtual_stages)
    cost = uniform_costs(schedule.model_stages, **costs)
    topology = Topology(devices, default=Link(latency_us=latency_ms * 1000)) if latency_ms else None
    trace = simulate(schedule, cost, topology)
    memory = memory_timelines(trace, schedule, cost)
    accounting = (
        Accounting(static_memory_bytes=(static_gib * GIB,) * devices) if static_gib else None
    )
    report = build_report(
        trace,
        schedule,
        cost,
        scenario="test",
        topology=topology,
        accounting=accounting,
        memory=memory,
    )
    return trace, report, memory


def synthetic(devices: int, microbatches: int) -> tuple[Trace, list[MemoryTimeline]]:
    """A GPipe-shaped trace (F 1 ms, B 2 ms) and memory timelines for many devices."""
    d = np.repeat(np.arange(devices), microbatches)
    i = np.tile(np.arange(microbatches), devices)
    f_start = (d + i).astype(float)
    b_start = (microbatches + 2 * devices - 2 - d + 2 * i).astype(float)
    count = 2 * len(d)
    trace = Trace(
        devices=devices,
        device=np.concatenate([d, d]),
        lane=np.full(count, Lane.COMPUTE),
        stage=np.concatenate([d, d]),
        chunk=np.zeros(count, dtype=np.int64),
        microbatch=np.concatenate([i, i]),
        kind=np.repeat([KIND_CODES.index("F"), KIND_CODES.index("B")], len(d)),
        peer=np.full(count, -1),
        start=np.concatenate([f_start, b_start]),
        end=np.concatenate([f_start + 1, b_start + 2]),
        actions=[],
    )
    memory = []
    for device in range(devices):
        rows = np.flatnonzero(trace.device == device)
        taken = np.where(trace.kind[rows] == 0, trace.start[rows], trace.end[rows])
        change = np.where(trace.kind[rows] == 0, 1.0, -1.0) * GIB
        order = np.argsort(taken, kind="stable")
        memory.append(
            MemoryTimeline(taken[order], np.cumsum(change[order]), np.zeros(len(rows), int))
        )
    return trace, memory


def synthetic_report(trace: Trace, template: Report) -> Report:
    """``template`` (a small real report) renamed and resized for a synthetic trace."""
    return replace(template, devices=trace.devices, makespan_ms=trace.makespan_ms, per_device=())
