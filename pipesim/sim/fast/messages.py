"""The messages of a schedule's graph, looked up per (kind, stage) pair.

What an atom sends, to which stage, and along which route depends on its kind and stage
alone (``pipesim.schedules.dependencies``). So the fast evaluator's index
(``pipesim.sim.fast.index``) numbers each atom's pair, ``kind * stages + stage``, and
looks everything up in tables of one entry a pair (``PairTable``) instead of computing it
atom by atom. A message's columns that only a Trace's rows read (its devices, kind,
stage, microbatch and Action) are made from the tables when first read
(``MessageColumns``): a run that prints only its report never makes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from pipesim.schedules.dependencies import Message, dependencies
from pipesim.schedules.ir import Schedule
from pipesim.sim.trace import RowKind


@dataclass(frozen=True, slots=True)
class PairTable:
    """Per (kind, stage) pair, at ``kind * stages + stage`` (kind: ``ATOM_CODE``):
    ``listed``, where its atoms are listed among the consumers (less the microbatch);
    ``target``, the entry of its message's consumer (less the microbatch; -1 where it
    sends none); the message's ``kind`` (SEND_F or SEND_B), sending ``stage``, ``src``
    and ``dst`` devices and the ``boundary`` whose activation it carries.

    The consumers are rows of ``cells`` entries (stage x microbatch): row 0 lists each
    cell's F, row 1 its B or I, row 2 its W (which nothing reads)."""

    listed: np.ndarray
    target: np.ndarray
    kind: np.ndarray
    stage: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    boundary: np.ndarray


def pair_table(schedule: Schedule, model_stage: np.ndarray, width: int) -> PairTable:
    """The table of ``schedule``'s pairs, cells ``width`` microbatches wide;
    ``model_stage``: each stage's layer group, then -1."""
    stages, deps = schedule.stages, dependencies(schedule)
    cells = stages * width
    to_next = np.asarray(deps.sends_to(Message.ACTIVATION), dtype=np.int64)  # -1: none
    to_prev = np.asarray(deps.sends_to(Message.GRADIENT), dtype=np.int64)
    none = np.full(stages, -1, dtype=np.int64)
    other = np.concatenate([to_next, to_prev, to_prev, none])  # kind codes F, B, I, W
    stage = np.tile(np.arange(stages, dtype=np.int64), 4)
    row = np.repeat(np.array([0, 1, 1, 2], dtype=np.int64), stages)  # the consumers' rows
    target = np.where(other >= 0, np.minimum(row, 1) * cells + other * width, -1)
    placement = np.asarray(schedule.placement, dtype=np.int64)
    ahead = np.arange(4 * stages) < stages
    return PairTable(
        listed=row * cells + stage * width,
        target=target,
        kind=np.where(ahead, RowKind.SEND_F, RowKind.SEND_B).astype(np.int64),
        stage=stage,
        src=placement[stage],
        dst=placement[other],
        boundary=model_stage[np.minimum(stage, other)],
    )


def routes(table: PairTable, sent: np.ndarray) -> dict:
    """The distinct routes (sender, receiver, boundary) in that order, one a row, and each
    message's row (``sent``: each message's pair), so link times are looked up once per
    route, not per message."""
    if not len(sent):
        return dict(routes=np.zeros((0, 3), dtype=np.int64), route_of=np.zeros(0, np.int64))
    used = np.zeros(len(table.target), dtype=bool)
    used[sent] = True
    pairs = np.flatnonzero(used)  # a message's route is its pair's
    src, dst, boundary = table.src[pairs], table.dst[pairs], table.boundary[pairs]
    devices, layers = int(max(src.max(), dst.max())) + 1, int(boundary.max()) + 1
    codes, number = np.unique((src * devices + dst) * layers + boundary, return_inverse=True)
    route = np.zeros(len(used), dtype=np.int64)
    route[pairs] = number.reshape(-1)
    pair, layer = np.divmod(codes, layers)
    found = np.stack([pair // devices, pair % devices, layer], axis=1)
    return dict(routes=found, route_of=route[sent])


class MessageColumns:
    """Per message, the columns a Trace's rows read, each made when first read: ``src``
    and ``dst`` (devices), ``kind`` (SEND_F or SEND_B), ``stage`` and ``microbatch`` (the
    producing atom's), ``action`` (its entry in the pool of Actions: ``offset`` plus its
    atom's number). ``sent``: each message's pair; ``sender``: its producing atom;
    ``microbatch``: every atom's."""

    def __init__(
        self, table: PairTable, sent: np.ndarray, sender: np.ndarray, microbatch, offset: int
    ) -> None:
        self._table, self._sent, self._sender = table, sent, sender
        self._microbatch, self._offset = microbatch, offset

    @cached_property
    def src(self) -> np.ndarray:
        return self._table.src[self._sent]

    @cached_property
    def dst(self) -> np.ndarray:
        return self._table.dst[self._sent]

    @cached_property
    def kind(self) -> np.ndarray:
        return self._table.kind[self._sent]

    @cached_property
    def stage(self) -> np.ndarray:
        return self._table.stage[self._sent]

    @cached_property
    def microbatch(self) -> np.ndarray:
        return self._microbatch[self._sender]

    @cached_property
    def action(self) -> np.ndarray:
        return self._sender + self._offset if self._offset else self._sender


def no_messages() -> MessageColumns:
    """The columns of a graph without messages."""
    none = np.zeros(0, dtype=np.int64)
    return MessageColumns(PairTable(*(none,) * 7), none, none, none, 0)


__all__ = ["MessageColumns", "PairTable", "no_messages", "pair_table", "routes"]
