"""Interleaved zero bubble (torch.distributed.pipelining's ``ScheduleInterleavedZeroBubble``).

Interleaved 1F1B's loop placement (stage s on device s mod p, v chunks per device) with the
backward split as in ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024):
``I`` (input gradient) stays on the critical path, and each rank holds its ``W`` (weight
gradient) passes back by its rank, so that they fill the tail of the pipeline.

Microbatches move in rounds, as in torch: ``rounds = max(1, m // p)`` rounds of
``n = m / rounds`` microbatches each (m must be a multiple of ``rounds``). Forward step k
(0 <= k < m v) on rank r runs chunk ``(k // n) mod v`` on microbatch
``(k // (n v)) n + k mod n``; backward step k runs chunk ``v - 1 - (k // n) mod v`` on
the microbatch given by the same formula. When p divides m, n = p and the forwards and
input gradients run in interleaved 1F1B's order.

Phases on rank r (torch's ``_get_1f1b_rank_ops`` with ``enable_zero_bubble``):

* warm-up: ``min((v - 1) n + p - 1 - r, m v)`` forward steps (interleaved 1F1B's warm-up
  with one step per rank below instead of two);
* steady state: one forward step, the next ``I``, and, from the r-th backward step on, the
  ``W`` of the oldest ``I`` whose ``W`` is owed;
* cool-down: the ``I`` steps still owed, each followed by a ``W`` as above;
* flush: the ``r`` W's still owed.

With p dividing m and ``T_W`` no larger than ``T_F`` and ``T_I`` (times of one chunk), the
step takes ``m v (T_F + T_I + T_W) + (p-1)(T_F + T_I - T_W)``: ZB-H1's bubble on chunk
times, v times smaller than ZB-H1's on the same model.
"""

from __future__ import annotations

import numpy as np

from pipesim.schedules.columns import ATOM_CODE, rank_lists
from pipesim.schedules.ir import (
    Action,
    F,
    I,
    Kind,
    Schedule,
    W,
    loop_placement,
    require,
    single_chain,
)
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "interleaved-zero-bubble"


def _rounds(devices: int, microbatches: int) -> int:
    return max(1, microbatches // devices)


def _step(
    k: int, rank: int, devices: int, chunks: int, per_round: int, backward: bool
) -> tuple[int, int]:
    """Stage and microbatch of forward (or backward) step k on ``rank``."""
    chunk = (k // per_round) % chunks
    if backward:
        chunk = chunks - 1 - chunk
    microbatch = (k // (per_round * chunks)) * per_round + k % per_round
    return chunk * devices + rank, microbatch


def rank_actions(rank: int, devices: int, microbatches: int, chunks: int) -> tuple[Action, ...]:
    per_round = microbatches // _rounds(devices, microbatches)
    total = microbatches * chunks
    warmup = min((chunks - 1) * per_round + devices - 1 - rank, total)

    def action(k: int, kind: Kind, backward: bool) -> Action:
        stage, microbatch = _step(k, rank, devices, chunks, per_round, backward)
        return Action(stage, kind, microbatch)

    actions = [action(k, F, False) for k in range(warmup)]  # warm-up
    for k in range(total):  # steady state while forwards remain, then cool-down
        if warmup + k < total:
            actions.append(action(warmup + k, F, False))
        actions.append(action(k, I, True))
        if k >= rank:
            actions.append(action(k - rank, W, True))
    actions += [action(k, W, True) for k in range(max(total - rank, 0), total)]  # flush
    return tuple(actions)


def rank_columns(
    rank: int, devices: int, microbatches: int, chunks: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``rank_actions`` as columns ``(stage, kind, microbatch)`` (kind as ``ATOM_CODE``):
    each steady step k is a slot of (``F`` warm-up + k, ``I`` k, ``W`` k - rank), each kept
    where the loop would emit it."""
    per_round = microbatches // _rounds(devices, microbatches)
    total = microbatches * chunks
    warmup = min((chunks - 1) * per_round + devices - 1 - rank, total)
    k = np.arange(total)
    steps = np.stack([warmup + k, k, k - rank], axis=1)
    backward = np.array([False, True, True])
    slot_kind = np.array([ATOM_CODE[F], ATOM_CODE[I], ATOM_CODE[W]])
    keep = np.stack([warmup + k < total, np.ones(total, dtype=bool), k >= rank], axis=1)
    flush = np.arange(max(total - rank, 0), total)
    step = np.concatenate([np.arange(warmup), steps[keep], flush])
    is_backward = np.concatenate(
        [np.zeros(warmup, dtype=bool), np.broadcast_to(backward, (total, 3))[keep], flush >= 0]
    )
    kind = np.concatenate(
        [
            np.full(warmup, ATOM_CODE[F]),  # warm-up
            np.broadcast_to(slot_kind, (total, 3))[keep],  # steady state, cool-down
            np.full(len(flush), ATOM_CODE[W]),  # flush
        ]
    )
    chunk = (step // per_round) % chunks  # as ``_step``, for every step at once
    chunk = np.where(is_backward, chunks - 1 - chunk, chunk)
    microbatch = (step // (per_round * chunks)) * per_round + step % per_round
    return chunk * devices + rank, kind, microbatch


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    p, m, v = devices, microbatches, virtual_stages
    rounds = _rounds(p, m)
    require(
        m % rounds == 0,
        f"interleaved-zero-bubble runs microbatches={m} in max(1, microbatches // devices)="
        f"{rounds} rounds of equal size: use a multiple of {rounds}, e.g. {m - m % rounds}",
    )
    lists = rank_lists([rank_columns(r, p, m, v) for r in range(p)])
    return Schedule(lists, loop_placement(p, v), single_chain(p * v, m), NAME)


POLICY = Policy(
    name=NAME,
    summary="interleaved 1F1B with split backward, W deferred by rank (torch)",
    constraints="virtual_stages >= 2; microbatches a multiple of max(1, microbatches // devices)",
    chunks=ChunkRule.at_least(2),
    build=build,
)
