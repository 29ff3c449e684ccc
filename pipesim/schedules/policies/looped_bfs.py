"""Looped BFS (Lamy-Poirier 2023, "Breadth-First Pipeline Parallelism"; torch's
ScheduleLoopedBFS).

Loop placement as in interleaved 1F1B, but breadth first: each device runs the forward of
every microbatch on its first chunk, then on its next chunk, and so on; then the
backwards chunk by chunk in reverse, microbatches in reverse. Like GPipe it keeps every
activation until the flush.
"""

from __future__ import annotations

import numpy as np

from pipesim.schedules.columns import ATOM_CODE, rank_lists
from pipesim.schedules.ir import B, F, Schedule, loop_placement, single_chain
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "looped-bfs"


def rank_columns(own: list[int], microbatches: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One device's columns ``(stage, kind, microbatch)`` (kind as ``ATOM_CODE``): the
    forwards of its stages ``own`` in order, each over every microbatch, then the
    backwards, stages and microbatches reversed."""
    m, count = microbatches, len(own) * microbatches
    stage = np.repeat(np.asarray(own, dtype=np.int64), m)
    microbatch = np.tile(np.arange(m), len(own))
    kind = np.repeat([ATOM_CODE[F], ATOM_CODE[B]], count)
    return (
        np.concatenate([stage, stage[::-1]]),
        kind,
        np.concatenate([microbatch, microbatch[::-1]]),
    )


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    placement = loop_placement(devices, virtual_stages)
    owns = [[s for s in range(len(placement)) if placement[s] == rank] for rank in range(devices)]
    lists = rank_lists([rank_columns(own, microbatches) for own in owns])
    return Schedule(lists, placement, single_chain(len(placement), microbatches), NAME)


POLICY = Policy(
    name=NAME,
    summary="breadth-first looping over virtual stages (torch ScheduleLoopedBFS)",
    constraints="any virtual_stages >= 1",
    chunks=ChunkRule.any(),
    build=build,
)
