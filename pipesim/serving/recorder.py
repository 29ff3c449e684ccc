"""What a serving run writes down as it goes, turned into the columnar records at the end.

Per request the times are written into preallocated NumPy arrays (one write per event of
the request's life, never one per token); per iteration and per scheduling step one entry
is appended to plain lists, converted once when the run ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pipesim.serving.request import Request
from pipesim.serving.results import (
    IterationLog,
    RequestRecords,
    ServeResult,
    Timeline,
    TokenGaps,
)


class Recorder:
    """The run's notebook. ``on_done(replica)`` is called once per request, when it
    finishes (with the replica that served it) or is rejected (with -1)."""

    def __init__(self, requests: Sequence[Request], on_done: Callable[[int], None]) -> None:
        n = len(requests)
        self.requests = requests
        self.on_done = on_done
        self.replica = np.full(n, -1, dtype=np.int64)
        self.engine = np.full(n, -1, dtype=np.int64)
        self.rejected = np.zeros(n, dtype=bool)
        self.first_scheduled_s = np.full(n, np.nan)
        self.first_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.max_itl_s = np.full(n, np.nan)
        self.gap_s: list[float] = []
        self.gap_count: list[int] = []
        self._iterations: tuple[list, ...] = tuple([] for _ in range(7))
        self._timeline: tuple[list, ...] = tuple([] for _ in range(4))

    def iteration(
        self,
        replica: int,
        engine: int,
        starts: list[float],
        ends: list[float],
        batch_size: int,
        prefill_tokens: int,
        decode_seqs: int,
    ) -> None:
        row = (replica, engine, starts, ends, batch_size, prefill_tokens, decode_seqs)
        for column, value in zip(self._iterations, row, strict=True):
            column.append(value)

    def state(self, time_s: float, replica: int, running: int, kv_blocks_used: int) -> None:
        for column, value in zip(
            self._timeline, (time_s, replica, running, kv_blocks_used), strict=True
        ):
            column.append(value)

    def gap(self, gap_s: float, count: int) -> None:
        self.gap_s.append(gap_s)
        self.gap_count.append(count)

    def longest_gap(self, request: int, gap_s: float) -> None:
        """Note a gap between two tokens of ``request``; its longest is kept."""
        if not self.max_itl_s[request] >= gap_s:  # NaN until its first gap
            self.max_itl_s[request] = gap_s

    def result(self, kv_blocks: tuple[int, ...], stages: int) -> ServeResult:
        """The records of the run; its duration runs to the last finish or arrival."""
        reqs = self.requests
        arrival = np.fromiter((r.arrival_s for r in reqs), float, len(reqs))
        records = RequestRecords(
            id=np.fromiter((r.id for r in reqs), np.int64, len(reqs)),
            replica=self.replica,
            engine=self.engine,
            arrival_s=arrival,
            prompt_tokens=np.fromiter((r.prompt_tokens for r in reqs), np.int64, len(reqs)),
            output_tokens=np.fromiter((r.output_tokens for r in reqs), np.int64, len(reqs)),
            rejected=self.rejected,
            first_scheduled_s=self.first_scheduled_s,
            first_token_s=self.first_token_s,
            finish_s=self.finish_s,
            preemptions=self.preemptions,
            max_itl_s=self.max_itl_s,
        )
        times = np.concatenate([arrival, self.finish_s[~self.rejected], [0.0]])
        return ServeResult(
            requests=records,
            iterations=self._iteration_log(stages),
            timeline=Timeline(
                time_s=np.asarray(self._timeline[0], dtype=float),
                replica=np.asarray(self._timeline[1], dtype=np.int64),
                running=np.asarray(self._timeline[2], dtype=np.int64),
                kv_blocks_used=np.asarray(self._timeline[3], dtype=np.int64),
            ),
            token_gaps=TokenGaps(
                gap_s=np.asarray(self.gap_s, dtype=float),
                count=np.asarray(self.gap_count, dtype=np.int64),
            ),
            duration_s=float(times.max()),
            kv_blocks=kv_blocks,
            stages=stages,
        )

    def _iteration_log(self, stages: int) -> IterationLog:
        replica, engine, starts, ends, batch, prefill, decode = self._iterations
        return IterationLog(
            replica=np.asarray(replica, dtype=np.int64),
            engine=np.asarray(engine, dtype=np.int64),
            start_s=np.asarray(starts, dtype=float).reshape(len(starts), stages),
            end_s=np.asarray(ends, dtype=float).reshape(len(ends), stages),
            batch_size=np.asarray(batch, dtype=np.int64),
            prefill_tokens=np.asarray(prefill, dtype=np.int64),
            decode_seqs=np.asarray(decode, dtype=np.int64),
        )
