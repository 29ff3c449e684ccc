"""Exporters: a Trace as Chrome's JSON trace format (for Perfetto) and as CSV text.

They return data; writing files is left to the caller.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.sim.memory import MemoryTimeline
from pipesim.sim.trace import KIND_CODES, Lane, Trace

US_PER_MS = 1000.0


def to_chrome_trace(
    trace: Trace,
    label: str = "pipesim",
    pid_offset: int = 0,
    memory: Sequence[MemoryTimeline] = (),
    names: Sequence[str] | None = None,
) -> dict:
    """Chrome trace event format (object form) for Perfetto / chrome://tracing.

    One process per device (named by ``M`` events), compute on thread 0 and communication
    on thread 1, ``ph: X`` complete events in microseconds, and an activation-memory
    counter track (``ph: C``) per device when ``memory`` timelines are given.
    ``pid_offset`` lets two traces (measured and simulated) sit side by side in one file.
    ``names`` replaces the rows' IR names (a decode pipeline's ``t3 g1``).
    """
    events = [
        event
        for d in range(trace.devices)
        for event in device_metadata(d + pid_offset, f"{label}: device {d}")
    ]
    events += row_events(trace, pid_offset, names)
    events += memory_counters(memory, pid_offset)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"generator": label}}


def device_metadata(pid: int, name: str) -> list[dict]:
    """The ``M`` events that name a device's process and its two threads and keep the
    processes in device order."""

    def meta(kind: str, tid: int, args: dict) -> dict:
        return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args}

    return [
        meta("process_name", 0, {"name": name}),
        meta("process_sort_index", 0, {"sort_index": pid}),
        meta("thread_name", Lane.COMPUTE, {"name": "compute"}),
        meta("thread_name", Lane.COMM, {"name": "comm"}),
    ]


def row_events(trace: Trace, pid_offset: int = 0, names: Sequence[str] | None = None) -> list[dict]:
    """One complete (``X``) event per trace row; a transfer names its receiver."""
    columns = (
        trace.device,
        trace.lane,
        trace.stage,
        trace.chunk,
        trace.microbatch,
        trace.kind,
        trace.peer,
        trace.start,
        trace.end,
    )
    events = []
    for i, row in enumerate(zip(*(c.tolist() for c in columns), strict=True)):
        device, lane, stage, chunk, microbatch, kind, peer, start, end = row
        args = {"stage": stage, "chunk": chunk, "microbatch": microbatch}
        if lane == Lane.COMM:
            args["to_device"] = peer
        events.append(
            {
                "name": trace.name(i) if names is None else names[i],
                "cat": KIND_CODES[kind],
                "ph": "X",
                "ts": start * US_PER_MS,
                "dur": end * US_PER_MS - start * US_PER_MS,
                "pid": device + pid_offset,
                "tid": lane,
                "args": args,
            }
        )
    return events


def memory_counters(memory: Sequence[MemoryTimeline], pid_offset: int = 0) -> list[dict]:
    """An ``activation memory`` counter (``C``) event per change, on each device's track."""
    return [
        {
            "name": "activation memory",
            "ph": "C",
            "ts": t * US_PER_MS,
            "pid": d + pid_offset,
            "args": {"bytes": value},
        }
        for d, timeline in enumerate(memory)
        for t, value in zip(
            timeline.time.tolist(), timeline.activation_bytes.astype(float).tolist(), strict=True
        )
    ]


def to_csv(trace: Trace) -> str:
    """The trace frame as CSV text (times in ms)."""
    return trace.frame.to_csv(index=False)
