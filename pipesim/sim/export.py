"""Exporters: a Trace as Chrome's JSON trace format (for Perfetto) and as CSV text.

They return data; writing files is left to the caller.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.sim.memory import MemoryTimeline
from pipesim.sim.trace import COMM, COMPUTE, KIND_CODES, Trace


def to_chrome_trace(
    trace: Trace,
    label: str = "pipesim",
    pid_offset: int = 0,
    memory: Sequence[MemoryTimeline] = (),
) -> dict:
    """Chrome trace event format (object form) for Perfetto / chrome://tracing.

    One process per device (named by ``M`` events), compute on thread 0 and communication
    on thread 1, ``ph: X`` complete events in microseconds, and an activation-memory
    counter track (``ph: C``) per device when ``memory`` timelines are given. ``pid_offset`` lets two traces (measured and
    simulated) sit side by side in one file.
    """
    events: list[dict] = []
    for d in range(trace.devices):
        pid = d + pid_offset
        events += [
            {
                "name": "process_name",
                "ph": "M",
                "pid": pid,
                "tid": 0,
                "args": {"name": f"{label}: device {d}"},
            },
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": pid,
                "tid": 0,
                "args": {"sort_index": pid},
            },
            {
                "name": "thread_name",
                "ph": "M",
                "pid": pid,
                "tid": COMPUTE,
                "args": {"name": "compute"},
            },
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": COMM, "args": {"name": "comm"}},
        ]
    for i in range(len(trace.start)):
        start_us = float(trace.start[i]) * 1000.0
        events.append(
            {
                "name": trace.name(i),
                "cat": KIND_CODES[trace.kind[i]],
                "ph": "X",
                "ts": start_us,
                "dur": float(trace.end[i]) * 1000.0 - start_us,
                "pid": int(trace.device[i]) + pid_offset,
                "tid": int(trace.lane[i]),
                "args": {
                    "stage": int(trace.stage[i]),
                    "chunk": int(trace.chunk[i]),
                    "microbatch": int(trace.microbatch[i]),
                    **({"to_device": int(trace.peer[i])} if trace.lane[i] == COMM else {}),
                },
            }
        )
    for d, timeline in enumerate(memory):
        for t, value in zip(timeline.time, timeline.activation_bytes, strict=True):
            events.append(
                {
                    "name": "activation memory",
                    "ph": "C",
                    "ts": float(t) * 1000.0,
                    "pid": d + pid_offset,
                    "args": {"bytes": float(value)},
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"generator": label}}


def to_csv(trace: Trace) -> str:
    """The trace frame as CSV text (times in ms)."""
    return trace.frame.to_csv(index=False)
