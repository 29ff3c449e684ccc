"""V-shape schedules made by repeating a building block (Qi et al. 2024, arXiv 2405.15362).

"Pipeline Parallelism with Controllable Memory" looks at a pipeline schedule as one
*building block*, the passes of a single microbatch on every device, stamped out again
and again at a fixed interval. In steady state a device then holds one activation for
every copy of the block whose life on it (first forward to last weight-gradient pass) is
still open: the block's lifespan divided by the interval. Peak activation memory is
chosen by shaping the block, not by tuning the schedule afterwards.

Here the model has 2D stages in a V (stage d and stage 2D-1-d on device d). A block
gives, for each device, when chunk 0's forward (F0), chunk 1's forward (F1), chunk 1's
input-gradient backward (I1) and chunk 0's input-gradient backward (I0) of microbatch 0
run, counted in units of one pass (F = I = W). Microbatch i runs the same block
``6 i`` units later: per interval a device does 2 F, 2 I and 2 W, and the four offsets
are distinct modulo 6, so the two free slots of each interval take the W passes.

Building a schedule takes three steps:

1. repeat: microbatch i's F and I passes at ``offset + 6 i``;
2. squeeze: the repeated blocks leave gaps while the pipeline fills and drains; walk the
   passes in time order and pull each one into the earliest free slot after its inputs,
   as long as the device's activation memory (with the W placed as step 3 would place
   them) stays within the steady state's peak, so the squeeze never costs memory;
3. fill: every W takes the first free slot after its I, oldest first, and memory is
   counted until that W ends (the weight gradient still needs the activation).

The per-device order of the result is the schedule; the engine then runs it as fast as
the real costs allow.

The squeeze tries every pass against the memory cap, often many slots in a row, so the
check must not recount the whole device: ``_MemoryProfile`` writes the peak as the largest
of ``X(t) + max Y(u <= t)`` over slots t, with X and Y running sums that a move changes
only inside the window it spans, and decides a move from that window alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from pipesim.schedules.columns import ATOM_CODE, rank_lists
from pipesim.schedules.ir import F, I, Kind, Schedule, W, single_chain, v_placement
from pipesim.schedules.policies.squeeze_loop import compiled_squeeze

INTERVAL = 6  # units per repeated block: F0, F1, I1, I0 and two W
BlockOffsets = tuple[int, int, int, int]  # (F0, F1, I1, I0) start units of microbatch 0

# A device's F and I passes in four rows of m microbatches: pass k = row * m + microbatch.
_ROWS: tuple[tuple[Kind, int], ...] = ((F, 0), (F, 1), (I, 0), (I, 1))  # (kind, chunk)
_F0, _F1, _I0, _I1 = range(4)
_KIND_CODES = np.array([ATOM_CODE[F], ATOM_CODE[I], ATOM_CODE[W]])  # F, I, W as ATOM_CODE
_ONE_BY_ONE = 2  # free slots tried one at a time before the squeeze judges a whole window


def build_v_schedule(
    devices: int, microbatches: int, blocks: Sequence[BlockOffsets], name: str
) -> Schedule:
    """Repeat ``blocks[d]`` on each device d, squeeze, fill in the W, return the Schedule."""
    # every device's grid has room for all its W after its last F or I
    length = max(max(offsets) for offsets in blocks) + (INTERVAL + 2) * microbatches + 2
    grids = [_DeviceGrid(offsets, microbatches, length) for offsets in blocks]  # 1. repeat
    _squeeze(grids, microbatches)  # 2. squeeze
    lists = rank_lists([_device_columns(grid, d, devices) for d, grid in enumerate(grids)])
    return Schedule(lists, v_placement(devices), single_chain(2 * devices, microbatches), name)


def check_blocks(blocks: Sequence[BlockOffsets]) -> None:
    """A block is usable when each device's four offsets are distinct modulo the interval."""
    for device, offsets in enumerate(blocks):
        residues = {o % INTERVAL for o in offsets}
        if len(residues) != len(offsets):
            raise ValueError(f"device {device}: block offsets {offsets} collide modulo {INTERVAL}")


# ---------------------------------------------------------------------------
# 1. repeat, and 3. fill in the W: one device's grid


class _DeviceGrid:
    """One device's F and I slots on the unit grid; W passes are implied (step 3).

    ``where[row * m + microbatch]`` is a pass's slot (rows F0, F1, I0, I1); ``taken`` marks
    occupied slots (1) and free ones (0) of a grid of ``length`` slots, long enough for
    every W. ``memory`` follows the device's activation count as passes move.
    """

    def __init__(self, offsets: BlockOffsets, microbatches: int, length: int) -> None:
        f0, f1, i1, i0 = offsets
        self.microbatches = microbatches
        self.where = [o + INTERVAL * mb for o in (f0, f1, i0, i1) for mb in range(microbatches)]
        self.taken = bytearray(length)
        for slot in self.where:
            self.taken[slot] = 1
        forwards = 2 * microbatches
        self.memory = _MemoryProfile(self.where[:forwards], self.where[forwards:], self.taken)

    def pull(self, k: int, ready: int, cap: int) -> None:
        """Move pass k to the first free slot in [ready, its slot) that keeps peak <= cap."""
        old = self.where[k]
        slot = self._first_fit(k < 2 * self.microbatches, ready, old, cap)
        if slot >= 0:
            self.taken[old] = 0
            self.taken[slot] = 1
            self.where[k] = slot

    def _first_fit(self, forward: bool, ready: int, old: int, cap: int) -> int:
        """Move the pass at ``old`` to the first free slot in [ready, old) that fits; -1 if none.

        Nearly every pass takes the first or second free slot, so those are tried one by
        one; past them, the rest of the window is judged at once.
        """
        slot = ready - 1
        for _ in range(_ONE_BY_ONE):
            slot = self.taken.find(0, slot + 1, old)
            if slot < 0 or self.memory.try_move(forward, slot, old, cap):
                return slot
        start = slot + 1
        window = np.frombuffer(self.taken, np.uint8, count=old - start, offset=start)
        free = np.flatnonzero(window == 0)
        if len(free) == 0:
            return -1
        fits = self.memory.fits_from(forward, start, old, cap)
        for slot in (free[fits[free]] + start).tolist():
            if self.memory.try_move(forward, slot, old, cap):
                return slot
        return -1

    def weights(self) -> tuple[np.ndarray, np.ndarray]:
        """Step 3: W slots, first free slot after their I, oldest I first.

        Returns the I passes in that order (flat ``chunk * m + microbatch``) and the slot of
        each one's W. The k-th W takes the first free slot at or after both its I's end and
        the slot after the (k-1)-th W: a running maximum over free-slot indices.
        """
        backward = np.array(self.where[2 * self.microbatches :], np.int64)  # rows I0, I1
        order = np.argsort(backward, kind="stable")
        free = np.flatnonzero(np.frombuffer(self.taken, np.uint8) == 0)
        first = np.searchsorted(free, backward[order] + 1)
        k = np.arange(len(order))
        return order, free[k + np.maximum.accumulate(first - k)]


# ---------------------------------------------------------------------------
# the memory check of step 2, one window at a time

_ALL = 1 << 40  # above any count: the minimum of nothing
_X, _Y, _HELD = range(3)  # rows of _MemoryProfile.rows


@lru_cache(maxsize=2)
def _move_steps(size: int) -> tuple[np.ndarray, np.ndarray]:
    """What moving an F (first) or an I (second) from slot s + n - 1 to s adds to
    ``rows[:, s : s + n]``: take ``[:, :n]``; an F's X gains one less at the far end."""
    forward = np.zeros((3, size), np.int64)
    forward[_X] = 2
    forward[_X, 0] = 1
    forward[_Y, 1:] = -1
    backward = np.zeros((3, size), np.int64)
    backward[_X, 1:] = 1
    backward[_Y, 1:] = -2
    forward.flags.writeable = backward.flags.writeable = False
    return forward, backward


class _MemoryProfile:
    """A device's activation count as running sums, so a move is checked in its window.

    The device holds ``M(t) = Fs(t) - Ws(t)`` activations at slot t: forwards started by t
    less weight passes finished before t. The W passes are served first come, first served,
    one per free slot (step 3), so, like any queue, ``Ws(t)`` is the least over ``u <= t``
    of ``A(u) + R(t) - R(u)``: every I done before u, plus at most one W per free slot of
    [u, t), where ``A(u)`` counts I passes and ``R(u)`` free slots before u. The peak is
    therefore the largest ``X(t) + held(t)``, with ``X = Fs - R``, ``Y = R - A`` and
    ``held(t)`` the largest ``Y(u)`` over ``u <= t``.

    Moving one pass from slot ``old`` to a free slot ``s < old`` changes X and Y only on
    [s, old]: an F raises X by 1 at s and old and by 2 between, and lowers Y by 1 on
    (s, old]; an I raises X by 1 and lowers Y by 2 on (s, old]. Y only falls, so past
    ``old`` nothing rises: with the peak within the cap before the move, it stays there
    after it exactly when ``X + held`` does over the window.

    ``rows`` holds X, Y and held for t = 0 .. L on a grid of L slots. Passes are visited in
    slot order, so each move's ``old`` lies beyond every earlier one's; held is kept exact
    up to slot ``known`` (the last ``old``) and brought forward when a check reads further.
    """

    def __init__(self, forward_slots: list[int], backward_slots: list[int], taken: bytearray):
        size = len(taken) + 1
        started = np.bincount(np.array(forward_slots, np.int64), minlength=size)
        backward = np.bincount(np.array(backward_slots, np.int64) + 1, minlength=size)
        free = np.zeros(size, np.int64)
        free[1:] = np.frombuffer(taken, np.uint8) == 0
        x = np.cumsum(started) - np.cumsum(free)
        y = np.cumsum(free) - np.cumsum(backward)
        self.rows = np.stack([x, y, np.maximum.accumulate(y)])
        self.known = size - 1
        self.steps = _move_steps(size)

    def peak(self) -> int:
        """Most activations held at any slot."""
        self.held_through(self.rows.shape[1] - 1)
        return int((self.rows[_X] + self.rows[_HELD]).max())

    def held_through(self, slot: int) -> int:
        """held(slot), after making held exact up to ``slot``."""
        if slot > self.known:
            ahead = self.rows[_HELD, self.known + 1 : slot + 1]
            np.maximum.accumulate(self.rows[_Y, self.known + 1 : slot + 1], out=ahead)
            np.maximum(ahead, self.rows[_HELD, self.known], out=ahead)
            self.known = slot
        return int(self.rows[_HELD, slot])

    def try_move(self, forward: bool, slot: int, old: int, cap: int) -> bool:
        """Move the pass at ``old`` to the earlier ``slot`` if the peak stays <= cap."""
        held = self.held_through(slot)
        step = self.steps[0 if forward else 1]
        window = self.rows[:, slot : old + 1] + step[:, : old - slot + 1]
        x, y, new_held = window
        if forward:
            x[-1] -= 1
        y[0] = held  # Y(slot) <= held(slot): the running maximum may start from held
        np.maximum.accumulate(y, out=new_held)
        if (x + new_held).max() > cap:
            return False
        y[0] = self.rows[_Y, slot]
        self.rows[:, slot : old + 1] = window
        self.known = old
        return True

    def fits_from(self, forward: bool, start: int, old: int, cap: int) -> np.ndarray:
        """For each s in [start, old): would moving the pass at ``old`` to s keep peak <= cap?

        ``room(t) = cap - X(t)`` is how far held may reach at t. A move gains 1 or 2 on
        pairs (u, t) with t in the window; those with u <= s gain most, so ``held(s)`` must
        leave room for that gain at every t of the window.
        """
        self.held_through(old - 1)
        room = cap - self.rows[_X, start : old + 1]
        y = self.rows[_Y, start : old + 1]
        held = self.rows[_HELD, start:old]
        if not forward:  # t in (s, old] gains 1 against every u <= s
            after = np.minimum.accumulate(room[:0:-1])[::-1]  # min room over (s, old]
            return held + 1 <= after
        # min room over (s, old), nothing for s = old - 1
        inside = np.append(np.minimum.accumulate(room[-2:0:-1])[::-1], _ALL)
        fits = (held + 1 <= room[:-1]) & (held + 1 <= room[-1]) & (held + 2 <= inside)
        # t in (s, old) also gains 1 against u in (s, t]: a u that some t >= u in the
        # window already holds at the cap rules out every s below it
        tight = np.flatnonzero(y[1:-1] + 1 > inside[:-1])
        if len(tight):
            fits[: tight[-1] + 1] = False
        return fits


# ---------------------------------------------------------------------------
# 2. squeeze


def _inputs(device: int, row: int, devices: int) -> tuple[tuple[int, int], ...]:
    """(device, row) of the passes a pass needs, same microbatch (V: down on chunk 0, up on 1)."""
    last = devices - 1
    if row == _F0:
        return () if device == 0 else ((device - 1, _F0),)
    if row == _F1:
        return ((device, _F0),) if device == last else ((device + 1, _F1),)
    if row == _I1:
        return ((device, _F1),) + (() if device == 0 else ((device - 1, _I1),))
    return ((device, _F0), (device, _I1) if device == last else (device + 1, _I0))


def _squeeze(grids: list[_DeviceGrid], microbatches: int) -> None:
    """Pull each pass into the earliest free slot after its inputs that keeps memory <= cap.

    Passes are visited in slot order (then device order), so a pass's inputs have already
    found their place. Large squeezes run ``squeeze_loop``'s compiled form, which takes the
    same decisions.
    """
    m, devices = microbatches, len(grids)
    cap = max(grid.memory.peak() for grid in grids)
    inputs = [[_inputs(d, row, devices) for row in range(len(_ROWS))] for d in range(devices)]
    wheres = [grid.where for grid in grids]
    passes = len(wheres[0])
    keys = np.array(wheres, np.int64) * devices + np.arange(devices)[:, None]  # slot, device
    order = np.argsort(keys.ravel())
    loop = compiled_squeeze(passes * devices)
    if loop is not None:
        _squeeze_compiled(loop, grids, order, inputs, cap, m)
        return
    for device, k in (divmod(visit, passes) for visit in order.tolist()):
        row, mb = divmod(k, m)
        ready = max([wheres[e][r * m + mb] + 1 for e, r in inputs[device][row]], default=0)
        if ready < wheres[device][k]:
            grids[device].pull(k, ready, cap)


def _squeeze_compiled(loop, grids: list[_DeviceGrid], order: np.ndarray, inputs, cap, m) -> None:
    """The squeeze by the compiled loop on the grids' arrays, written back into the grids."""
    table = np.full((len(grids), len(_ROWS), 2, 2), -1, np.int64)
    for device, rows in enumerate(inputs):
        for row, found in enumerate(rows):
            for j, pair in enumerate(found):
                table[device, row, j] = pair
    where = np.array([grid.where for grid in grids], np.int64)
    taken = np.array([np.frombuffer(grid.taken, np.uint8) for grid in grids])
    rows = np.array([grid.memory.rows for grid in grids])
    known = np.array([grid.memory.known for grid in grids], np.int64)
    loop(where, taken, rows, known, order.astype(np.int64), table, cap, m)
    for device, grid in enumerate(grids):
        grid.where = where[device].tolist()
        grid.taken[:] = taken[device].tobytes()
        grid.memory.rows, grid.memory.known = rows[device], int(known[device])


def _device_columns(
    grid: _DeviceGrid, device: int, devices: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The device's actions in slot order, W included (step 3), as columns ``(stage,
    kind, microbatch)`` (kind as ``ATOM_CODE``); no two share a slot (the W take free
    ones)."""
    m = grid.microbatches
    stage = np.array((device, 2 * devices - 1 - device), np.int64)
    order, weight_slots = grid.weights()
    passes = np.arange(len(grid.where))  # row * m + microbatch, rows F0, F1, I0, I1
    slots = np.concatenate([np.array(grid.where, np.int64), weight_slots])
    stages = np.concatenate([stage[passes // m % 2], stage[order // m]])
    kinds = np.concatenate([passes // (2 * m), np.full(len(order), 2)])  # F, I, W
    microbatches = np.concatenate([passes % m, order % m])
    at = np.argsort(slots, kind="stable")
    return stages[at], _KIND_CODES[kinds[at]], microbatches[at]
