"""The Trace: every compute action and transfer of one simulated step, with times.

A Trace is the engine's whole output, kept as columns (NumPy arrays) so a million-action
run stays small; ``trace.frame`` turns it into a pandas DataFrame with one row per
compute action or transfer:

``device, lane, stage, chunk, microbatch, kind, start, end, peer, name``

``lane`` is ``compute`` or ``comm``; ``start``/``end`` are milliseconds from the start
of the step; a transfer's ``device`` is its sender and ``peer`` its receiver (-1 for
compute). An overlapped pair has stage and microbatch -1 and its text form as name.

A transfer's row spans from the moment it enters its channel (after any queueing behind
other messages) to its arrival at the receiver: channel time (``bytes / bandwidth`` plus
the link's gap), then latency. Under pure latency several transfers on one link overlap.

Every simulated row also records what released it (``cause``, a ``Cause``, and
``cause_row``, the row it names or -1): the previous action on its device, the transfer
that held its device (``comm_overlap`` off), the input that arrived last (the transfer
that carried it, or its producer where no link time was involved), for a transfer its
producer or the transfer ahead of it on a busy channel, and for end-of-step work the
pipeline flush. A row starts exactly when its cause row ends, except behind a busy
channel: there it starts when the transfer ahead leaves the channel, before that one
arrives. The critical path and the idle-gap causes (``pipesim.analysis.critical``) are
walks over these records.

End-of-step work sits on the communication lane beside the schedule's actions, one row
per part, each named for what it is: the data-parallel gradient all-reduce (``ALLREDUCE``,
``gradient all-reduce``: only where the gradients are reduced, data parallelism or a
REDUCE_GRAD post's cost), then the optimizer step (``OPTIMIZER``, ``optimizer step``). A
run without data parallelism has no all-reduce row. Those rows are not compute actions of
the schedule: the metrics count them in the makespan and as idle time
(``pipesim.sim.metrics``).

The metrics read a Trace through a summary of its compute rows (``compute_rows``: one
entry per compute action, no transfers), its makespan and its end-of-step work per device
(``end_of_step_ms``). The fast evaluator knows all three before it has laid out a single
row, and gives a Trace whose columns are laid out when one is first read
(``Trace.deferred``): a run that only prints its report lays out none.

Exporters (Chrome trace, CSV) are in ``pipesim.sim.export``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from enum import IntEnum
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from pipesim.schedules.ir import Action, Kind, Schedule

if TYPE_CHECKING:  # pandas is imported where a frame is made: a table-only run needs none
    import pandas as pd


class RowKind(IntEnum):
    """What a trace row is (``Trace.kind``): a compute action's kind, a transfer, or work
    beside the schedule's actions. Not torch's post kinds (``pipesim.schedules.posts``)."""

    F = 0
    B = 1
    I = 2  # noqa: E741 - torch's name for the input-gradient backward
    W = 3
    OVERLAP_F_B = 4
    SEND_F = 5  # an activation on its way to the next stage
    SEND_B = 6  # a gradient on its way to the previous stage
    ALLREDUCE = 7  # the data-parallel gradient all-reduce (data > 1, or REDUCE_GRAD's cost)
    UNSHARD = 8  # FSDP posts of a lowered schedule, when given a cost
    RESHARD = 9
    OPTIMIZER = 10  # the optimizer step, after the gradients are reduced


# End-of-step work and posts: what each row is called in the trace, the CSV and the legends
BESIDE_LABELS = {
    RowKind.ALLREDUCE: "gradient all-reduce",
    RowKind.OPTIMIZER: "optimizer step",
}
END_OF_STEP = (RowKind.ALLREDUCE, RowKind.OPTIMIZER)  # a device's tail: reduce, then step


class Lane(IntEnum):
    """Where a row runs (``Trace.lane``): the compute stream or the communication one."""

    COMPUTE = 0
    COMM = 1


class Cause(IntEnum):
    """What released a row (``Trace.cause``); ``Trace.cause_row`` names the row, or -1."""

    START = 0  # nothing: the row starts at time 0
    DEVICE = 1  # the previous compute action on its device ended
    SENDING = 2  # its device was held until this transfer arrived (comm_overlap off)
    INPUT = 3  # its input arrived: the carrying transfer, or the producer itself
    PRODUCER = 4  # a transfer: the action that produced it ended
    CHANNEL = 5  # a transfer: the transfer ahead of it on its channel left the channel
    FLUSH = 6  # end-of-step work: the pipeline flushed (the row that ended last)
    GATHER = 7  # a compute action: its stage's FSDP parameter gather (UNSHARD) ended


KIND_CODES: tuple[str, ...] = tuple(kind.name for kind in RowKind)
KIND_CODE = {Kind(kind.name): kind for kind in RowKind if kind <= RowKind.OVERLAP_F_B}
CAUSE_NAMES = tuple(cause.name.lower() for cause in Cause)
_LETTERS = {kind: kind.value for kind in Kind}
ROWS_PER_BLOCK = 65536
ROW_WIDTH = 9


class TraceBuilder:
    """Collects rows while the engine runs; ``build()`` freezes them into a Trace.

    A row is ``(device, stage, microbatch, kind code, start, end, peer, cause, cause
    row)``; the engine appends to ``rows`` and ``actions`` directly (its hot loop) and
    numbers rows in append order. Lanes and chunks are derived afterwards, in bulk.
    """

    def __init__(self, devices: int) -> None:
        self.devices = devices
        self.rows: list[tuple] = []
        self.blocks: list[np.ndarray] = []
        self.actions: list[Action] = []

    def pack(self) -> None:
        """Move the collected row tuples into a compact NumPy block (9 floats a row)."""
        flat = itertools.chain.from_iterable(self.rows)
        count = ROW_WIDTH * len(self.rows)
        self.blocks.append(np.fromiter(flat, np.float64, count=count).reshape(-1, ROW_WIDTH))
        self.rows.clear()

    def build(self, schedule: Schedule) -> Trace:
        self.pack()
        table = np.concatenate(self.blocks) if len(self.blocks) > 1 else self.blocks[0]
        ints = table[:, :4].astype(np.int64)
        stage, kind = ints[:, 1], ints[:, 3]
        chunk_of = np.array([*_chunks(schedule.placement), -1])
        return Trace(
            devices=self.devices,
            device=ints[:, 0],
            lane=np.where(kind >= RowKind.SEND_F, Lane.COMM, Lane.COMPUTE),
            stage=stage,
            chunk=chunk_of[stage],  # stage -1 (an overlapped pair) picks the trailing -1
            microbatch=ints[:, 2],
            kind=kind,
            peer=table[:, 6].astype(np.int64),
            start=table[:, 4].copy(),
            end=table[:, 5].copy(),
            actions=self.actions,
            cause=table[:, 7].astype(np.int8),
            cause_row=table[:, 8].astype(np.int64),
        )


def _chunks(placement: tuple[int, ...]) -> list[int]:
    """``Schedule.chunk`` of every stage in one pass (it counts from 0 for each stage)."""
    seen: dict[int, int] = {}
    chunks = []
    for device in placement:
        chunks.append(seen.get(device, 0))
        seen[device] = chunks[-1] + 1
    return chunks


@dataclass(frozen=True, slots=True)
class ComputeRows:
    """The compute rows of a step alone (no transfers, no end-of-step work), as the metrics
    and the memory accounting read them: per entry its device, stage (-1 for a group),
    kind (a RowKind code), start and end (ms).

    On each device the entries are in program order, and ``order`` numbers them so that,
    on one device, it sorts them as the Trace numbers their rows (a Trace's own: the row
    numbers). ``action(entry)`` is an entry's Action (read for groups' members)."""

    device: np.ndarray
    stage: np.ndarray
    kind: np.ndarray
    start: np.ndarray
    end: np.ndarray
    order: np.ndarray
    action: Callable[[int], Action]


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
    # per row, its Action (None beside the schedule): a list, or made on first read
    # (``pipesim.schedules.lists.MadeOnRead``) where the fast evaluator made the Trace
    actions: Sequence[Action | None] = field(repr=False)
    cause: np.ndarray | None = field(default=None, repr=False)  # Cause codes; None: unknown
    cause_row: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def deferred(
        cls,
        devices: int,
        lay_out: Callable[[], Trace],
        makespan_ms: float,
        compute_rows: ComputeRows,
        end_of_step_ms: dict[RowKind, np.ndarray],
    ) -> Trace:
        """A Trace whose columns ``lay_out()`` makes when one is first read (or when it is
        pickled); its summary (makespan, compute rows, end-of-step work) is known now."""
        trace = object.__new__(cls)
        trace.__dict__.update(
            devices=devices,
            makespan_ms=makespan_ms,
            compute_rows=compute_rows,
            end_of_step_ms=end_of_step_ms,
            _lay_out=lay_out,
        )
        return trace

    def __getattr__(self, name: str):
        """Only reached for an attribute not set: a deferred Trace's columns, laid out now."""
        if name not in _COLUMNS or "_lay_out" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.lay_out()
        return self.__dict__[name]

    def lay_out(self) -> None:
        """Make a deferred Trace's columns now, after which it reads nothing of what made
        it (its compute rows are then read from its columns); nothing for another Trace."""
        lay_out = self.__dict__.get("_lay_out")
        if lay_out is not None:
            made = lay_out()
            self.__dict__.update({name: getattr(made, name) for name in _COLUMNS})
            self.__dict__.pop("compute_rows", None)
            self.__dict__.pop("_lay_out", None)

    def __getstate__(self) -> dict:
        return {item.name: getattr(self, item.name) for item in fields(self)}

    @cached_property
    def makespan_ms(self) -> float:
        return float(self.end.max()) if len(self.end) else 0.0

    @cached_property
    def compute_rows(self) -> ComputeRows:
        """The compute rows (``ComputeRows``), in row order."""
        rows = np.flatnonzero(self.lane == Lane.COMPUTE)
        actions = self.actions
        return ComputeRows(
            self.device[rows],
            self.stage[rows],
            self.kind[rows],
            self.start[rows],
            self.end[rows],
            rows,
            lambda entry: actions[rows[entry]],
        )

    @cached_property
    def end_of_step_ms(self) -> dict[RowKind, np.ndarray]:
        """Per part of the end-of-step work (``END_OF_STEP``), its time on each device (ms)."""
        per_kind = {}
        for kind in END_OF_STEP:
            rows = self.kind == kind
            durations = self.end[rows] - self.start[rows]
            per_kind[kind] = np.bincount(
                self.device[rows], weights=durations, minlength=self.devices
            )
        return per_kind

    def name(self, row: int) -> str:
        """IR text of a row: ``2F0`` for compute, ``2F0->3`` for a transfer to device 3;
        end-of-step work by what it is (``gradient all-reduce``, ``optimizer step``)."""
        kind = self.kind[row]
        if kind in BESIDE_LABELS:
            return BESIDE_LABELS[RowKind(kind)]
        if kind >= RowKind.UNSHARD:  # an FSDP post: 1UNSHARD, 1RESHARD
            return f"{self.stage[row]}{KIND_CODES[kind]}"
        text = str(self.actions[row])
        return f"{text}->{self.peer[row]}" if self.lane[row] == Lane.COMM else text

    def names(self) -> list[str]:
        """``name`` of every row, in row order (read column by column, for large traces)."""
        columns = (self.kind.tolist(), self.stage.tolist(), self.peer.tolist())
        comm = (self.lane == Lane.COMM).tolist()
        names = []
        for action, (kind, stage, peer), sent in zip(
            self.actions, zip(*columns, strict=True), comm, strict=True
        ):
            if kind in BESIDE_LABELS:
                names.append(BESIDE_LABELS[kind])
                continue
            if kind >= RowKind.UNSHARD:
                names.append(f"{stage}{KIND_CODES[kind]}")
                continue
            # str(action), without the enum's own formatting: a million rows add up
            text = (
                str(action)
                if action.sub_actions is not None
                else f"{action.stage}{_LETTERS[action.kind]}{action.microbatch}"
            )
            names.append(f"{text}->{peer}" if sent else text)
        return names

    @cached_property
    def frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            {
                "device": self.device,
                "lane": np.where(self.lane == Lane.COMPUTE, "compute", "comm"),
                "stage": self.stage,
                "chunk": self.chunk,
                "microbatch": self.microbatch,
                "kind": np.asarray(KIND_CODES, dtype=object)[self.kind],
                "start": self.start,
                "end": self.end,
                "peer": self.peer,
                "name": self.names(),
                **self._cause_columns(),
            }
        )

    def _cause_columns(self) -> dict[str, object]:
        """``cause`` (a word from CAUSE_NAMES) and ``cause_row`` (-1: none), where known."""
        if self.cause is None or self.cause_row is None:
            return {}
        return {
            "cause": np.asarray(CAUSE_NAMES, dtype=object)[self.cause],
            "cause_row": self.cause_row,
        }


_COLUMNS = tuple(item.name for item in fields(Trace) if item.name != "devices")
# A dataclass keeps each field's default as a class attribute, which would answer for a
# deferred Trace's unset ``cause`` (None: "not recorded") before ``__getattr__`` could lay
# the columns out; the generated ``__init__`` keeps its own copy of the defaults.
for _name in ("cause", "cause_row"):
    delattr(Trace, _name)


def trace_from_frame(frame: pd.DataFrame, devices: int, actions: list[Action]) -> Trace:
    """Rebuild a Trace from a frame with the columns of ``Trace.frame`` (e.g. measured runs)."""
    codes = {k: i for i, k in enumerate(KIND_CODES)}
    return Trace(
        devices=devices,
        device=frame["device"].to_numpy(np.int64),
        lane=np.where(frame["lane"].to_numpy() == "compute", Lane.COMPUTE, Lane.COMM),
        stage=frame["stage"].to_numpy(np.int64),
        chunk=frame["chunk"].to_numpy(np.int64),
        microbatch=frame["microbatch"].to_numpy(np.int64),
        kind=np.array([codes[k] for k in frame["kind"]], dtype=np.int64),
        peer=frame["peer"].to_numpy(np.int64),
        start=frame["start"].to_numpy(np.float64),
        end=frame["end"].to_numpy(np.float64),
        actions=list(actions),
    )
