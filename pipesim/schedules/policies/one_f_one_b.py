"""1F1B (PipeDream-Flush; Megatron-LM's default non-interleaved schedule).

Rank r runs three phases:

* warm-up: ``min(p - r - 1, m)`` forwards, filling the pipeline below it;
* steady state: one forward, then one backward (of the oldest microbatch in flight),
  ``m - warmup`` times;
* cool-down: the ``warmup`` backwards still owed.

Same makespan as GPipe with uniform costs, ``(m + p - 1)(F + B)``, but rank r holds at
most ``p - r`` activations instead of m. Only without hop time: a hop's latency lands on
every steady-state cycle, so there is no short closed form with latency.
"""

from __future__ import annotations

import numpy as np

from pipesim.schedules.columns import ATOM_CODE, action_lists
from pipesim.schedules.ir import B, F, Schedule, single_chain
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "1f1b"


def rank_columns(
    rank: int, devices: int, microbatches: int, warmup: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rank ``rank``'s list as columns (stage, kind, microbatch); ``warmup`` overrides the
    ``p - r - 1`` warm-up forwards."""
    kind, microbatch = np.empty((2, 2 * microbatches), dtype=np.int64)
    _fill(kind, microbatch, np.arange(microbatches), devices - rank - 1, warmup)
    return np.full(2 * microbatches, rank), kind, microbatch


def _fill(kind: np.ndarray, microbatch: np.ndarray, count: np.ndarray, usual: int, warmup):
    """Write one rank's kinds and microbatches (``count``: 0, 1, ..., m - 1; ``usual``:
    its warm-up forwards unless ``warmup`` says otherwise)."""
    m = len(count)
    warmup = min(usual if warmup is None else warmup, m)
    steady = m - warmup
    cooldown = warmup + 2 * steady  # where the cool-down starts
    kind[:warmup] = ATOM_CODE[F]  # warm-up
    kind[warmup:cooldown:2] = ATOM_CODE[F]  # steady state: 1F then 1B
    kind[warmup + 1 : cooldown : 2] = ATOM_CODE[B]
    kind[cooldown:] = ATOM_CODE[B]  # cool-down
    microbatch[:warmup] = count[:warmup]
    microbatch[warmup:cooldown:2] = count[warmup:]
    microbatch[warmup + 1 : cooldown : 2] = count[:steady]
    microbatch[cooldown:] = count[steady:]


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    """Every rank's columns written in place into the schedule's (rank r runs stage r)."""
    size, count = 2 * microbatches, np.arange(microbatches)
    device = np.repeat(np.arange(devices, dtype=np.int64), size)
    kind, microbatch = np.empty((2, devices * size), dtype=np.int64)
    for rank in range(devices):
        at = slice(rank * size, (rank + 1) * size)
        _fill(kind[at], microbatch[at], count, devices - rank - 1, None)
    lists = action_lists(devices, device, device, kind, microbatch)
    return Schedule(lists, tuple(range(devices)), single_chain(devices, microbatches), NAME)


def closed_form(
    p: int, m: int, v: int, forward_ms: float, backward_ms: float, hop_ms: float, training: bool
) -> tuple[float, float] | None:
    """``(makespan_ms, busy_ms per device)`` with uniform costs and no hop time, else None."""
    if hop_ms != 0:
        return None
    work = forward_ms + backward_ms if training else forward_ms
    return (m + p - 1) * work, m * work


POLICY = Policy(
    name=NAME,
    summary="one forward one backward with a flush (PipeDream-Flush, Megatron-LM)",
    constraints="virtual_stages = 1",
    chunks=ChunkRule.exactly(1),
    build=build,
    closed_form=closed_form,
)
