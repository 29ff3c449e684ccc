"""Interleaved 1F1B (Megatron-LM virtual pipeline, Narayanan et al. 2021), in the order
torch 2.13's ``ScheduleInterleaved1F1B`` runs it.

Each device holds v model chunks with loop placement: stage s sits on device s mod p, so a
microbatch visits every device v times. Microbatches move in rounds of n: device r runs
chunk 0 of microbatches 0..n-1, then chunk 1 of the same n, ..., then chunk 0 of the next
round. As in torch, there are ``rounds = max(1, m // p)`` rounds of ``n = m / rounds``
microbatches each, so m need not be a multiple of p, only of ``rounds``: n = p when p
divides m (Megatron's groups), n = m when m < 2p (a single round), and for example
p = 4, m = 10 runs two rounds of 5. Forward step k (0 <= k < m v) is microbatch
``(k // (n v)) n + k mod n`` on chunk ``(k // n) mod v``; backward step k takes the chunks
in reverse order, ``v - 1 - (k // n) mod v``, on the same microbatch formula.

Phases on rank r:

* warm-up: ``min((v - 1) n + 2 (p - r - 1), m v)`` forward steps (torch's and Megatron's
  count), except every step when m = p (Megatron's rule, kept from pipesim's first order;
  torch warms up with the formula there too);
* steady state: ``m v - warm-up`` times one forward step then one backward step;
* cool-down: the ``warm-up`` backward steps still owed.

Bubble: (p - 1) / (v m) of the ideal time, v times smaller than 1F1B, for v times more
point-to-point messages. Closed form, training with uniform per-chunk costs F and B and no
hop time: makespan ``(m v + p - 1)(F + B)`` when m >= p, whether or not p divides m; with
m < p every chunk's single round waits for its microbatches to come back around the ring,
and the makespan is ``(p v + m - 1)(F + B)`` (m = 1: the one microbatch's p v forwards and
p v backwards end to end).
"""

from __future__ import annotations

import numpy as np

from pipesim.schedules.columns import ATOM_CODE, action_lists
from pipesim.schedules.ir import (
    B,
    F,
    Schedule,
    loop_placement,
    require,
    single_chain,
)
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "interleaved-1f1b"


def microbatches_per_round(devices: int, microbatches: int) -> int:
    """n: torch's round size, ``m / max(1, m // p)`` (p when p divides m)."""
    return microbatches // max(1, microbatches // devices)


def warmup_steps(rank: int, devices: int, microbatches: int, chunks: int) -> int:
    """Forward steps rank ``rank`` runs before its first backward."""
    total = microbatches * chunks
    if microbatches == devices:
        return total
    per_round = microbatches_per_round(devices, microbatches)
    return min((chunks - 1) * per_round + 2 * (devices - rank - 1), total)


def _step_columns(
    devices: int, microbatches: int, chunks: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps 0..m v - 1 as columns, the same for every rank: a forward step's stage and a
    backward step's, each less the rank (``chunk * devices``), and the step's microbatch."""
    per_round = microbatches_per_round(devices, microbatches)
    k = np.arange(microbatches * chunks)
    chunk = (k // per_round) % chunks
    microbatch = (k // (per_round * chunks)) * per_round + k % per_round
    return chunk * devices, (chunks - 1 - chunk) * devices, microbatch


def _fill(columns: tuple[np.ndarray, ...], steps: tuple[np.ndarray, ...], rank: int, warmup: int):
    """Write rank ``rank``'s list into ``columns`` (stage, kind, microbatch; 2 m v long):
    warm-up forward steps 0..warmup-1; in the steady state forward step warmup + k, then
    backward step k; the cool-down's backward steps steady..m v - 1."""
    (stage, kind, microbatch), (forward, backward, count) = columns, steps
    total = len(count)
    warmup = min(warmup, total)
    steady = total - warmup
    cooldown = warmup + 2 * steady  # where the cool-down starts
    parts = (slice(warmup), slice(warmup, cooldown, 2))
    parts += (slice(warmup + 1, cooldown, 2), slice(cooldown, None))
    taken = (slice(warmup), slice(warmup, None), slice(steady), slice(steady, None))
    for at, of, source in zip(parts, taken, (forward, forward, backward, backward), strict=True):
        np.add(source[of], rank, out=stage[at])
        microbatch[at] = count[of]
    kind[:warmup] = kind[warmup:cooldown:2] = ATOM_CODE[F]
    kind[warmup + 1 : cooldown : 2] = kind[cooldown:] = ATOM_CODE[B]


def rank_columns(
    rank: int, devices: int, microbatches: int, chunks: int, warmup: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rank ``rank``'s list as columns (stage, kind, microbatch); ``warmup`` overrides the
    warm-up forward steps (``warmup_steps``)."""
    if warmup is None:
        warmup = warmup_steps(rank, devices, microbatches, chunks)
    columns = tuple(np.empty((3, 2 * microbatches * chunks), dtype=np.int64))
    _fill(columns, _step_columns(devices, microbatches, chunks), rank, warmup)
    return columns


def _valid_near(devices: int, microbatches: int) -> tuple[int, int]:
    """The nearest microbatch counts below and above that split into equal rounds."""

    def fits(m: int) -> bool:
        return m % max(1, m // devices) == 0

    below = next(m for m in range(microbatches - 1, 0, -1) if fits(m))
    above = next(m for m in range(microbatches + 1, microbatches + devices + 1) if fits(m))
    return below, above


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    rounds = max(1, microbatches // devices)
    if microbatches % rounds:
        below, above = _valid_near(devices, microbatches)
        require(
            False,
            f"interleaved-1f1b runs microbatches in rounds = max(1, microbatches // devices) = "
            f"{rounds} of equal size: microbatches={microbatches} with devices={devices} leaves "
            f"{microbatches % rounds} over; use {below} or {above}",
        )
    size = 2 * microbatches * virtual_stages
    steps = _step_columns(devices, microbatches, virtual_stages)
    device = np.repeat(np.arange(devices, dtype=np.int64), size)
    stage, kind, microbatch = np.empty((3, devices * size), dtype=np.int64)
    for rank in range(devices):
        at = slice(rank * size, (rank + 1) * size)
        warmup = warmup_steps(rank, devices, microbatches, virtual_stages)
        _fill((stage[at], kind[at], microbatch[at]), steps, rank, warmup)
    lists = action_lists(devices, device, stage, kind, microbatch)
    stages = devices * virtual_stages
    return Schedule(
        lists,
        loop_placement(devices, virtual_stages),
        single_chain(stages, microbatches),
        NAME,
    )


def closed_form(
    p: int, m: int, v: int, forward_ms: float, backward_ms: float, hop_ms: float, training: bool
) -> tuple[float, float] | None:
    """``(makespan_ms, busy_ms per device)``: training, no hop time, m in equal rounds."""
    if not training or hop_ms != 0 or m % max(1, m // p):
        return None
    slots = m * v + p - 1 if m >= p else p * v + m - 1
    return slots * (forward_ms + backward_ms), m * v * (forward_ms + backward_ms)


POLICY = Policy(
    name=NAME,
    summary="Megatron-LM interleaved 1F1B (virtual pipeline stages, loop placement)",
    constraints="virtual_stages >= 2; microbatches a multiple of rounds = max(1, microbatches // devices)",
    chunks=ChunkRule.at_least(2, note="1 is plain 1f1b"),
    build=build,
    closed_form=closed_form,
)
