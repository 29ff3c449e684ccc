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
   as long as the device's activation memory stays within the steady state's peak;
3. fill: every W takes the first free slot after its I, oldest first, and memory is
   counted until that W ends (the weight gradient still needs the activation).

The per-device order of the result is the schedule; the engine then runs it as fast as
the real costs allow.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from pipesim.schedules.ir import Action, F, I, Kind, Schedule, W, single_chain, v_placement

INTERVAL = 6  # units per repeated block: F0, F1, I1, I0 and two W
BlockOffsets = tuple[int, int, int, int]  # (F0, F1, I1, I0) start units of microbatch 0


class _Pass(NamedTuple):
    """One pass of the unit-time grid: ``kind`` (F, I or W) of ``chunk`` on ``device``."""

    device: int
    kind: Kind
    chunk: int
    microbatch: int


def build_v_schedule(
    devices: int, microbatches: int, blocks: Sequence[BlockOffsets], name: str
) -> Schedule:
    """Repeat ``blocks[d]`` on each device d, squeeze, fill in the W, return the Schedule."""
    grid = _repeat(blocks, microbatches)
    cap = max(_peak(_device_grid(grid, d)) for d in range(devices))
    grid = _squeeze(grid, devices, cap)
    device_actions = tuple(_device_order(grid, d, devices) for d in range(devices))
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
# 1. repeat


def _repeat(blocks: Sequence[BlockOffsets], microbatches: int) -> dict[_Pass, int]:
    grid = {}
    for device, (f0, f1, i1, i0) in enumerate(blocks):
        for mb in range(microbatches):
            shift = INTERVAL * mb
            grid[_Pass(device, F, 0, mb)] = f0 + shift
            grid[_Pass(device, F, 1, mb)] = f1 + shift
            grid[_Pass(device, I, 1, mb)] = i1 + shift
            grid[_Pass(device, I, 0, mb)] = i0 + shift
    return grid


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


def _squeeze(grid: dict[_Pass, int], devices: int, cap: int) -> dict[_Pass, int]:
    """Pull each pass into the earliest free slot after its inputs that keeps memory <= cap."""
    per_device = [_device_grid(grid, d) for d in range(devices)]
    squeezed = dict(grid)
    for p in sorted(grid, key=lambda q: (grid[q], q.device)):
        own = per_device[p.device]
        old = own[p]
        ready = max((squeezed[q] + 1 for q in _inputs(p, devices)), default=0)
        taken = set(own.values())
        for slot in range(ready, old):
            if slot in taken:
                continue
            own[p] = slot
            if _peak(own) <= cap:
                squeezed[p] = slot
                break
            own[p] = old
    return squeezed


def _device_grid(grid: dict[_Pass, int], device: int) -> dict[_Pass, int]:
    return {p: t for p, t in grid.items() if p.device == device}


# ---------------------------------------------------------------------------
# 3. fill in the W passes, and count memory


def _fill_weights(own: dict[_Pass, int]) -> dict[_Pass, int]:
    """Each W in the first free slot after its I, oldest I first."""
    taken = set(own.values())
    inputs = deque(sorted((t, p) for p, t in own.items() if p.kind == I))
    pending: deque[_Pass] = deque()
    weights = {}
    slot = 0
    while inputs or pending:
        while inputs and inputs[0][0] < slot:
            p = inputs.popleft()[1]
            pending.append(p._replace(kind=W))
        if slot not in taken and pending:
            weights[pending.popleft()] = slot
        slot += 1
    return weights


def _peak(own: dict[_Pass, int]) -> int:
    """Peak chunk activations held: taken when an F starts, released when its W ends."""
    changes = [(t, 1) for p, t in own.items() if p.kind == F]
    changes += [(t + 1, -1) for t in _fill_weights(own).values()]
    return _running_max(sorted(changes))


def _running_max(changes: Iterable[tuple[int, int]]) -> int:
    held = peak = 0
    for _, delta in changes:  # at equal times a release (-1) sorts before a take
        held += delta
        peak = max(peak, held)
    return peak


def _device_order(grid: dict[_Pass, int], device: int, devices: int) -> tuple[Action, ...]:
    own = _device_grid(grid, device)
    own.update(_fill_weights(own))
    stage = (device, 2 * devices - 1 - device)
    return tuple(
        Action(stage[p.chunk], p.kind, p.microbatch)
        for p, _ in sorted(own.items(), key=lambda e: e[1])
    )
