"""V-Half (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory", section 4).

The V-shape building block that halves 1F1B's activation memory and keeps its
throughput. Forwards are spaced two units apart on the way down, so a microbatch spends
longer in flight than in V-Min and the bubble shrinks. On device d of D (figure 4, unit
passes, chunk 0 = stage d, chunk 1 = stage 2D-1-d):

* F0 at ``2d``: down the V, every other unit;
* F1 at ``3D-2-d``: back up, one device per unit;
* I1 at ``3D+g+2d-1``: the backward down again, every other unit;
* I0 at ``6D+g-d-2``: and back up;

with ``g = 3`` when D is even (else 0), so that no two passes of the block collide modulo
the 6-unit interval. The chunk lifespans on a device add up to about 6D units, half of
1F1B's 12D: V-Half holds ``(D+2)//2`` microbatches' worth of a 1F1B stage's activations
against 1F1B's D (the paper's table, for F = I = W), with a bubble about half of 1F1B's.
"""

from __future__ import annotations

from pipesim.schedules.ir import Schedule
from pipesim.schedules.policies.building_blocks import build_v_schedule
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "v-half"


def blocks(devices: int) -> list[tuple[int, int, int, int]]:
    """(F0, F1, I1, I0) start units of microbatch 0 on each device."""
    d_, g = devices, (3 if devices % 2 == 0 else 0)
    return [(2 * d, 3 * d_ - 2 - d, 3 * d_ + g + 2 * d - 1, 6 * d_ + g - d - 2) for d in range(d_)]


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    return build_v_schedule(devices, microbatches, blocks(devices), NAME)


POLICY = Policy(
    name=NAME,
    summary="V-Half: V-shape building block with 1/2 of 1F1B's activation memory",
    constraints="virtual_stages = 2",
    chunks=ChunkRule.exactly(2),
    build=build,
)
