"""The fast evaluator's Trace: rows, causes and their order, from the sweep's times.

The sweep (``pipesim.sim.fast``) yields only what the next step needs: every node's end
and every channel message's departure. The rest of a row follows from those in bulk:

* a node starts when its device falls free or its input arrives, whichever is later; the
  later one is its cause (the input only if strictly later, as in the engine), and the
  first node of a device with no late input starts at 0 with no cause;
* a message enters its channel when its producer ends, or when the message ahead of it
  on the channel leaves (strictly later: cause ``channel``), and arrives after latency;
* end-of-step work (``tail_ms``) starts at the flush or at its device's last end.

**Row order.** The engine numbers rows as its clock reaches them: a compute row when the
action ends, its transfers right after it, a tail row when it ends; among rows ending at
the same instant SimPy's event order decides. The fast evaluator keeps that order by
time and breaks ties as SimPy's event order does where it can tell: first the row whose
action became due first (its device free and its input sent), then in the order the
sweep computed them, tail rows last; so, as in the engine, a row comes after every row
it waits for, and each device's rows are in program order. Every analysis reads the trace through rows' times and causes,
which both orders share; only the choice among rows that end at exactly the same time
can differ (e.g. which of two rows ending at the makespan the critical path starts
from, or which row the flush names).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipesim.sim.fast_index import ScheduleIndex
from pipesim.sim.trace import (
    ALLREDUCE,
    CAUSE_CHANNEL,
    CAUSE_DEVICE,
    CAUSE_FLUSH,
    CAUSE_INPUT,
    CAUSE_PRODUCER,
    CAUSE_SENDING,
    CAUSE_START,
    COMM,
    COMPUTE,
    SEND_F,
    Trace,
)


@dataclass(frozen=True, slots=True)
class LinkTimes:
    """Per message: its channel (-1: delivered at once, same device or an ideal link),
    its time on the channel and its latency (ms); ``channels``: how many channels."""

    channel: np.ndarray
    occupancy_ms: np.ndarray
    latency_ms: np.ndarray
    channels: int


@dataclass(frozen=True, slots=True)
class Sweep:
    """What the sweep found: per node its duration and end (ms), per message the time it
    entered its channel (meaningless for messages delivered at once), and the link times."""

    duration: np.ndarray
    end: np.ndarray
    begin: np.ndarray
    links: LinkTimes
    overhead_ms: float
    hold: bool = False  # a send keeps its device busy until it arrives
    runs: np.ndarray | None = None  # (first, stop) node ranges in the order computed


@dataclass(slots=True)
class _Columns:
    """A block of rows under construction (nodes, transfers or tails)."""

    device: np.ndarray
    stage: np.ndarray
    microbatch: np.ndarray
    kind: np.ndarray
    start: np.ndarray
    end: np.ndarray
    peer: np.ndarray
    cause: np.ndarray
    cause_row: np.ndarray  # in the block's own terms until numbered (see build_trace)
    actions: np.ndarray


def build_trace(
    index: ScheduleIndex,
    sweep: Sweep,
    tail_ms: Sequence[float] | None,
    tail_after_flush: bool,
) -> Trace:
    """The Trace of the swept step, rows in the order the module doc describes.

    A cause names a *reference*: a node ``n`` (``n < nodes``) or a message ``k``
    (``nodes + k``); rows are numbered last, and each reference then becomes a row.
    """
    nodes = len(index.node_device)
    arrival = _arrivals(index, sweep)
    on_channel = np.flatnonzero(sweep.links.channel >= 0)
    release, release_ref = _releases(index, sweep, arrival, on_channel)
    start, cause, cause_ref, scheduled = _node_starts(index, sweep, release, release_ref, arrival)
    node_order = _node_order(sweep, scheduled)
    node_rank = np.empty(nodes, dtype=np.int64)
    node_rank[node_order] = np.arange(nodes)
    tails = _tails(index, tail_ms, tail_after_flush, (release, release_ref, node_rank))
    # Number the rows: units (a node and its transfers, or a tail row) sorted by end time.
    sent = np.bincount(index.message_node[on_channel], minlength=nodes)
    unit_end = np.concatenate([sweep.end, tails.end])
    unit_size = np.concatenate([1 + sent, np.ones(len(tails.end), dtype=np.int64)])
    before = np.concatenate([node_order, nodes + tails.order])
    order = before[np.argsort(unit_end[before], kind="stable")]
    first_row = np.empty(len(unit_end), dtype=np.int64)
    first_row[order] = np.cumsum(unit_size[order]) - unit_size[order]
    node_row, tail_row = first_row[:nodes], first_row[nodes:]
    ahead = np.cumsum(sent) - sent  # channel messages sent by earlier nodes
    rank = np.arange(len(on_channel)) - ahead[index.message_node[on_channel]]
    message_row = node_row[index.message_node]  # delivered at once: its producer's row
    message_row[on_channel] += 1 + rank
    ref_row = np.concatenate([node_row, message_row, [-1]])  # reference -1: no row
    rows = [
        _Columns(
            index.node_device, index.node_stage, index.node_microbatch, index.node_kind,
            start, sweep.end, np.full(nodes, -1, dtype=np.int64), cause, ref_row[cause_ref],
            index.node_action,
        ),
        _transfers(index, sweep, arrival, on_channel, node_row, message_row),
        _Columns(
            tails.device, *[np.full(len(tails.device), -1, dtype=np.int64)] * 2,
            np.full(len(tails.device), ALLREDUCE, dtype=np.int64), tails.start, tails.end,
            np.full(len(tails.device), -1, dtype=np.int64), tails.cause, ref_row[tails.ref],
            np.full(len(tails.device), None, dtype=object),
        ),
    ]  # fmt: skip
    places = [node_row, message_row[on_channel], tail_row]
    return _assemble(index, rows, places, int(unit_size.sum()))


def _node_order(sweep: Sweep, scheduled: np.ndarray) -> np.ndarray:
    """The nodes in row order: by end; at one instant, the one due first (as SimPy's
    events), then in the order the sweep computed them."""
    before = _computed_order(sweep.runs, len(sweep.end))
    order = before[np.argsort(sweep.end[before], kind="stable")]
    if (sweep.end[order[1:]] == sweep.end[order[:-1]]).any():
        order = before[np.lexsort((scheduled[before], sweep.end[before]))]
    return order


def _computed_order(runs: np.ndarray | None, nodes: int) -> np.ndarray:
    """The nodes in the order the sweep computed them (each after what it waits for)."""
    if runs is None:
        return np.arange(nodes, dtype=np.int64)
    lengths = runs[:, 1] - runs[:, 0]
    offsets = np.repeat(runs[:, 0] - (np.cumsum(lengths) - lengths), lengths)
    return np.arange(int(lengths.sum()), dtype=np.int64) + offsets


def _arrivals(index: ScheduleIndex, sweep: Sweep) -> np.ndarray:
    """When each message is on its receiver's device: at once, or after channel and latency."""
    links = sweep.links
    on_link = (sweep.begin + links.occupancy_ms) + links.latency_ms
    return np.where(links.channel < 0, sweep.end[index.message_node], on_link)


def _releases(index: ScheduleIndex, sweep: Sweep, arrival, on_channel):
    """When each node's device falls free, and the reference that frees it: the node's end
    (the node), or with ``hold`` the arrival of its latest send if later (that message;
    among sends arriving together the last sent, as the engine picks)."""
    nodes = len(index.node_device)
    release, ref = sweep.end, np.arange(nodes, dtype=np.int64)
    if not sweep.hold or not len(on_channel):
        return release, ref
    producer = index.message_node[on_channel]
    order = np.lexsort((on_channel, arrival[on_channel], producer))
    last = np.ones(len(order), dtype=bool)
    last[:-1] = producer[order][1:] != producer[order][:-1]
    latest = on_channel[order[last]]  # per sending node, its latest message
    held = latest[arrival[latest] > sweep.end[index.message_node[latest]]]
    release, ref = release.copy(), ref.copy()
    release[index.message_node[held]] = arrival[held]
    ref[index.message_node[held]] = nodes + held
    return release, ref


def _node_starts(index: ScheduleIndex, sweep: Sweep, release, release_ref, arrival):
    """Start, cause and the reference the cause names, for every node; and when the
    engine would set its clock for the node's end: once the device is free and the
    input sent (its producer ended), which orders rows that end at the same instant."""
    nodes = len(index.node_device)
    firsts = np.asarray(index.bounds[:-1], dtype=np.int64)
    firsts = firsts[firsts < nodes]
    first = np.zeros(nodes, dtype=bool)
    first[firsts] = True
    previous = np.maximum(np.arange(nodes, dtype=np.int64) - 1, 0)
    free = np.where(first, 0.0, release[previous])
    cause_ref = np.where(first, -1, release_ref[previous])
    cause = np.where(cause_ref >= nodes, CAUSE_SENDING, CAUSE_DEVICE).astype(np.int8)
    cause[first] = CAUSE_START
    wanted = index.input_of
    single = np.flatnonzero(wanted >= 0)
    late = single[arrival[wanted[single]] > free[single]]
    scheduled = free.copy()
    sent = sweep.end[index.message_node[wanted[single]]]
    scheduled[single] = np.maximum(free[single], sent)
    start = free.copy()
    start[late] = arrival[wanted[late]]
    cause[late] = CAUSE_INPUT
    cause_ref[late] = nodes + wanted[late]
    for node, inputs, _, _ in index.groups:
        for message in inputs:  # the first input strictly later than all before it
            if arrival[message] > start[node]:
                start[node], cause[node] = arrival[message], CAUSE_INPUT
                cause_ref[node] = nodes + message
        sent = sweep.end[index.message_node[list(inputs)]] if inputs else free[node]
        scheduled[node] = max(free[node], float(np.max(sent)))
    return start, cause, cause_ref, scheduled


def _transfers(index, sweep, arrival, on_channel, node_row, message_row) -> _Columns:
    """One row per message that crosses a channel, with its queueing cause."""
    links = sweep.links
    producer = index.message_node[on_channel]
    begin = sweep.begin[on_channel]
    channel = links.channel[on_channel]
    # The message ahead on the same channel: channels are served in message order.
    by_channel = np.argsort(channel, kind="stable")
    ahead = np.full(len(on_channel), -1, dtype=np.int64)
    same = channel[by_channel[1:]] == channel[by_channel[:-1]]
    ahead[by_channel[1:][same]] = by_channel[:-1][same]
    leave = begin + links.occupancy_ms[on_channel]
    queued = (ahead >= 0) & (np.where(ahead >= 0, leave[np.maximum(ahead, 0)], 0.0) > sweep.end[producer])  # fmt: skip
    cause = np.where(queued, CAUSE_CHANNEL, CAUSE_PRODUCER).astype(np.int8)
    cause_row = np.where(queued, message_row[on_channel][np.maximum(ahead, 0)], node_row[producer])
    return _Columns(
        index.message_src[on_channel],
        index.message_stage[on_channel],
        index.message_microbatch[on_channel],
        index.message_kind[on_channel],
        begin,
        arrival[on_channel],
        index.message_dst[on_channel],
        cause,
        cause_row,
        index.message_atom[on_channel],
    )


@dataclass(frozen=True, slots=True)
class _Tails:
    device: np.ndarray
    start: np.ndarray
    end: np.ndarray
    cause: np.ndarray
    ref: np.ndarray  # the reference the cause names (-1: none)
    order: np.ndarray  # positions in the order their clocks were set (ties at one end)


def _tails(index: ScheduleIndex, tail_ms, after_flush: bool, released) -> _Tails:
    """End-of-step work on each device with a positive ``tail_ms``: after the flush, or
    as soon as its own device falls free.

    Devices finish in order of the time they fall free, then of their last row
    (``released``: release time and reference per node, and each node's rank in row
    order). The flush names the last to finish, which also starts its work first; the
    others follow in the order they finished, as the engine's flush event wakes them.
    """
    release, release_ref, node_rank = released
    devices = index.devices
    stops = np.asarray(index.bounds[1:], dtype=np.int64)
    busy = stops > np.asarray(index.bounds[:-1], dtype=np.int64)  # has any node
    last = np.maximum(stops - 1, 0)
    free = np.where(busy, release[last] if len(release) else 0.0, 0.0)
    ref = np.where(busy, release_ref[last] if len(release) else -1, -1)
    rank = np.where(busy, node_rank[last] if len(release) else -1, -1)
    finished = np.lexsort((rank, free))  # devices in the order they finish
    work = np.asarray(tail_ms if tail_ms is not None else [0.0] * devices, dtype=np.float64)
    if after_flush:
        trigger = int(finished[-1]) if devices else -1
        finished = np.concatenate([[trigger], finished[:-1]]) if devices else finished
        named = int(ref[trigger]) if devices and busy[trigger] else -1
        start = np.full(devices, float(free.max()) if devices else 0.0)
        cause = np.full(devices, CAUSE_FLUSH, dtype=np.int8)
        refs = np.full(devices, named, dtype=np.int64)
    else:
        start, refs = free, ref
        nodes = len(index.node_device)
        cause = np.where(refs >= nodes, CAUSE_SENDING, CAUSE_DEVICE).astype(np.int8)
        cause[refs < 0] = CAUSE_START
    device = np.flatnonzero(work > 0)
    position = np.full(devices, -1, dtype=np.int64)
    position[device] = np.arange(len(device))
    order = position[finished]
    order = order[order >= 0]
    return _Tails(device, start[device], start[device] + work[device], cause[device], refs[device], order)  # fmt: skip


def _assemble(index: ScheduleIndex, blocks: list[_Columns], places: list, total: int) -> Trace:
    """Scatter the blocks' columns to their row numbers and freeze them into a Trace."""

    def column(name: str, dtype) -> np.ndarray:
        out = np.empty(total, dtype=dtype)
        for block, place in zip(blocks, places, strict=True):
            out[place] = getattr(block, name)
        return out

    stage, kind = column("stage", np.int64), column("kind", np.int64)
    return Trace(
        devices=index.devices,
        device=column("device", np.int64),
        lane=np.where(kind >= SEND_F, COMM, COMPUTE),
        stage=stage,
        chunk=index.chunk_of[stage],
        microbatch=column("microbatch", np.int64),
        kind=kind,
        peer=column("peer", np.int64),
        start=column("start", np.float64),
        end=column("end", np.float64),
        actions=column("actions", object).tolist(),
        cause=column("cause", np.int8),
        cause_row=column("cause_row", np.int64),
    )


__all__ = ["LinkTimes", "Sweep", "build_trace"]
