"""Exporters: a Trace as Chrome's JSON trace format (for Perfetto) and as CSV text.

They return data; writing files is left to the caller.

A Chrome trace of a large run has a million events, so it is kept small: times in
microseconds rounded to the nanosecond, an event's name and kind (``cat``) only, with
``args`` where they say more than the name (the chunk, where a device holds several), and
an activation-memory counter event only where the value changes. ``to_chrome_trace``
gives it as a dict (to merge two traces); ``chrome_trace_json`` writes the same events as
compact JSON text, row by row, without a dict per event.

A MoE step's actions may also come with their sub-layer parts
(``pipesim.sim.sublayer_rows``): attention and experts then show as slices nested under
their action on the compute thread, and the dispatch and combine all-to-alls on a third
thread of each device, its all-to-all stream. Without them the trace is as it always was.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator, Sequence
from itertools import chain
from json import dumps
from json.encoder import encode_basestring as quoted

import numpy as np

from pipesim.sim.memory import MemoryTimeline
from pipesim.sim.sublayer_rows import SublayerRows
from pipesim.sim.sublayers import Stream
from pipesim.sim.trace import KIND_CODES, Lane, Trace

US_PER_MS = 1000.0
NS_DIGITS = 3  # microseconds kept to the nanosecond
COMPACT = (",", ":")
ALL_TO_ALL_TID = 2  # a device's all-to-all stream, beside compute (0) and comm (1)


def to_chrome_trace(
    trace: Trace,
    label: str = "pipesim",
    pid_offset: int = 0,
    memory: Sequence[MemoryTimeline] = (),
    names: Sequence[str] | None = None,
    sublayers: SublayerRows | None = None,
) -> dict:
    """Chrome trace event format (object form) for Perfetto / chrome://tracing.

    One process per device (named by ``M`` events), compute on thread 0 and communication
    (end-of-step work too) on thread 1, ``ph: X`` complete events in microseconds, and an
    activation-memory counter track (``ph: C``) per device when ``memory`` timelines are
    given. ``pid_offset`` lets two traces (measured and simulated) sit side by side in one
    file. ``names`` replaces the rows' IR names (a decode pipeline's ``t3 g1``).
    ``sublayers``: a MoE step's parts (module docstring), all-to-alls on thread 2.
    """
    events = [
        event
        for d in range(trace.devices)
        for event in device_metadata(d + pid_offset, f"{label}: device {d}", sublayers)
    ]
    events += row_events(trace, pid_offset, names)
    events += [_sublayer_event(*part) for part in _sublayer_parts(sublayers, pid_offset)]
    events += memory_counters(memory, pid_offset)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"generator": label}}


def chrome_trace_json(
    trace: Trace,
    label: str = "pipesim",
    pid_offset: int = 0,
    memory: Sequence[MemoryTimeline] = (),
    names: Sequence[str] | None = None,
    sublayers: SublayerRows | None = None,
) -> str:
    """``to_chrome_trace`` as compact JSON text, the same events, each written as text."""
    metadata = (
        dumps(event, separators=COMPACT)
        for d in range(trace.devices)
        for event in device_metadata(d + pid_offset, f"{label}: device {d}", sublayers)
    )
    parts = (
        dumps(_sublayer_event(*part), separators=COMPACT)
        for part in _sublayer_parts(sublayers, pid_offset)
    )
    rows = _row_texts(trace, pid_offset, names)
    events = ",".join(chain(metadata, rows, parts, _counter_texts(memory, pid_offset)))
    tail = dumps({"displayTimeUnit": "ms", "otherData": {"generator": label}}, separators=COMPACT)
    return '{"traceEvents":[' + events + "]," + tail[1:]


def gzipped(text: str) -> bytes:
    """``text`` as gzip bytes (a ``.gz`` trace; Perfetto opens it as it is), the same bytes
    for the same text."""
    return gzip.compress(text.encode(), compresslevel=6, mtime=0)


def device_metadata(pid: int, name: str, sublayers: SublayerRows | None = None) -> list[dict]:
    """The ``M`` events that name a device's process and its two threads (three with a MoE
    step's ``sublayers``: its all-to-all stream) and keep the processes in device order."""

    def meta(kind: str, tid: int, args: dict) -> dict:
        return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args}

    events = [
        meta("process_name", 0, {"name": name}),
        meta("process_sort_index", 0, {"sort_index": pid}),
        meta("thread_name", Lane.COMPUTE, {"name": "compute"}),
        meta("thread_name", Lane.COMM, {"name": "comm"}),
    ]
    if sublayers is not None:
        events.append(meta("thread_name", ALL_TO_ALL_TID, {"name": "all-to-all stream"}))
    return events


def _sublayer_parts(sublayers: SublayerRows | None, pid_offset: int) -> Iterator[tuple]:
    """(name, kind, start us, duration us, process, thread) of every sub-layer part."""
    if sublayers is None:
        return
    start, end = _microseconds(sublayers.start), _microseconds(sublayers.end)
    columns = (
        sublayers.names,
        start.tolist(),
        np.round(end - start, NS_DIGITS).tolist(),
        (sublayers.device + pid_offset).tolist(),
        sublayers.stream.tolist(),
    )
    for name, ts, dur, pid, stream in zip(*columns, strict=True):
        tid = ALL_TO_ALL_TID if stream == Stream.COMM else Lane.COMPUTE
        yield name, name.partition(" ")[2], ts, dur, pid, int(tid)


def _sublayer_event(name: str, kind: str, ts: float, dur: float, pid: int, tid: int) -> dict:
    return {"name": name, "cat": kind, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": tid}


def row_events(trace: Trace, pid_offset: int = 0, names: Sequence[str] | None = None) -> list[dict]:
    """One complete (``X``) event per trace row, named as the row (a transfer names its
    receiver); ``args`` hold its chunk where a device holds several (not for end-of-step
    work, which has none)."""
    names, ts, dur, pid, tid, chunk = _row_columns(trace, pid_offset, names)
    events = []
    for i, kind in enumerate(trace.kind.tolist()):
        event = {
            "name": names[i],
            "cat": KIND_CODES[kind],
            "ph": "X",
            "ts": ts[i],
            "dur": dur[i],
            "pid": pid[i],
            "tid": tid[i],
        }
        if chunk is not None and chunk[i] >= 0:
            event["args"] = {"chunk": chunk[i]}
        events.append(event)
    return events


def memory_counters(memory: Sequence[MemoryTimeline], pid_offset: int = 0) -> list[dict]:
    """An ``activation memory`` counter (``C``) event per change of value, on each
    device's track."""
    return [
        {"name": "activation memory", "ph": "C", "ts": t, "pid": pid, "args": {"bytes": value}}
        for pid, t, value in _counter_points(memory, pid_offset)
    ]


def to_csv(trace: Trace) -> str:
    """The trace frame as CSV text (times in ms)."""
    return trace.frame.to_csv(index=False)


def _row_columns(trace: Trace, pid_offset: int, names: Sequence[str] | None):
    """Per row, as Python values: name, start and duration (us), process, thread, and the
    chunk (None where every row is on chunk 0 or none)."""
    start, end = _microseconds(trace.start), _microseconds(trace.end)
    duration = np.round(end - start, NS_DIGITS)
    chunked = bool(len(trace.chunk)) and int(trace.chunk.max()) > 0
    return (
        list(names) if names is not None else trace.names(),
        start.tolist(),
        duration.tolist(),
        (trace.device + pid_offset).tolist(),
        trace.lane.tolist(),
        trace.chunk.tolist() if chunked else None,
    )


def _row_texts(trace: Trace, pid_offset: int, names: Sequence[str] | None) -> Iterator[str]:
    """``row_events`` as JSON text, event by event."""
    names, ts, dur, pid, tid, chunk = _row_columns(trace, pid_offset, names)
    cats = [quoted(code) for code in KIND_CODES]
    head = [f'"cat":{cat},"ph":"X","ts":' for cat in cats]
    rows = zip(names, trace.kind.tolist(), ts, dur, pid, tid, strict=True)
    if chunk is None:
        for name, kind, t, d, p, lane in rows:
            yield f'{{"name":{quoted(name)},{head[kind]}{t!r},"dur":{d!r},"pid":{p},"tid":{lane}}}'
        return
    for (name, kind, t, d, p, lane), c in zip(rows, chunk, strict=True):
        args = f',"args":{{"chunk":{c}}}' if c >= 0 else ""
        yield (
            f'{{"name":{quoted(name)},{head[kind]}{t!r},"dur":{d!r},"pid":{p},"tid":{lane}{args}}}'
        )


def _counter_texts(memory: Sequence[MemoryTimeline], pid_offset: int) -> Iterator[str]:
    for pid, t, value in _counter_points(memory, pid_offset):
        yield (
            f'{{"name":"activation memory","ph":"C","ts":{t!r},"pid":{pid},'
            f'"args":{{"bytes":{value!r}}}}}'
        )


def _counter_points(
    memory: Sequence[MemoryTimeline], pid_offset: int
) -> Iterator[tuple[int, float, float]]:
    """(process, time in us, bytes) where a device's activation memory takes a new value
    (its first point, then each change; a repeated value draws nothing new)."""
    for d, timeline in enumerate(memory):
        values = timeline.activation_bytes.astype(float)
        changed = np.ones(len(values), dtype=bool)
        changed[1:] = values[1:] != values[:-1]
        times = _microseconds(timeline.time[changed]).tolist()
        for t, value in zip(times, values[changed].tolist(), strict=True):
            yield d + pid_offset, t, value


def _microseconds(ms: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(ms, dtype=np.float64) * US_PER_MS, NS_DIGITS)
