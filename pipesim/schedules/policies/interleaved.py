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

from pipesim.schedules.columns import ATOM_CODE, rank_lists
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


def _steps(k: np.ndarray, rank: int, devices: int, chunks: int, per_round: int, forward: bool):
    """Stages and microbatches of forward (or backward) steps ``k`` on ``rank``."""
    chunk = (k // per_round) % chunks
    if not forward:
        chunk = chunks - 1 - chunk
    microbatch = (k // (per_round * chunks)) * per_round + k % per_round
    return chunk * devices + rank, microbatch


def rank_columns(
    rank: int, devices: int, microbatches: int, chunks: int, warmup: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rank ``rank``'s list as columns (stage, kind, microbatch); ``warmup`` overrides the
    warm-up forward steps (``warmup_steps``)."""
    total = microbatches * chunks
    per_round = microbatches_per_round(devices, microbatches)
    if warmup is None:
        warmup = warmup_steps(rank, devices, microbatches, chunks)
    warmup = min(warmup, total)
    steady = total - warmup
    # the program as steps: warm-up forwards 0..warmup-1; steady state forward warmup + k,
    # then backward k; cool-down backwards steady..total-1
    forward = np.concatenate([np.arange(warmup), np.full(2 * steady, -1), np.full(warmup, -1)])
    forward[warmup : warmup + 2 * steady : 2] = np.arange(warmup, total)
    backward = np.full(total * 2, -1)
    backward[warmup + 1 : warmup + 2 * steady : 2] = np.arange(steady)
    backward[warmup + 2 * steady :] = np.arange(steady, total)
    is_forward = forward >= 0
    stage, microbatch = np.empty(2 * total, np.int64), np.empty(2 * total, np.int64)
    for mask, steps, ahead in ((is_forward, forward, True), (~is_forward, backward, False)):
        stage[mask], microbatch[mask] = _steps(steps[mask], rank, devices, chunks, per_round, ahead)
    return stage, np.where(is_forward, ATOM_CODE[F], ATOM_CODE[B]), microbatch


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
    lists = rank_lists(
        [rank_columns(r, devices, microbatches, virtual_stages) for r in range(devices)]
    )
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
