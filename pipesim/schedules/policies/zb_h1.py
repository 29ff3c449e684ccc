"""ZB-H1 (Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024, section 2.1).

The backward is split in two: ``I`` computes the gradient of the stage's input, which the
previous stage waits for, and ``W`` the gradient of the weights, which nobody waits for.
ZB-H1 is 1F1B with the backward split and each device's W held back by its rank, so that
the W passes fill the tail that 1F1B leaves idle (the paper's figure 3, top).

Rank r (0-based) of p runs, in the figure's order:

* warm-up: ``p - r`` forwards (device 1 of the figure runs F1 F2 F3 F4 before its first B);
* steady state: ``I``, then the ``W`` of the oldest microbatch once more than ``r`` are
  owed, then the next ``F``;
* cool-down: the same without the ``F``, once every forward has run;
* flush: the ``r`` W's still owed (device 4 of the figure ends W5 W6 W7 W8).

With m >= p and ``T_W`` no larger than ``T_F`` and ``T_I``, the bubble (longest span less
``m (T_F + T_I + T_W)``) is ``(p-1)(T_F + T_I - T_W)``, against 1F1B's
``(p-1)(T_F + T_I + T_W)``: a third of it when the three are equal (the paper's table 2).
Rank r holds at most ``p - r``
activations awaiting their ``I`` and ``r`` awaiting their ``W``: peak activation memory
``(p-r) M_B + r M_W``, which is 1F1B's ``p M_B`` on rank 0 and no more elsewhere.
"""

from __future__ import annotations

import numpy as np

from pipesim.schedules.columns import ATOM_CODE, rank_lists
from pipesim.schedules.ir import Action, F, I, Schedule, W, single_chain
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "zb-h1"


def split_backward_rank_actions(
    stage: int, microbatches: int, warmup: int, weight_delay: int
) -> tuple[Action, ...]:
    """One rank of a handcrafted zero-bubble schedule (ZB-H1, ZB-H2).

    ``warmup`` forwards, then for each microbatch i in order: ``I`` of i, ``W`` of
    ``i - weight_delay`` (none while i < weight_delay), and the next forward while any are
    left; then the ``weight_delay`` W's still owed.
    """
    m = microbatches
    warmup = min(warmup, m)
    actions = [Action(stage, F, i) for i in range(warmup)]  # warm-up
    for i in range(m):  # steady state while forwards remain, then cool-down
        actions.append(Action(stage, I, i))
        if i >= weight_delay:
            actions.append(Action(stage, W, i - weight_delay))
        if warmup + i < m:
            actions.append(Action(stage, F, warmup + i))
    actions += [Action(stage, W, i) for i in range(max(m - weight_delay, 0), m)]  # flush
    return tuple(actions)


def split_backward_rank_columns(
    stage: int, microbatches: int, warmup: int, weight_delay: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``split_backward_rank_actions`` as columns ``(stage, kind, microbatch)`` (kind as
    ``ATOM_CODE``): the steady state is m slots of (``I`` i, ``W`` i - delay, ``F``
    warm-up + i), each kept where the loop would emit it."""
    m, delay = microbatches, weight_delay
    warmup = min(warmup, m)
    i = np.arange(m)
    slot_kind = np.array([ATOM_CODE[I], ATOM_CODE[W], ATOM_CODE[F]])
    slot_microbatch = np.stack([i, i - delay, warmup + i], axis=1)
    keep = np.stack([np.ones(m, dtype=bool), i >= delay, warmup + i < m], axis=1)
    flush = np.arange(max(m - delay, 0), m)
    kind = np.concatenate(
        [
            np.full(warmup, ATOM_CODE[F]),  # warm-up
            np.broadcast_to(slot_kind, (m, 3))[keep],  # steady state, cool-down
            np.full(len(flush), ATOM_CODE[W]),  # flush
        ]
    )
    microbatch = np.concatenate([np.arange(warmup), slot_microbatch[keep], flush])
    return np.full(len(kind), stage), kind, microbatch


def rank_actions(rank: int, devices: int, microbatches: int) -> tuple[Action, ...]:
    return split_backward_rank_actions(rank, microbatches, warmup=devices - rank, weight_delay=rank)


def rank_columns(rank: int, devices: int, microbatches: int) -> tuple[np.ndarray, ...]:
    """``rank_actions`` as columns (``split_backward_rank_columns``)."""
    return split_backward_rank_columns(rank, microbatches, warmup=devices - rank, weight_delay=rank)


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    lists = rank_lists([rank_columns(r, devices, microbatches) for r in range(devices)])
    return Schedule(lists, tuple(range(devices)), single_chain(devices, microbatches), NAME)


POLICY = Policy(
    name=NAME,
    summary="Zero Bubble ZB-H1: split backward, W deferred by rank; 1/3 of 1F1B's bubble, same memory",
    constraints="virtual_stages = 1",
    chunks=ChunkRule.exactly(1),
    build=build,
)
