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
