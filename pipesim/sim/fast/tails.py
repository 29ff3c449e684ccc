"""End-of-step work in the fast evaluator's Trace: each device's gradient all-reduce and
optimizer step, when they run and what released them, as the engine runs them (after the
pipeline flush, or as soon as the device falls free), and what they add to the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from pipesim.sim.fast.index import ScheduleIndex
from pipesim.sim.fast.kernel import SweepResult
from pipesim.sim.trace import END_OF_STEP, Cause, RowKind


@dataclass(frozen=True, slots=True)
class Tails:
    device: np.ndarray
    start: np.ndarray
    end: np.ndarray
    cause: np.ndarray
    ref: np.ndarray  # the reference the cause names (-1: none)
    order: np.ndarray  # positions in the order their clocks were set (ties at one end)
    kind: np.ndarray | None = None  # RowKind codes (None: not cut yet, ``tail_parts``)
    after: np.ndarray | None = None  # the tail row whose end releases it (-1: ``ref``)


def device_tails(index: ScheduleIndex, tail_ms, after_flush: bool, sweep: SweepResult, node_rank):
    """End-of-step work on each device with a positive ``tail_ms``: after the flush, or
    as soon as its own device falls free.

    Devices finish in order of the time they fall free (``sweep.free``, freed by
    ``sweep.free_ref``), then of their last row (``node_rank``: each node's rank in row
    order). The flush names the last to finish, which also starts its work first; the
    others follow in the order they finished, as the engine's flush event wakes them.
    """
    devices = index.devices
    work = np.asarray(tail_ms if tail_ms is not None else [0.0] * devices, dtype=np.float64)
    device = np.flatnonzero(work > 0)
    if not len(device):
        empty = np.zeros(0, dtype=np.int64)
        return Tails(empty, np.zeros(0), np.zeros(0), empty.astype(np.int8), empty, empty)
    stops = np.asarray(index.bounds[1:], dtype=np.int64)
    busy = stops > np.asarray(index.bounds[:-1], dtype=np.int64)  # has any node
    free, ref = sweep.free, sweep.free_ref
    rank = np.where(busy, node_rank[np.maximum(stops - 1, 0)] if len(node_rank) else -1, -1)
    finished = np.lexsort((rank, free))  # devices in the order they finish
    if after_flush:
        trigger = int(finished[-1])  # some device has a tail, so there is one
        finished = np.concatenate([[trigger], finished[:-1]])
        named = int(ref[trigger]) if busy[trigger] else -1
        start = np.full(devices, float(free.max()))
        cause = np.full(devices, Cause.FLUSH, dtype=np.int8)
        refs = np.full(devices, named, dtype=np.int64)
    else:
        start, refs = free, ref
        nodes = len(index.node_device)
        cause = np.where(refs >= nodes, Cause.SENDING, Cause.DEVICE).astype(np.int8)
        cause[refs < 0] = Cause.START
    position = np.full(devices, -1, dtype=np.int64)
    position[device] = np.arange(len(device))
    order = position[finished]
    order = order[order >= 0]
    return Tails(
        device, start[device], start[device] + work[device], cause[device], refs[device], order
    )


def tail_parts(tails: Tails, tail_ms, optimizer_ms: Sequence[float] | None) -> Tails:
    """Each device's end-of-step work cut into its parts, as the engine cuts it: the
    gradient all-reduce (what is not the optimizer step, where any) from the work's start,
    then the optimizer step (``optimizer_ms``, where any) to its end, caused by the
    all-reduce row before it. Among rows that end together, all-reduce rows come first."""
    if not len(tails.device):
        return replace(tails, kind=tails.order, after=tails.order)
    work = np.asarray(tail_ms, dtype=np.float64)[tails.device]
    step = np.zeros(len(work))
    if optimizer_ms is not None:
        step = np.asarray(optimizer_ms, dtype=np.float64)[tails.device]
    reduced = tails.start + (work - step)
    reduce, optimize = reduced > tails.start, step > 0
    count = int(reduce.sum())
    row_of = np.cumsum(reduce) - 1, count + np.cumsum(optimize) - 1  # per device's tail
    follows = np.where(reduce, row_of[0], -1)
    sizes = [count, int(optimize.sum())]
    return Tails(
        device=np.concatenate([tails.device[reduce], tails.device[optimize]]),
        start=np.concatenate([tails.start[reduce], np.maximum(reduced, tails.start)[optimize]]),
        end=np.concatenate([reduced[reduce], tails.end[optimize]]),
        cause=np.concatenate(
            [tails.cause[reduce], np.where(reduce, Cause.DEVICE, tails.cause)[optimize]]
        ).astype(np.int8),
        ref=np.concatenate([tails.ref[reduce], tails.ref[optimize]]),
        order=np.concatenate(
            [
                row_of[0][tails.order[reduce[tails.order]]],
                row_of[1][tails.order[optimize[tails.order]]],
            ]
        ),
        kind=np.repeat(np.array([RowKind.ALLREDUCE, RowKind.OPTIMIZER], dtype=np.int64), sizes),
        after=np.concatenate([np.full(count, -1, dtype=np.int64), follows[optimize]]),
    )


def end_of_step_ms(tails: Tails, devices: int) -> dict[RowKind, np.ndarray]:
    """Per part of the end-of-step work, its time on each device (``Trace.end_of_step_ms``;
    a device has at most one row of each part)."""
    per_kind = {}
    for kind in END_OF_STEP:
        rows = tails.kind == kind
        durations = tails.end[rows] - tails.start[rows]
        per_kind[kind] = np.bincount(tails.device[rows], weights=durations, minlength=devices)
    return per_kind


__all__ = ["Tails", "device_tails", "end_of_step_ms", "tail_parts"]
