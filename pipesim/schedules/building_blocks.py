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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from pipesim.schedules.ir import Action, F, I, Kind, Schedule, W, single_chain, v_placement

INTERVAL = 6  # units per repeated block: F0, F1, I1, I0 and two W
BlockOffsets = tuple[int, int, int, int]  # (F0, F1, I1, I0) start units of microbatch 0


class _Pass(NamedTuple):
    """One F or I pass of the unit-time grid: ``kind`` of ``chunk`` on ``device``."""

    device: int
    kind: Kind
    chunk: int
    microbatch: int


def build_v_schedule(
    devices: int, microbatches: int, blocks: Sequence[BlockOffsets], name: str
) -> Schedule:
    """Repeat ``blocks[d]`` on each device d, squeeze, fill in the W, return the Schedule."""
    grids = [_DeviceGrid(offsets, microbatches) for offsets in blocks]  # 1. repeat
    _squeeze(grids, microbatches)  # 2. squeeze
    device_actions = tuple(_device_order(grid, d, devices) for d, grid in enumerate(grids))
    return Schedule(
        device_actions, v_placement(devices), single_chain(2 * devices, microbatches), name
    )


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

    ``slots[kind][chunk, microbatch]`` is a pass's slot; ``taken`` marks occupied slots.
    The grid is long enough for every W to fit after the last F or I. ``memory`` follows
    the device's activation count as passes move.
    """

    def __init__(self, offsets: BlockOffsets, microbatches: int) -> None:
        f0, f1, i1, i0 = offsets
        shift = INTERVAL * np.arange(microbatches)
        self.slots = {
            F: np.stack([f0 + shift, f1 + shift]),
            I: np.stack([i0 + shift, i1 + shift]),
        }
        self.taken = np.zeros(max(offsets) + INTERVAL * microbatches + 2 * microbatches + 2, bool)
        for slots in self.slots.values():
            self.taken[slots.ravel()] = True
        self.memory = _MemoryProfile(self.slots[F].ravel(), self.slots[I].ravel(), self.taken)

    def slot(self, p: _Pass) -> int:
        return int(self.slots[p.kind][p.chunk, p.microbatch])

    def earliest_fit(self, p: _Pass, ready: int, cap: int) -> int:
        """The first free slot in [ready, p's slot) whose move keeps the peak <= cap, or -1."""
        old = self.slot(p)
        free = np.flatnonzero(~self.taken[ready:old])
        if len(free) == 0:
            return -1
        fits = self.memory.fits(p.kind == F, ready, old, cap)
        found = free[fits[free]]
        return int(found[0]) + ready if len(found) else -1

    def move(self, p: _Pass, slot: int) -> None:
        """Pull ``p`` from its slot to the free, earlier ``slot``."""
        old = self.slot(p)
        self.memory.move(p.kind == F, slot, old)
        self.taken[old] = False
        self.taken[slot] = True
        self.slots[p.kind][p.chunk, p.microbatch] = slot

    def weights(self) -> tuple[np.ndarray, np.ndarray]:
        """Step 3: W slots, first free slot after their I, oldest I first.

        Returns the I passes in that order (flat ``chunk * m + microbatch``) and the slot of
        each one's W. The k-th W takes the first free slot at or after both its I's end and
        the slot after the (k-1)-th W: a running maximum over free-slot indices.
        """
        backward = self.slots[I].ravel()
        order = np.argsort(backward, kind="stable")
        free = np.flatnonzero(~self.taken)
        first = np.searchsorted(free, backward[order] + 1)
        k = np.arange(len(order))
        return order, free[k + np.maximum.accumulate(first - k)]


# ---------------------------------------------------------------------------
# the memory check of step 2, one window at a time

_BLOCK = 64  # slots per block of the running maximum of Y
_NONE = -(1 << 40)  # below any count: the maximum of nothing
_ALL = 1 << 40  # above any count: the minimum of nothing


class _MemoryProfile:
    """A device's activation count as two running sums, so a move is checked in its window.

    The device holds ``M(t) = Fs(t) - Ws(t)`` activations at slot t: forwards started by t
    less weight passes finished before t. The W passes are served first come, first served,
    one per free slot (step 3), so, like any queue, ``Ws(t)`` is the least over ``u <= t``
    of ``A(u) + R(t) - R(u)``: every I done before u, plus at most one W per free slot of
    [u, t), where ``A(u)`` counts I passes and ``R(u)`` free slots before u. The peak is
    therefore ``max over u <= t of X(t) + Y(u)`` with ``X = Fs - R`` and ``Y = R - A``.

    Moving one pass from slot ``old`` to a free slot ``s < old`` changes X and Y only on
    [s, old]: an F raises X by 1 at s and old and by 2 between, and lowers Y by 1 on
    (s, old]; an I raises X by 1 and lowers Y by 2 on (s, old]. Since the peak is within the
    cap before the move, only pairs that gain can break it, and every such pair has its t in
    the window: the check reads the window and the largest Y before it (kept per block of
    ``_BLOCK`` slots), never the whole device.
    """

    def __init__(self, forward_slots: np.ndarray, backward_slots: np.ndarray, taken: np.ndarray):
        length = len(taken)
        size = -(-(length + 1) // _BLOCK) * _BLOCK  # t = 0 .. length, padded to whole blocks
        started = np.bincount(forward_slots, minlength=size)
        backward = np.bincount(backward_slots + 1, minlength=size)
        free = np.zeros(size, np.int64)
        free[1 : length + 1] = ~taken
        self.x = np.cumsum(started) - np.cumsum(free)
        self.y = np.cumsum(free) - np.cumsum(backward)
        self.y[length + 1 :] = _NONE
        self.block_max = self.y.reshape(-1, _BLOCK).max(axis=1)
        self.length = length

    def peak(self) -> int:
        """Most activations held at any slot: the largest X(t) + Y(u) with u <= t."""
        n = self.length + 1
        return int((self.x[:n] + np.maximum.accumulate(self.y[:n])).max())

    def max_y_before(self, slot: int) -> int:
        """The largest Y(u) over u < slot."""
        whole = slot // _BLOCK
        head = int(self.block_max[:whole].max()) if whole else _NONE
        tail = int(self.y[whole * _BLOCK : slot].max()) if slot > whole * _BLOCK else _NONE
        return max(head, tail)

    def fits(self, forward: bool, start: int, old: int, cap: int) -> np.ndarray:
        """For each s in [start, old): does moving the pass at ``old`` to s keep peak <= cap?

        ``room(t) = cap - X(t)`` is how far Y may reach before t; ``held(s)`` the largest
        Y(u) over u <= s, the pairs whose u stays left of the move.
        """
        room = cap - self.x[start : old + 1]
        y = self.y[start : old + 1]
        held = np.maximum(np.maximum.accumulate(y[:-1]), self.max_y_before(start))
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

    def move(self, forward: bool, slot: int, old: int) -> None:
        """Apply a pass's move from ``old`` to the earlier ``slot`` to X, Y and the blocks."""
        if forward:
            self.x[slot] += 1
            self.x[slot + 1 : old] += 2
            self.x[old] += 1
            self.y[slot + 1 : old + 1] -= 1
        else:
            self.x[slot + 1 : old + 1] += 1
            self.y[slot + 1 : old + 1] -= 2
        first, last = (slot + 1) // _BLOCK, old // _BLOCK + 1
        rows = self.y[first * _BLOCK : last * _BLOCK].reshape(-1, _BLOCK)
        self.block_max[first:last] = rows.max(axis=1)


def _inputs(p: _Pass, devices: int) -> list[_Pass]:
    """The passes whose results ``p`` needs (V placement: down on chunk 0, up on chunk 1)."""
    d, mb, last = p.device, p.microbatch, devices - 1
    if p.kind == F and p.chunk == 0:
        return [] if d == 0 else [_Pass(d - 1, F, 0, mb)]
    if p.kind == F:
        return [_Pass(d, F, 0, mb) if d == last else _Pass(d + 1, F, 1, mb)]
    own_forward = _Pass(d, F, p.chunk, mb)
    if p.chunk == 1:
        return [own_forward] + ([] if d == 0 else [_Pass(d - 1, I, 1, mb)])
    return [own_forward, _Pass(d, I, 1, mb) if d == last else _Pass(d + 1, I, 0, mb)]


# ---------------------------------------------------------------------------
# 2. squeeze


def _squeeze(grids: list[_DeviceGrid], microbatches: int) -> None:
    """Pull each pass into the earliest free slot after its inputs that keeps memory <= cap.

    Passes are visited in slot order, so a pass's inputs have already found their place.
    """
    cap = max(grid.memory.peak() for grid in grids)
    passes = [
        _Pass(d, kind, chunk, mb)
        for d in range(len(grids))
        for kind in (F, I)
        for chunk in (0, 1)
        for mb in range(microbatches)
    ]
    passes.sort(key=lambda p: (grids[p.device].slot(p), p.device))
    for p in passes:
        grid = grids[p.device]
        inputs = _inputs(p, len(grids))
        ready = max((grids[q.device].slot(q) + 1 for q in inputs), default=0)
        if ready >= grid.slot(p):
            continue
        slot = grid.earliest_fit(p, ready, cap)
        if slot >= 0:
            grid.move(p, slot)


def _device_order(grid: _DeviceGrid, device: int, devices: int) -> tuple[Action, ...]:
    """The device's actions in slot order, W included (step 3)."""
    m = grid.slots[F].shape[1]
    stage = (device, 2 * devices - 1 - device)
    timed = []
    for kind in (F, I):
        for (chunk, mb), slot in np.ndenumerate(grid.slots[kind]):
            timed.append((int(slot), Action(stage[chunk], kind, mb)))
    order, weight_slots = grid.weights()
    for flat, slot in zip(order, weight_slots, strict=True):
        chunk, mb = divmod(int(flat), m)
        timed.append((int(slot), Action(stage[chunk], W, mb)))
    return tuple(action for _, action in sorted(timed, key=lambda e: e[0]))
