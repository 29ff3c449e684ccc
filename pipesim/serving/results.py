"""What a serving run records: per request, per iteration, and over time.

``pipesim.serving.engine.simulate_serving(config, requests)`` returns a :class:`ServeResult`,
columnar NumPy arrays of everything that happened; ``pipesim.serving.metrics.summarize``
turns it into a :class:`~pipesim.serving.report.ServeReport`.

Times are seconds from the start of the run (``_s``). A rejected request has NaN for every
time it never reached.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class RequestRecords:
    """One entry per request, in request order (columnar NumPy arrays).

    ``replica`` and ``engine`` (its virtual engine) are -1 for a rejected request.
    ``first_scheduled_s``: start on the first stage of the first iteration holding it;
    ``first_token_s``: its first token left the last stage; ``finish_s``: its last did.
    ``preemptions``: how often it was preempted (and its KV recomputed). ``max_itl_s``: its
    longest gap between two consecutive tokens (NaN for a one-token output).
    """

    id: np.ndarray
    replica: np.ndarray
    engine: np.ndarray
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    rejected: np.ndarray
    first_scheduled_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    preemptions: np.ndarray
    max_itl_s: np.ndarray

    def __len__(self) -> int:
        return len(self.id)

    @property
    def completed(self) -> np.ndarray:
        return ~self.rejected

    @property
    def ttft_s(self) -> np.ndarray:
        """Time to first token: arrival to the first token leaving the last stage."""
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        """Time per output token after the first (NaN for a single-token output)."""
        steps = (self.output_tokens - 1).astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(steps > 0, (self.finish_s - self.first_token_s) / steps, np.nan)

    @property
    def e2e_s(self) -> np.ndarray:
        return self.finish_s - self.arrival_s

    @property
    def queue_s(self) -> np.ndarray:
        """Arrival to the start of the first iteration that includes the request."""
        return self.first_scheduled_s - self.arrival_s


@dataclass(frozen=True, slots=True)
class IterationLog:
    """One entry per iteration (a batch's pass through a replica's pipeline).

    ``start_s[i, s]`` / ``end_s[i, s]``: when iteration ``i`` ran on stage ``s`` (shape
    ``(iterations, stages)``); the batch left the last stage at ``end_s[i, -1]``.
    ``batch_size``: sequences in it; ``prefill_tokens``; ``decode_seqs``.
    """

    replica: np.ndarray
    engine: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    batch_size: np.ndarray
    prefill_tokens: np.ndarray
    decode_seqs: np.ndarray

    def __len__(self) -> int:
        return len(self.replica)

    def busy_s(self, replicas: int) -> np.ndarray:
        """Busy seconds per (replica, stage), shape ``(replicas, stages)``."""
        busy = np.zeros((replicas, self.start_s.shape[1]))
        np.add.at(busy, self.replica, self.end_s - self.start_s)
        return busy


@dataclass(frozen=True, slots=True)
class Timeline:
    """A replica's state after each scheduling step: sequences running (admitted, not
    finished or preempted) and KV blocks in use. Each value holds until the replica's next
    entry."""

    time_s: np.ndarray
    replica: np.ndarray
    running: np.ndarray
    kv_blocks_used: np.ndarray


@dataclass(frozen=True, slots=True)
class TokenGaps:
    """Inter-token latencies as a weighted multiset: ``count[i]`` gaps of ``gap_s[i]``
    seconds (one entry per iteration stands for every sequence that continued through it,
    so no per-token array is built)."""

    gap_s: np.ndarray
    count: np.ndarray


@dataclass(frozen=True, slots=True)
class ServeResult:
    """Everything a serving run recorded. ``duration_s``: from 0 to the last finish (or
    the last arrival, if later); ``kv_blocks[r]``: the KV blocks replica r can use (its
    ``kv_blocks`` rounded down to a multiple of its virtual engines)."""

    requests: RequestRecords
    iterations: IterationLog
    timeline: Timeline
    token_gaps: TokenGaps
    duration_s: float
    kv_blocks: tuple[int, ...]
    stages: int
