"""The Trace: every compute action and transfer of one simulated step, with times.

A Trace is the engine's whole output, kept as columns (NumPy arrays) so a million-action
run stays small; ``trace.frame`` turns it into a pandas DataFrame with one row per
compute action or transfer:

``device, lane, stage, chunk, microbatch, kind, start, end, peer, name``

``lane`` is ``compute`` or ``comm``; ``start``/``end`` are milliseconds from the start
of the step; a transfer's ``device`` is its sender and ``peer`` its receiver (-1 for
compute). An overlapped pair has stage and microbatch -1 and its text form as name. The
trace also keeps, per device, the activation memory and the number of microbatch-chunks
in flight after every change (for memory-over-time plots and peaks).

Exporters here return data (a dict for Chrome's JSON trace format, CSV text); writing
files is left to the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from pipesim.schedules.ir import Action, Kind

KIND_CODES: tuple[str, ...] = ("F", "B", "I", "W", "OVERLAP_F_B", "SEND_F", "SEND_B")
KIND_CODE = {Kind(k): i for i, k in enumerate(KIND_CODES[:5])}
SEND_F, SEND_B = 5, 6
COMPUTE, COMM = 0, 1


class TraceBuilder:
    """Collects rows while the engine runs; ``build()`` freezes them into a Trace.

    A row is ``(device, lane, stage, chunk, microbatch, kind code, start, end, peer)``; a
    memory event is ``(time, change in activation bytes, change in in-flight count)``.
    The engine appends to ``rows``, ``actions`` and ``mem[device]`` directly (its hot loop).
    """

    def __init__(self, devices: int) -> None:
        self.devices = devices
        self.rows: list[tuple] = []
        self.actions: list[Action] = []
        self.mem: list[list[tuple[float, float, int]]] = [[] for _ in range(devices)]

    def compute(
        self, device: int, action: Action, start: float, end: float, chunk: list[int]
    ) -> None:
        stage = action.stage
        self.rows.append(
            (device, COMPUTE, stage, chunk[stage] if stage >= 0 else -1, action.microbatch,
             KIND_CODE[action.kind], start, end, -1)
        )  # fmt: skip
        self.actions.append(action)

    def transfer(
        self, src: int, dst: int, atom: Action, start: float, end: float, chunk: list[int]
    ) -> None:
        code = SEND_F if atom.kind == Kind.F else SEND_B
        self.rows.append(
            (src, COMM, atom.stage, chunk[atom.stage], atom.microbatch, code, start, end, dst)
        )
        self.actions.append(atom)

    def memory(self, device: int, time: float, delta_bytes: float, delta_inflight: int) -> None:
        self.mem[device].append((time, delta_bytes, delta_inflight))

    def build(self) -> Trace:
        if self.rows:
            ints = np.array([r[:6] + (r[8],) for r in self.rows], dtype=np.int64)
            times = np.array([r[6:8] for r in self.rows], dtype=np.float64)
        else:
            ints, times = np.zeros((0, 7), np.int64), np.zeros((0, 2))
        memory = []
        for events in self.mem:
            arr = np.array(events, dtype=np.float64).reshape(-1, 3)
            order = np.argsort(arr[:, 0], kind="stable")
            arr = arr[order]
            memory.append(
                MemoryTimeline(
                    arr[:, 0], np.cumsum(arr[:, 1]), np.cumsum(arr[:, 2]).astype(np.int64)
                )
            )
        return Trace(
            devices=self.devices,
            device=ints[:, 0],
            lane=ints[:, 1],
            stage=ints[:, 2],
            chunk=ints[:, 3],
            microbatch=ints[:, 4],
            kind=ints[:, 5],
            peer=ints[:, 6],
            start=times[:, 0],
            end=times[:, 1],
            actions=self.actions,
            memory=tuple(memory),
        )


@dataclass(frozen=True, slots=True)
class MemoryTimeline:
    """Activation bytes and in-flight count on one device after each change, in time order."""

    time: np.ndarray
    activation_bytes: np.ndarray
    inflight: np.ndarray


@dataclass(frozen=True)
class Trace:
    devices: int
    device: np.ndarray
    lane: np.ndarray
    stage: np.ndarray
    chunk: np.ndarray
    microbatch: np.ndarray
    kind: np.ndarray
    peer: np.ndarray
    start: np.ndarray
    end: np.ndarray
    actions: list[Action] = field(repr=False)
    memory: tuple[MemoryTimeline, ...] = field(repr=False)

    @property
    def makespan_ms(self) -> float:
        return float(self.end.max()) if len(self.end) else 0.0

    def name(self, row: int) -> str:
        """IR text of a row: ``2F0`` for compute, ``2F0->3`` for a transfer to device 3."""
        text = str(self.actions[row])
        return f"{text}->{self.peer[row]}" if self.lane[row] == COMM else text

    @cached_property
    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "device": self.device,
                "lane": np.where(self.lane == COMPUTE, "compute", "comm"),
                "stage": self.stage,
                "chunk": self.chunk,
                "microbatch": self.microbatch,
                "kind": np.asarray(KIND_CODES, dtype=object)[self.kind],
                "start": self.start,
                "end": self.end,
                "peer": self.peer,
                "name": [self.name(i) for i in range(len(self.start))],
            }
        )


def trace_from_frame(frame: pd.DataFrame, devices: int, actions: list[Action]) -> Trace:
    """Rebuild a Trace from a frame with the columns of ``Trace.frame`` (e.g. measured runs).

    Memory timelines are left empty: a measured timeline carries no allocation events.
    """
    codes = {k: i for i, k in enumerate(KIND_CODES)}
    empty = MemoryTimeline(np.zeros(0), np.zeros(0), np.zeros(0, np.int64))
    return Trace(
        devices=devices,
        device=frame["device"].to_numpy(np.int64),
        lane=np.where(frame["lane"].to_numpy() == "compute", COMPUTE, COMM),
        stage=frame["stage"].to_numpy(np.int64),
        chunk=frame["chunk"].to_numpy(np.int64),
        microbatch=frame["microbatch"].to_numpy(np.int64),
        kind=np.array([codes[k] for k in frame["kind"]], dtype=np.int64),
        peer=frame["peer"].to_numpy(np.int64),
        start=frame["start"].to_numpy(np.float64),
        end=frame["end"].to_numpy(np.float64),
        actions=list(actions),
        memory=tuple(empty for _ in range(devices)),
    )


# ---------------------------------------------------------------------------
# Exporters


def to_chrome_trace(trace: Trace, label: str = "pipesim", pid_offset: int = 0) -> dict:
    """Chrome trace event format (object form) for Perfetto / chrome://tracing.

    One process per device (named by ``M`` events), compute on thread 0 and communication
    on thread 1, ``ph: X`` complete events in microseconds, and an activation-memory
    counter track (``ph: C``) per device. ``pid_offset`` lets two traces (measured and
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
    for d, timeline in enumerate(trace.memory):
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
