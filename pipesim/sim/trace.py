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

import itertools
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from pipesim.schedules.ir import Action, Kind, Schedule
from pipesim.sim.costs import Costs

KIND_CODES: tuple[str, ...] = ("F", "B", "I", "W", "OVERLAP_F_B", "SEND_F", "SEND_B", "ALLREDUCE")
KIND_CODE = {Kind(k): i for i, k in enumerate(KIND_CODES[:5])}
SEND_F, SEND_B, ALLREDUCE = 5, 6, 7
ROWS_PER_BLOCK = 65536
COMPUTE, COMM = 0, 1


class TraceBuilder:
    """Collects rows while the engine runs; ``build()`` freezes them into a Trace.

    A row is ``(device, lane, stage, microbatch, kind code, start, end, peer)``; the engine
    appends to ``rows`` and ``actions`` directly (its hot loop). Chunks and the memory
    timelines are derived afterwards, in bulk.
    """

    def __init__(self, devices: int) -> None:
        self.devices = devices
        self.rows: list[tuple] = []
        self.blocks: list[np.ndarray] = []
        self.actions: list[Action] = []

    def pack(self) -> None:
        """Move the collected row tuples into a compact NumPy block (8 floats a row)."""
        flat = itertools.chain.from_iterable(self.rows)
        self.blocks.append(np.fromiter(flat, np.float64, count=8 * len(self.rows)).reshape(-1, 8))
        self.rows.clear()

    def build(self, schedule: Schedule, costs: Costs) -> Trace:
        self.pack()
        table = np.concatenate(self.blocks) if len(self.blocks) > 1 else self.blocks[0]
        ints = table[:, :5].astype(np.int64)
        peer = table[:, 7].astype(np.int64)
        stage = ints[:, 2]
        chunk_of = np.array([schedule.chunk(s) for s in range(schedule.stages)] + [-1])
        return Trace(
            devices=self.devices,
            device=ints[:, 0],
            lane=ints[:, 1],
            stage=stage,
            chunk=chunk_of[stage],  # stage -1 (an overlapped pair) picks the trailing -1
            microbatch=ints[:, 3],
            kind=ints[:, 4],
            peer=peer,
            start=table[:, 5].copy(),
            end=table[:, 6].copy(),
            actions=self.actions,
            memory=memory_timelines(self.devices, ints, table, self.actions, schedule, costs),
        )


def memory_timelines(devices, ints, table, actions, schedule: Schedule, costs: Costs):
    """Activation bytes and microbatch-chunks in flight on each device over time.

    An activation is taken when its F starts; a full B gives it all back when it ends; a
    split backward gives back all but ``weight_grad_memory_bytes`` when I ends and the rest
    when W ends. Inference (no backward at all) keeps an activation only while its F runs.
    At one instant a device first gives back (an action that ends) and then takes (the
    next action that starts), as it runs them in that order.
    """
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
        if self.kind[row] == ALLREDUCE:
            return "gradient all-reduce"
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
