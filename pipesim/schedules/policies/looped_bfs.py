"""Looped BFS (Lamy-Poirier 2023, "Breadth-First Pipeline Parallelism"; torch's
ScheduleLoopedBFS).

Loop placement as in interleaved 1F1B, but breadth first: each device runs the forward of
every microbatch on its first chunk, then on its next chunk, and so on; then the
backwards chunk by chunk in reverse, microbatches in reverse. Like GPipe it keeps every
activation until the flush.
"""

from __future__ import annotations

from pipesim.schedules.ir import Action, B, F, Schedule, loop_placement, single_chain
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "looped-bfs"


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    placement = loop_placement(devices, virtual_stages)
    device_actions = []
    for rank in range(devices):
        own = [s for s in range(len(placement)) if placement[s] == rank]
        forwards = [Action(s, F, i) for s in own for i in range(microbatches)]
        backwards = [Action(s, B, i) for s in reversed(own) for i in reversed(range(microbatches))]
        device_actions.append(tuple(forwards + backwards))
    return Schedule(
        tuple(device_actions), placement, single_chain(len(placement), microbatches), NAME
    )


POLICY = Policy(
    name=NAME,
    summary="breadth-first looping over virtual stages (torch ScheduleLoopedBFS)",
    constraints="any virtual_stages >= 1",
    chunks=ChunkRule.any(),
    build=build,
)
