"""DualPipeV: DualPipe cut in half, on a V-shaped placement (deepseek-ai/DualPipe).

Sea AI Lab's "cut-in-half" observation: the two directions of DualPipe mirror each other,
so keep only the first half of the devices and fold the model onto them in a V. With D
devices the model has 2D stages; device d holds stage d (chunk 0, on the way down) and
stage 2D-1-d (chunk 1, on the way back), every microbatch passes both, and each device
holds one copy of its layers instead of DualPipe's two.

Device d runs DualPipe's eight phases with ``P = D`` and ``h = d``, chunk 0 as the near
copy and chunk 1 as the far one (see ``dualpipe``): ``2 (D-d-1)`` chunk-0 forwards,
``d+1`` forward pairs, ``D-d-1`` rounds of (I, W, F) on chunk 1, ``m - 2D + d + 1``
rounds of the two overlapped pairs (F0 with B1, F1 with B0), then the drain. The last
device runs its first F0/B1 pair as two plain actions. Bubble ``(PP/2-1)(F&B + B - 3W)``
with PP = 2D stages, the same as DualPipe on 2D devices, on half the devices.
"""

from __future__ import annotations

from pipesim.schedules.ir import Schedule, require, single_chain, v_placement
from pipesim.schedules.policies.dualpipe import rank_actions
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "dualpipev"


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    d, m = devices, microbatches
    require(
        m >= 2 * d,
        f"dualpipev needs microbatches >= 2 * devices, got microbatches={m}, devices={d}",
    )
    first = dict.fromkeys(range(2 * d), 0)
    device_actions = tuple(rank_actions(r, 2 * d - 1 - r, d, r, m, first) for r in range(d))
    return Schedule(device_actions, v_placement(d), single_chain(2 * d, m), NAME)


POLICY = Policy(
    name=NAME,
    summary="DualPipeV: DualPipe cut in half on a V-shaped placement (two chunks per device)",
    constraints="virtual_stages = 2; microbatches >= 2 * devices",
    chunks=ChunkRule.exactly(2),
    build=build,
)
