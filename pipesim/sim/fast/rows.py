"""The fast evaluator's Trace: rows, causes and their order, from the sweep's times.

The sweep (``pipesim.sim.fast.kernel``) records, as it computes them, what each row
needs: a node's start, end and cause (its device falling free, a held send, or its
input, the input only if strictly later, as in the engine; the first node of a device
with no late input starts at 0 with no cause), and a message's entry into its channel
and arrival (queued behind the message ahead of it if that one left the channel
strictly after its producer ended: cause ``channel``). What is left here is bulk NumPy:
numbering the rows, end-of-step work (``pipesim.sim.fast.tails``), and scattering the
columns into a Trace. What a Trace's rows owe to the schedule alone is laid out once per
schedule (``_Layout``) and reused under new costs.

**Laid out when read.** The report reads a step through its makespan, its compute rows
(the nodes, device by device in program order, as the sweep left them) and its
end-of-step work, all known straight after the sweep; numbering and scattering a million
rows costs more than the sweep. So ``build_trace`` gives a Trace that lays its rows out
when a column is first read (``Trace.deferred``): a run that prints only its report never
lays them out.

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
from functools import partial

import numpy as np

from pipesim.schedules.lists import MadeOnRead
from pipesim.sim.fast.index import ScheduleIndex, remember
from pipesim.sim.fast.kernel import SweepResult
from pipesim.sim.fast.tails import Tails, device_tails, end_of_step_ms, tail_parts
from pipesim.sim.trace import Cause, ComputeRows, Lane, RowKind, Trace


@dataclass(frozen=True, slots=True)
class LinkTimes:
    """Per message: its channel (-1: delivered at once, same device or an ideal link),
    its time on the channel and its latency (ms); ``channels``: how many channels."""

    channel: np.ndarray
    occupancy_ms: np.ndarray
    latency_ms: np.ndarray
    channels: int


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
    action: np.ndarray  # the row's entry in the index's pool of Actions (-1: None)


def build_trace(
    index: ScheduleIndex,
    sweep: SweepResult,
    links: LinkTimes,
    tail_ms: Sequence[float] | None,
    tail_after_flush: bool,
    optimizer_ms: Sequence[float] | None = None,
) -> Trace:
    """The Trace of the swept step, rows in the order the module doc describes, laid out
    when a column is first read (``Trace.deferred``): its makespan, compute rows (the
    nodes, device by device in program order) and end-of-step work are known now. It reads
    the sweep's buffers until then (``Trace.lay_out`` ends that)."""
    node_order = None
    work = tail_ms is not None and any(ms > 0 for ms in tail_ms)
    if work:  # the tails' order among devices that fall free together needs the rows'
        node_order = _node_order(sweep)
    tails = device_tails(index, tail_ms, tail_after_flush, sweep, _ranks(node_order))
    tails = tail_parts(tails, tail_ms, optimizer_ms)
    compute = ComputeRows(
        index.node_device,
        index.node_stage,
        index.node_kind,
        sweep.start,
        sweep.end,
        _node_numbers(index),
        lambda node: index.pool()[node],
    )
    ends = [part.max() for part in (sweep.end, tails.end) if len(part)]
    crossing = links.channel >= 0  # a transfer's row ends when it arrives
    if crossing.any():
        ends.append(np.max(sweep.arrival, where=crossing, initial=-np.inf))
    lay_out = partial(_lay_out, index, sweep, links, tails, node_order)
    makespan = float(np.max(ends)) if ends else 0.0
    end_of_step = end_of_step_ms(tails, index.devices)
    return Trace.deferred(index.devices, lay_out, makespan, compute, end_of_step)


def _lay_out(index, sweep: SweepResult, links: LinkTimes, tails: Tails, node_order) -> Trace:
    """Number the rows and lay out the columns. A cause names a *reference*: a node ``n``
    (``n < nodes``) or a message ``k`` (``nodes + k``); rows are numbered last, and each
    reference then becomes a row."""
    layout = _layout(index, links)
    if node_order is None:
        node_order = _node_order(sweep)
    numbers = _number_rows(index, layout, sweep, tails, node_order)
    ref_row = numbers.ref_row
    rows = [
        _Columns(
            index.node_device,
            index.node_stage,
            index.node_microbatch,
            index.node_kind,
            sweep.start,
            sweep.end,
            layout.no_peer,
            sweep.cause,
            ref_row[sweep.cause_ref],
            layout.node_action,
        ),
        _transfers(layout, sweep, numbers.node_row, numbers.message_row),
        _tail_columns(tails, ref_row, numbers.tail_row),
    ]
    places = [numbers.node_row, numbers.message_row[layout.on_channel], numbers.tail_row]
    return _assemble(index, rows, places, numbers.total)


def _ranks(node_order: np.ndarray | None) -> np.ndarray | None:
    """Each node's rank in row order (None where the rows were not ordered)."""
    if node_order is None:
        return None
    node_rank = np.empty(len(node_order), dtype=np.int64)
    node_rank[node_order] = np.arange(len(node_order))
    return node_rank


def _node_numbers(index: ScheduleIndex) -> np.ndarray:
    """0, 1, ... per node (kept on the index)."""
    numbers = index.memo.get("node numbers")
    if numbers is None:
        numbers = np.arange(len(index.node_device), dtype=np.int64)
        remember(index, "node numbers", numbers)
    return numbers


@dataclass(frozen=True, slots=True)
class _RowNumbers:
    """Where each node, message and tail lands among the Trace's rows."""

    node_row: np.ndarray
    message_row: np.ndarray  # delivered at once: its producer's row
    tail_row: np.ndarray
    ref_row: np.ndarray  # per reference (node, then message, then -1 for none): its row
    total: int


def _number_rows(index, layout: _Layout, sweep: SweepResult, tails: Tails, node_order):
    """Number the rows: units (a node and its transfers, or a tail row) sorted by end
    time, nodes in ``node_order`` among equal ends, tails after them."""
    nodes = len(index.node_device)
    unit_size = layout.unit_size
    if len(tails.end):
        unit_size = np.concatenate([unit_size, np.ones(len(tails.end), dtype=np.int64)])
        unit_end = np.concatenate([sweep.end, tails.end])
        before = np.concatenate([node_order, nodes + tails.order])
        order = before[np.argsort(unit_end[before], kind="stable")]
    else:
        order = node_order
    sizes = unit_size[order]
    ends = np.cumsum(sizes)
    ends -= sizes
    first_row = np.empty(len(unit_size), dtype=np.int64)
    first_row[order] = ends
    node_row, tail_row = first_row[:nodes], first_row[nodes:]
    message_row = node_row[index.message_node]
    message_row[layout.on_channel] += layout.rank
    ref_row = np.concatenate([node_row, message_row, [-1]])  # reference -1: no row
    return _RowNumbers(node_row, message_row, tail_row, ref_row, int(unit_size.sum()))


def _tail_columns(tails: Tails, ref_row: np.ndarray, tail_row: np.ndarray) -> _Columns:
    """The rows of end-of-step work (all-reduce and optimizer rows, no stage or peer); an
    optimizer step after an all-reduce names that row as its cause."""
    count = len(tails.device)
    none = np.full(count, -1, dtype=np.int64)
    after = tails.after >= 0
    return _Columns(
        tails.device,
        none,
        none,
        tails.kind,
        tails.start,
        tails.end,
        none,
        tails.cause,
        np.where(after, tail_row[np.maximum(tails.after, 0)], ref_row[tails.ref]),
        none,
    )


def _node_order(sweep: SweepResult) -> np.ndarray:
    """The nodes in row order: by end; at one instant, the one due first (as SimPy's
    events), then in the order the sweep computed them."""
    before = _computed_order(sweep.runs)
    order = before[np.argsort(sweep.end[before], kind="stable")]
    end = sweep.end[order]
    tie = np.flatnonzero(end[1:] == end[:-1])
    if len(tie):  # reorder only the nodes that share an end, by when they were due
        marked = np.zeros(len(order), dtype=bool)  # both rows of each tie, in order
        marked[tie] = marked[tie + 1] = True
        tied = np.flatnonzero(marked)
        group = order[tied]
        order[tied] = group[np.lexsort((sweep.scheduled[group], end[tied]))]
    return order


def _computed_order(runs: np.ndarray) -> np.ndarray:
    """The nodes in the order the sweep computed them (each after what it waits for)."""
    lengths = runs[:, 1] - runs[:, 0]
    offsets = np.repeat(runs[:, 0] - (np.cumsum(lengths) - lengths), lengths)
    return np.arange(int(lengths.sum()), dtype=np.int64) + offsets


@dataclass(frozen=True, slots=True)
class _Layout:
    """What a Trace's rows owe to the schedule and to which messages cross a channel, not
    to the costs: kept on the index, so a schedule scored under many costs lays it out once.

    ``on_channel``: the messages with a transfer row (an index, or a slice for all);
    ``unit_size``: per node, 1 + its
    transfers; ``rank``: per transfer, 1 + how many of its producer's transfers come
    before it; ``columns``: the transfers' fixed columns (device, stage, microbatch,
    kind, peer, action); ``node_action``: each node's entry in the pool of Actions."""

    on_channel: np.ndarray | slice
    producer: np.ndarray
    unit_size: np.ndarray
    rank: np.ndarray
    columns: tuple
    no_peer: np.ndarray  # -1 for every node: compute rows have no peer
    node_action: np.ndarray  # 0, 1, ...: a node's Action is the pool's entry of its number


def _layout(index: ScheduleIndex, links: LinkTimes) -> _Layout:
    crossing = links.channel >= 0
    key = np.packbits(crossing).tobytes()
    layout = index.memo.get(key)
    if layout is not None:
        return layout
    on_channel = np.flatnonzero(crossing)
    every = len(on_channel) == len(crossing)  # every message crosses: no need to copy
    if every:
        on_channel = slice(None)  # a view, where an index array would copy
    producer = index.message_node[on_channel]
    sent = np.bincount(producer, minlength=len(index.node_device))
    ahead = np.cumsum(sent) - sent  # channel messages sent by earlier nodes
    rank = 1 + np.arange(len(producer)) - ahead[producer]
    columns = tuple(
        column if every else column[on_channel]
        for column in (
            index.message_src,
            index.message_stage,
            index.message_microbatch,
            index.message_kind,
            index.message_dst,
            index.message_action,
        )
    )
    nodes = len(index.node_device)
    no_peer = np.full(nodes, -1, dtype=np.int64)
    node_action = np.arange(nodes, dtype=np.int64)
    layout = _Layout(on_channel, producer, 1 + sent, rank, columns, no_peer, node_action)
    remember(index, key, layout)
    return layout


def _transfers(layout: _Layout, sweep: SweepResult, node_row, message_row) -> _Columns:
    """One row per message that crosses a channel, with its queueing cause: behind the
    message ahead on its channel if that one left the channel after its producer ended."""
    on_channel = layout.on_channel
    behind = sweep.behind[on_channel]
    queued = np.flatnonzero(behind >= 0)
    cause = np.full(len(behind), Cause.PRODUCER, dtype=np.int8)
    cause[queued] = Cause.CHANNEL
    cause_row = node_row[layout.producer]
    cause_row[queued] = message_row[behind[queued]]
    src, stage, microbatch, kind, dst, action = layout.columns
    return _Columns(
        src,
        stage,
        microbatch,
        kind,
        sweep.begin[on_channel],
        sweep.arrival[on_channel],
        dst,
        cause,
        cause_row,
        action,
    )


def _assemble(index: ScheduleIndex, blocks: list[_Columns], places: list, total: int) -> Trace:
    """Scatter the blocks' columns to their row numbers and freeze them into a Trace; its
    actions are made from the schedule's when first read (a table or JSON report reads
    none)."""

    def column(name: str, dtype) -> np.ndarray:
        out = np.empty(total, dtype=dtype)
        for block, place in zip(blocks, places, strict=True):
            out[place] = getattr(block, name)
        return out

    stage, kind = column("stage", np.int64), column("kind", np.int64)
    return Trace(
        devices=index.devices,
        device=column("device", np.int64),
        lane=np.where(kind >= RowKind.SEND_F, Lane.COMM, Lane.COMPUTE),
        stage=stage,
        chunk=index.chunk_of[stage],
        microbatch=column("microbatch", np.int64),
        kind=kind,
        peer=column("peer", np.int64),
        start=column("start", np.float64),
        end=column("end", np.float64),
        actions=MadeOnRead(total, partial(_row_actions, index, column("action", np.int64))),
        cause=column("cause", np.int8),
        cause_row=column("cause_row", np.int64),
    )


def _row_actions(index: ScheduleIndex, action: np.ndarray) -> list:
    """Each row's Action (None beside the schedule), picked from the index's pool."""
    return index.pool()[action].tolist()


__all__ = ["LinkTimes", "build_trace"]
