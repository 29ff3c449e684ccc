"""ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 6).

The model is cut into 2D stages folded onto the D devices in a V: device d holds stage d
(chunk 0, on the way down) and stage 2D-1-d (chunk 1, on the way back up), so the first
and the last stage share device 0. The backward is split: ``I`` computes the input
gradient (the critical path), ``W`` the weight gradient (free to wait), and the W's fill
what would otherwise be bubbles.

Device d runs, with F0/F1 a chunk-0/chunk-1 forward (the paper's figure 8, and torch's
``ScheduleZBVZeroBubble``):

* warm-up: ``2(D-d) - 1`` F0; then ``d`` times F1 F0; then ``D-d`` times F1 I1 W1
  (chunk 1's first backwards start as soon as the microbatch turns at the bottom of the V);
* steady state: F0 I0 W0 F1 I1 W1, until every forward is issued (the F0 is left out
  once all m have run);
* cool-down: ``d`` times I0 I1; ``D-d`` times I0 W0; then the W still owed, chunk 1's first.

With equal F, I and W times and no communication each device works without a gap from
its first action to its last (bubble rate 0 in the paper's span sense), and device d holds
at most 2D chunk activations, D microbatches of a 1F1B stage: the same peak as 1F1B.
Fewer than 2D-1 microbatches are scheduled as if there were 2D-1, with the missing ones
left out.
"""

from __future__ import annotations

import numpy as np

from pipesim.schedules.columns import ATOM_CODE, rank_lists
from pipesim.schedules.ir import F, I, Schedule, W, single_chain, v_placement
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "zbv"


def rank_columns(
    rank: int, devices: int, microbatches: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rank ``rank``'s list as columns (stage, kind, microbatch)."""
    d, p = rank, devices
    n = max(microbatches, 2 * p - 1)  # pad to fill the V, then drop the padding below
    # The order as (chunk, kind) steps; the k-th step of each pair is its microbatch k.
    # Warm-up: 2(D-d)-1 F0, then d x (F1 F0), then (D-d) x (F1 I1 W1)
    steps = [_times([F0], 2 * (p - d) - 1), _times([F1, F0], d), _times([F1, I1, W1], p - d)]
    # Steady state: F0 I0 W0 F1 I1 W1 until chunk 0 has run n forwards, then I0 W0 F1 I1
    # W1 until chunk 1 has caught up with them
    forwards0, forwards1 = 2 * (p - d) - 1 + d, p
    with_forward = max(0, n - forwards0)
    rounds = max(with_forward, max(n, forwards0) - forwards1)
    without = rounds - with_forward
    steps += [_times([F0, I0, W0, F1, I1, W1], with_forward), _times([I0, W0, F1, I1, W1], without)]
    # Cool-down: d x (I0 I1), (D-d) x (I0 W0), then the W still owed
    steps += [_times([I0, I1], d), _times([I0, W0], p - d)]
    issued = np.bincount(np.concatenate(steps), minlength=len(_STEPS))
    steps += [_times([W1], issued[I1] - issued[W1]), _times([W0], issued[I0] - issued[W0])]
    return _numbered(np.concatenate(steps), (d, 2 * p - 1 - d), microbatches)


def _times(pattern: list[int], count: int) -> np.ndarray:
    """``pattern`` repeated ``count`` times, as one array (a list's ``pattern * count``)."""
    return np.tile(np.asarray(pattern, dtype=np.int64), count)


# The six steps of a rank, as small codes: chunk 0's F, I, W, then chunk 1's, and the kind
# of each
F0, I0, W0, F1, I1, W1 = range(6)
_STEPS = (F, I, W, F, I, W)
_KIND_CODES = np.array([ATOM_CODE[kind] for kind in _STEPS])


def _numbered(
    steps: np.ndarray, stages: tuple[int, int], microbatches: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each step as (stage, kind, microbatch), its microbatch how many of its kind came
    before, the padding left out."""
    microbatch = np.empty(len(steps), dtype=np.int64)
    for code in range(len(_STEPS)):
        where = np.flatnonzero(steps == code)
        microbatch[where] = np.arange(len(where))
    kept = microbatch < microbatches
    steps = steps[kept]
    return np.where(steps >= F1, stages[1], stages[0]), _KIND_CODES[steps], microbatch[kept]


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    lists = rank_lists([rank_columns(r, devices, microbatches) for r in range(devices)])
    return Schedule(lists, v_placement(devices), single_chain(2 * devices, microbatches), NAME)


POLICY = Policy(
    name=NAME,
    summary="Zero Bubble ZB-V: V placement, split backward, zero bubble at 1F1B's memory",
    constraints="virtual_stages = 2",
    chunks=ChunkRule.exactly(2),
    build=build,
)
