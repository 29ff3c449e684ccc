"""Reference V-shape building-block generator: the original, straightforward algorithm.

A test-only oracle for pipesim.schedules.policies.building_blocks. It repeats the block, then
squeezes each pass into the earliest free slot after its inputs, re-checking the whole
device's peak memory (an O(m) pass over the grid) after every tried move, and an early
pass may try O(m) slots: slow, but plainly what the method says. The fast generator must
produce exactly the same per-device action order for every (p, m).
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


def reference_v_schedule(
    devices: int, microbatches: int, blocks: Sequence[BlockOffsets], name: str
) -> Schedule:
    """Repeat ``blocks[d]`` on each device d, squeeze, fill in the W (the reference way)."""
    grids = [_DeviceGrid(offsets, microbatches) for offsets in blocks]  # 1. repeat
    _squeeze(grids, microbatches)  # 2. squeeze
    device_actions = tuple(_device_order(grid, d, devices) for d, grid in enumerate(grids))
    return Schedule(
        device_actions, v_placement(devices), single_chain(2 * devices, microbatches), name
    )


# ---------------------------------------------------------------------------
# 1. repeat, and 3. fill in the W: one device's grid


class _DeviceGrid:
    """One device's F and I slots on the unit grid; W passes are implied (step 3).

    ``slots[kind][chunk, microbatch]`` is a pass's slot; ``taken`` marks occupied slots.
    The grid is long enough for every W to fit after the last F or I.
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

    def slot(self, p: _Pass) -> int:
        return int(self.slots[p.kind][p.chunk, p.microbatch])

    def move(self, p: _Pass, slot: int) -> None:
        self.taken[self.slot(p)] = False
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

    def peak(self) -> int:
        """Peak chunk activations held: taken when an F starts, released when its W ends."""
        _, weight_slots = self.weights()
        length = len(self.taken) + 2
        takes = np.bincount(self.slots[F].ravel(), minlength=length)
        releases = np.bincount(weight_slots + 1, minlength=length)  # before a take at equal times
        return int((np.cumsum(takes) - np.cumsum(releases)).max())


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
    cap = max(grid.peak() for grid in grids)
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
        old = grid.slot(p)
        inputs = _inputs(p, len(grids))
        ready = max((grids[q.device].slot(q) + 1 for q in inputs), default=0)
        for slot in range(ready, old):
            if grid.taken[slot]:
                continue
            grid.move(p, slot)
            if grid.peak() <= cap:
                break
            grid.move(p, old)


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
