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

from pipesim.schedules.columns import ATOM_CODE, action_lists
from pipesim.schedules.ir import F, I, Schedule, W, single_chain, v_placement
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "zbv"


# The six steps of a rank, as small codes: chunk 0's F, I, W, then chunk 1's, and the kind
# of each
F0, I0, W0, F1, I1, W1 = range(6)
_KIND_CODES = tuple(ATOM_CODE[kind] for kind in (F, I, W, F, I, W))


def rank_columns(
    rank: int, devices: int, microbatches: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rank ``rank``'s list as columns (stage, kind, microbatch)."""
    columns = tuple(np.empty((3, 6 * microbatches), dtype=np.int64))
    _fill(columns, rank, devices, microbatches)
    return columns


def _fill(columns: tuple[np.ndarray, ...], rank: int, devices: int, microbatches: int) -> None:
    """Write rank ``rank``'s list into ``columns`` (stage, kind, microbatch): each of the
    six (chunk, kind) steps runs n times, so 6n entries, 6m once the padding is dropped."""
    d, p = rank, devices
    n = max(microbatches, 2 * p - 1)  # pad to fill the V, then drop the padding below
    padded = columns if n == microbatches else tuple(np.empty((3, 6 * n), dtype=np.int64))
    # The order as runs of (chunk, kind) steps; the k-th step of each pair is its microbatch
    # k. Warm-up: 2(D-d)-1 F0, then d x (F1 F0), then (D-d) x (F1 I1 W1)
    runs = [((F0,), 2 * (p - d) - 1), ((F1, F0), d), ((F1, I1, W1), p - d)]
    # Steady state: F0 I0 W0 F1 I1 W1 until chunk 0 has run n forwards, then I0 W0 F1 I1
    # W1 until chunk 1 has caught up with them
    forwards0, forwards1 = 2 * (p - d) - 1 + d, p
    with_forward = max(0, n - forwards0)
    rounds = max(with_forward, max(n, forwards0) - forwards1)
    runs += [
        ((F0, I0, W0, F1, I1, W1), with_forward),
        ((I0, W0, F1, I1, W1), rounds - with_forward),
    ]
    # Cool-down: d x (I0 I1), (D-d) x (I0 W0), then the W still owed
    runs += [((I0, I1), d), ((I0, W0), p - d)]
    seen, start, count = [0] * 6, 0, np.arange(n)
    for pattern, times in runs:
        start = _write(padded, start, pattern, times, seen, (d, 2 * p - 1 - d), count)
    for code, owed in ((W1, seen[I1] - seen[W1]), (W0, seen[I0] - seen[W0])):
        start = _write(padded, start, (code,), owed, seen, (d, 2 * p - 1 - d), count)
    if padded is not columns:
        kept = padded[2] < microbatches
        for column, full in zip(columns, padded, strict=True):
            column[:] = full[kept]


def _write(columns, start, pattern, times, seen, stages, count) -> int:
    """Write ``pattern`` repeated ``times`` times at ``start`` of ``columns``, each step's
    microbatch how many of its code came before (``seen``, updated); returns the end."""
    stage, kind, microbatch = columns
    width = len(pattern)
    stop = start + width * times
    for offset, code in enumerate(pattern):
        at = slice(start + offset, stop, width)
        stage[at] = stages[code >= F1]
        kind[at] = _KIND_CODES[code]
        np.add(count[:times], seen[code], out=microbatch[at])
        seen[code] += times
    return stop


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    """Every rank's columns written in place into the schedule's (6m actions a rank)."""
    size = 6 * microbatches
    device = np.repeat(np.arange(devices, dtype=np.int64), size)
    stage, kind, microbatch = np.empty((3, devices * size), dtype=np.int64)
    for rank in range(devices):
        at = slice(rank * size, (rank + 1) * size)
        _fill((stage[at], kind[at], microbatch[at]), rank, devices, microbatches)
    lists = action_lists(devices, device, stage, kind, microbatch)
    return Schedule(lists, v_placement(devices), single_chain(2 * devices, microbatches), NAME)


POLICY = Policy(
    name=NAME,
    summary="Zero Bubble ZB-V: V placement, split backward, zero bubble at 1F1B's memory",
    constraints="virtual_stages = 2",
    chunks=ChunkRule.exactly(2),
    build=build,
)
