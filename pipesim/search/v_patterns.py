"""V building blocks squeezed greedily, the weight passes placed while squeezing.

``pipesim.schedules.policies.building_blocks`` squeezes a repeated V block by moving F and
I passes and filling the W passes in afterwards. Qi et al. (2024, "Pipeline Parallelism
with Controllable Memory", arXiv 2405.15362, section 4) describe a second way, which the
authors' V-Half and V-Min (``zbv_greedy.py`` in sail-sg/zero-bubble-pipeline-parallelism)
take: on the unit grid (one pass per unit, the block repeated every 6 units), the W passes
get units of their own first, and then a greedy pass pulls each pass into the earliest free
unit after its inputs, as long as the device's peak stays within the block's. The two
squeezes leave different orders at the ends of the pipeline; with link latency or with I
and W unlike F, either can be the faster, so the search weighs both.

The recipe, on each device's rows of units (F0, F1, I1, I0, then W):

1. repeat: microbatch i's passes at the block's units plus ``6 i``;
2. place W: walking the units, each free one takes an owed W (one is owed per I done);
3. greedy pass with the W: visiting passes in unit order (then device, row, microbatch),
   each pass of the warm-up (before device 0's first I0) and of the cool-down (from the
   first last-microbatch F0 on) moves to the earliest free unit after its inputs that keeps
   the device's activation count (+1 at an F, -1 at a W) within the largest peak of any
   device; the steady state between stays as repeated;
4. re-time: every pass as early as its inputs and its device's previous pass allow, on
   unit costs, the order kept;
5. greedy pass without the W: drop them, and pull the cool-down's passes forward again, now
   counting a W as done in the first free unit after it is owed;
6. re-time, and place W again, a chunk-1 W first where both are owed.

Each device's order is its passes in unit order: the schedule.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipesim.schedules.ir import Action, F, I, Schedule, W, single_chain, v_placement
from pipesim.schedules.policies import v_half, v_min
from pipesim.schedules.policies.building_blocks import INTERVAL, BlockOffsets

# rows of a device's grid: the block's four passes, then W (one row, or one per chunk)
_F0, _F1, _I1, _I0, _W1, _W0 = range(6)
_BACKWARD = (_I1, _I0)
Rows = list[list[int]]  # rows[row][microbatch] -> unit
Grid = list[Rows]  # one Rows per device


def greedy_v_schedule(
    devices: int, microbatches: int, blocks: Sequence[BlockOffsets], name: str
) -> Schedule:
    """The V order of ``blocks`` (one (F0, F1, I1, I0) per device) squeezed greedily."""
    grid = [[[u + INTERVAL * mb for mb in range(microbatches)] for u in b] for b in blocks]
    grid = _greedy_pass(grid, with_weights=True)  # 2. to 4.
    grid = _greedy_pass([rows[:4] for rows in grid], with_weights=False)  # 5.
    grid = [place_weights(rows[:4], per_chunk=True) for rows in grid]  # 6.
    orders = tuple(_device_order(rows, d, devices) for d, rows in enumerate(grid))
    return Schedule(orders, v_placement(devices), single_chain(2 * devices, microbatches), name)


def pattern_schedules(devices: int, microbatches: int, name: str) -> list[Schedule]:
    """V-Half's and V-Min's blocks squeezed greedily (the authors' own squeeze)."""
    return [
        greedy_v_schedule(devices, microbatches, policy.blocks(devices), name)
        for policy in (v_half, v_min)
    ]


def place_weights(rows: Rows, per_chunk: bool) -> Rows:
    """``rows`` (F0, F1, I1, I0) and the W: each free unit up to the last pass takes an
    owed W (with ``per_chunk``, chunk 1's before chunk 0's), the rest follow one a unit."""
    kind_at = {unit: row for row, units in enumerate(rows) for unit in units}
    last = max(kind_at)
    owed, weights = [0, 0], [[], []]
    for unit in range(last + 1):
        row = kind_at.get(unit)
        if row in _BACKWARD:
            owed[row - _I1 if per_chunk else 0] += 1
        elif row is None:
            chunk = 0 if owed[0] else (1 if owed[1] else -1)
            if chunk >= 0:
                weights[chunk].append(unit)
                owed[chunk] -= 1
    for chunk in range(2):
        weights[chunk].extend(range(last + 1, last + 1 + owed[chunk]))
        last += owed[chunk]
    return [*rows, *(weights if per_chunk else weights[:1])]


def activation_peak(rows: Rows) -> int:
    """The most chunk activations the device holds: +1 at each F, -1 at each W; with no W
    row, a W takes each free unit up to the last pass while one is owed (oldest I first)."""
    last = max(units[-1] for units in rows if units)
    change = np.zeros(last + 2, np.int64)
    change[rows[_F0]] += 1
    change[rows[_F1]] += 1
    if len(rows) > 4:
        weights = np.array(rows[4], np.int64)
    else:
        taken = np.zeros(last + 1, bool)
        for units in rows:
            taken[units] = True
        free = np.flatnonzero(~taken)
        done = np.sort(np.array(rows[_I1] + rows[_I0], np.int64))
        first = np.searchsorted(free, done + 1)
        k = np.arange(len(done))
        index = k + np.maximum.accumulate(first - k)  # first come, first served
        weights = free[index[index < len(free)]]
    change[np.minimum(weights, last + 1)] -= 1
    return max(0, int(np.cumsum(change[: last + 1]).max()))


def _ready(grid: Grid, device: int, row: int, mb: int) -> int:
    """The first unit a pass may take: after its inputs and its row's previous microbatch
    (a W after the mb-th backward done on its device)."""
    rows, ready = grid[device], -1
    if row in (_F0, _I1) and device > 0:  # travelling down the V
        ready = grid[device - 1][row][mb]
    if row in (_F1, _I0) and device + 1 < len(grid):  # travelling up
        ready = max(ready, grid[device + 1][row][mb])
    if 0 < row < 4:  # the block's previous pass on the device
        ready = max(ready, rows[row - 1][mb])
    if row == 4:
        ready = max(ready, sorted(rows[_I1] + rows[_I0])[mb])
    if mb > 0:
        ready = max(ready, rows[row][mb - 1])
    return ready + 1


def _greedy_pass(grid: Grid, with_weights: bool) -> Grid:
    """Steps 3 and 4 (``with_weights``), or step 5 and its re-timing (module docstring)."""
    grid = [[list(units) for units in rows] for rows in grid]
    if with_weights:
        grid = [place_weights(rows, per_chunk=False) for rows in grid]
    cap = max(activation_peak(rows) for rows in grid)
    m = len(grid[0][0])
    visits = sorted(
        (unit, d, row, mb)
        for d, rows in enumerate(grid)
        for row, units in enumerate(rows)
        for mb, unit in enumerate(units)
    )
    taken = [bytearray(visits[-1][0] + 1) for _ in grid]
    phase = 0  # 0: warm-up, 1: steady state (kept), 2: cool-down
    for _, d, row, mb in visits:
        if phase == 0 and row == _I0 and d == 0:
            phase = 1
        if phase == 1 and row == _F0 and mb == m - 1:
            phase = 2
        elif phase == 2 or (phase == 0 and with_weights):
            grid[d][row][mb] = _earliest_fit(grid, d, row, mb, taken[d], cap)
        taken[d][grid[d][row][mb]] = 1
    if not with_weights:
        grid = [place_weights(rows, per_chunk=False) for rows in grid]
    return _retimed(grid)


def _earliest_fit(grid: Grid, d: int, row: int, mb: int, taken: bytearray, cap: int) -> int:
    """The earliest free unit from the pass's ready unit on that keeps the peak <= cap, or
    the unit it has."""
    rows, unit = grid[d], grid[d][row][mb]
    for earlier in range(_ready(grid, d, row, mb), unit):
        if not taken[earlier]:
            rows[row][mb] = earlier
            if activation_peak(rows) <= cap:
                return earlier
    rows[row][mb] = unit
    return unit


def _retimed(grid: Grid) -> Grid:
    """Step 4: every pass at the earliest unit its inputs, its row's previous microbatch
    and its device's previous pass allow (unit costs), each device's order kept."""
    visits = sorted(
        (unit, d, row, mb)
        for d, rows in enumerate(grid)
        for row, units in enumerate(rows)
        for mb, unit in enumerate(units)
    )
    ends = [[[0] * len(units) for units in rows] for rows in grid]
    free_from = [0] * len(grid)
    for _, d, row, mb in visits:
        start = free_from[d]
        if row in (_F0, _I1) and d > 0:
            start = max(start, ends[d - 1][row][mb])
        if row in (_F1, _I0) and d + 1 < len(grid):
            start = max(start, ends[d + 1][row][mb])
        if 0 < row < 4:
            start = max(start, ends[d][row - 1][mb])
        if mb > 0:
            start = max(start, ends[d][row][mb - 1])
        ends[d][row][mb] = free_from[d] = start + 1
    return [[[end - 1 for end in units] for units in rows] for rows in ends]


def _device_order(rows: Rows, device: int, devices: int) -> tuple[Action, ...]:
    stage0, stage1 = device, 2 * devices - 1 - device
    meaning = ((stage0, F), (stage1, F), (stage1, I), (stage0, I), (stage1, W), (stage0, W))
    placed = sorted(
        (unit, row, mb) for row, units in enumerate(rows) for mb, unit in enumerate(units)
    )
    return tuple(Action(meaning[row][0], meaning[row][1], mb) for _, row, mb in placed)


__all__ = ["activation_peak", "greedy_v_schedule", "pattern_schedules", "place_weights"]
