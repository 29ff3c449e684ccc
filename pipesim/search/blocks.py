"""V candidates from building blocks: the controllable-memory construction, searched.

``pipesim.schedules.policies.building_blocks`` turns a building block into a schedule: per
device, the units at which microbatch 0's F0, F1, I1 and I0 run on a grid of unit passes,
repeated every 6 units for the next microbatch, then squeezed within the steady state's
memory, with the W passes filled into the free slots. V-Half and V-Min are two fixed
blocks. Qi et al. (2024, "Pipeline Parallelism with Controllable Memory", section 3.1 and
appendix A) search a family of blocks instead, and so does this module:

* device 0 runs its four passes in any order within one interval, F0 first;
* each next device runs the same block shifted: F0 and I1 (travelling down the pipeline)
  ``k`` units later, F1 and I0 (travelling up) one unit earlier, modulo the interval, with
  ``k`` from 1 to 5 and changing once along the pipeline, to a value no larger; a block
  whose passes collide modulo the interval on some device is left out;
* microbatch 0's passes then take, in the order its data flows (F0 down the devices, F1
  back up, I1 down, I0 up), the first unit at or after the one before that has the right
  residue: the block's absolute units.

A device holds an activation for every copy of the block whose life on it (forward to
weight pass) is still open, so the shifts set the memory: the family spans V-Min's
memory to 1F1B's and beyond. The search builds them nearest the limit first (by the
memory their lifespans suggest), runs each on the engine, and keeps those within the
limit as candidates like any other.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import permutations

from pipesim.schedules.ir import Schedule
from pipesim.schedules.policies.building_blocks import INTERVAL, BlockOffsets, build_v_schedule
from pipesim.search.greedy import Problem

Block = tuple[BlockOffsets, ...]  # one (F0, F1, I1, I0) per device
# travelling down the pipeline (F0, I1) the block moves k units per device, up (F1, I0) -1
_DOWN = (True, False, True, False)


def block_family(devices: int) -> list[Block]:
    """Every block of the family (module docstring) on ``devices`` devices, each once."""
    found: dict[Block, None] = {}
    for f1, i1, i0 in permutations(range(1, INTERVAL), 3):
        for first_shift in range(1, INTERVAL):
            for then_shift in range(1, first_shift + 1):
                for turn in range(1, devices):
                    residues = _residues(devices, (0, f1, i1, i0), first_shift, then_shift, turn)
                    if residues is not None:
                        found.setdefault(_absolute(residues), None)
    return list(found)


def _residues(devices, first, first_shift, then_shift, turn) -> list[tuple[int, ...]] | None:
    """Each device's four residues modulo the interval; None where two collide."""
    rows = [first]
    for device in range(1, devices):
        shift = first_shift if device <= turn else then_shift
        row = tuple(
            (r + (shift if down else -1)) % INTERVAL
            for r, down in zip(rows[-1], _DOWN, strict=True)
        )
        if len(set(row)) < 4:
            return None
        rows.append(row)
    return rows


def _absolute(residues: list[tuple[int, ...]]) -> Block:
    """Microbatch 0's units: each pass the first with its residue after the one before it
    in the order the data flows (F0 down, F1 up, I1 down, I0 up)."""
    devices = len(residues)
    units = [[0] * 4 for _ in range(devices)]
    last = -1
    for column, down in enumerate(_DOWN):
        for device in range(devices) if down else reversed(range(devices)):
            unit = last + 1 + (residues[device][column] - last - 1) % INTERVAL
            units[device][column] = last = unit
    return tuple(tuple(row) for row in units)


def held_estimate_bytes(block: Block, problem: Problem) -> float:
    """The most activation bytes a device of the block holds in steady state, as its
    lifespans suggest: a chunk's activation from its forward to its input backward, one
    copy for every interval of that life (at most m)."""
    stages, m = problem.stages, problem.microbatches
    most = 0.0
    for device, (f0, f1, i1, i0) in enumerate(block):
        chunk0, chunk1 = device, stages - 1 - device
        copies0 = min(m, math.ceil((i0 - f0 + 1) / INTERVAL))
        copies1 = min(m, math.ceil((i1 - f1 + 1) / INTERVAL))
        held = copies0 * problem.taken_bytes[chunk0] + copies1 * problem.taken_bytes[chunk1]
        most = max(most, held)
    return most


def nearest_the_limit(problem: Problem) -> list[Block]:
    """The family, blocks whose estimate fits the limit first, the most memory first (the
    least bubble), then the others from the least over."""
    limit = problem.limit_bytes
    keyed = [(held_estimate_bytes(b, problem), b) for b in block_family(problem.devices)]
    fitting = sorted((k for k in keyed if k[0] <= limit), key=lambda k: -k[0])
    over = sorted((k for k in keyed if k[0] > limit), key=lambda k: k[0])
    return [block for _, block in fitting + over]


def block_schedules(problem: Problem, most: int, name: str) -> Iterator[Schedule]:
    """Up to ``most`` schedules built from the family's blocks, nearest the limit first."""
    for block in nearest_the_limit(problem)[:most]:
        yield build_v_schedule(problem.devices, problem.microbatches, block, name)


__all__ = ["Block", "block_family", "block_schedules", "held_estimate_bytes", "nearest_the_limit"]
