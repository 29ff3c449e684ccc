"""V-Min (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory", section 4).

The V-shape building block with the shortest lifespan: a microbatch turns at the bottom of
the V and starts its backward almost at once. On device d of D (figure 4, unit passes,
chunk 0 = stage d, chunk 1 = stage 2D-1-d):

* F0 at ``d``: the forward walks down the V one device per unit;
* F1 at ``2D-1-d``: and back up;
* I1 at ``2D+g+d``: the backward walks down again, right behind the forward;
* I0 at ``4D+g-1-d``: and back up to device 0;

with ``g = 2`` when D is a multiple of 3 (else 0), so that no two passes of the block
collide modulo the 6-unit interval. The lifespans of the two chunks on any device add up
to about 4D units, a third of 1F1B's 12D (in units of a chunk pass): V-Min holds
``(D+4)//3`` microbatches' worth of a 1F1B stage's activations against 1F1B's D (the
paper's table, for F = I = W). The price is a bubble of about two thirds of 1F1B's, and
a throughput that drops when F, I and W differ, since the block leaves no slack.
"""

from __future__ import annotations

from pipesim.schedules.ir import Schedule
from pipesim.schedules.policies.building_blocks import build_v_schedule
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "v-min"


def blocks(devices: int) -> list[tuple[int, int, int, int]]:
    """(F0, F1, I1, I0) start units of microbatch 0 on each device."""
    d_, g = devices, (2 if devices % 3 == 0 else 0)
    return [(d, 2 * d_ - 1 - d, 2 * d_ + g + d, 4 * d_ + g - 1 - d) for d in range(d_)]


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    return build_v_schedule(devices, microbatches, blocks(devices), NAME)


POLICY = Policy(
    name=NAME,
    summary="V-Min: V-shape building block with 1/3 of 1F1B's activation memory",
    constraints="virtual_stages = 2",
    chunks=ChunkRule.exactly(2),
    build=build,
)
