"""ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 6).

The model is cut into 2D stages folded onto the D devices in a V: device d holds stage d
(chunk 0, on the way down) and stage 2D-1-d (chunk 1, on the way back up), so the first
and the last stage share device 0. The backward is split: ``I`` computes the input
gradient (the critical path), ``W`` the weight gradient (free to wait), and the W's fill
what would otherwise be bubbles.

Device d runs, with F0/F1 a chunk-0/chunk-1 forward (the paper's figure 8, and torch's
``ScheduleZBVZeroBubble``):

* warm-up: ``2(D-d) - 1`` F0; then ``d`` times F1 F0; then ``D-d`` times F1 I1 W1
  (chunk 1's first backwards start as soon as the microbatch turns at the bottom of the V);
* steady state: F0 I0 W0 F1 I1 W1, until every forward is issued (the F0 is left out
  once all m have run);
* cool-down: ``d`` times I0 I1; ``D-d`` times I0 W0; then the W still owed, chunk 1's first.

With equal F, I and W times and no communication each device works without a gap from
its first action to its last (bubble rate 0 in the paper's span sense), and device d holds
at most 2D chunk activations, D microbatches of a 1F1B stage: the same peak as 1F1B.
Fewer than 2D-1 microbatches are scheduled as if there were 2D-1, with the missing ones
left out.
"""

from __future__ import annotations

from pipesim.schedules.ir import Action, F, I, Kind, Schedule, W, single_chain, v_placement
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "zbv"


class _Counters:
    """The next microbatch for each (stage, kind); each call hands out one action."""

    def __init__(self) -> None:
        self.count: dict[tuple[int, Kind], int] = {}

    def next(self, stage: int, kind: Kind) -> Action:
        index = self.count.get((stage, kind), 0)
        self.count[(stage, kind)] = index + 1
        return Action(stage, kind, index)

    def issued(self, stage: int, kind: Kind) -> int:
        return self.count.get((stage, kind), 0)


def rank_actions(rank: int, devices: int, microbatches: int) -> tuple[Action, ...]:
    d, p = rank, devices
    chunk0, chunk1 = d, 2 * p - 1 - d
    n = max(microbatches, 2 * p - 1)  # pad to fill the V, then drop the padding below
    c = _Counters()
    actions: list[Action] = []
    # Warm-up: 2(D-d)-1 F0, then d x (F1 F0), then (D-d) x (F1 I1 W1)
    actions += [c.next(chunk0, F) for _ in range(2 * (p - d) - 1)]
    for _ in range(d):
        actions += [c.next(chunk1, F), c.next(chunk0, F)]
    for _ in range(p - d):
        actions += [c.next(chunk1, F), c.next(chunk1, I), c.next(chunk1, W)]
    # Steady state: F0 I0 W0 F1 I1 W1 until chunk 1 has caught up with chunk 0's forwards
    while c.issued(chunk1, F) < c.issued(chunk0, F) or c.issued(chunk0, F) < n:
        if c.issued(chunk0, F) < n:
            actions.append(c.next(chunk0, F))
        actions += [c.next(chunk0, I), c.next(chunk0, W)]
        actions += [c.next(chunk1, F), c.next(chunk1, I), c.next(chunk1, W)]
    # Cool-down: d x (I0 I1), (D-d) x (I0 W0), then the W still owed
    for _ in range(d):
        actions += [c.next(chunk0, I), c.next(chunk1, I)]
    for _ in range(p - d):
        actions += [c.next(chunk0, I), c.next(chunk0, W)]
    for stage in (chunk1, chunk0):
        actions += [c.next(stage, W) for _ in range(c.issued(stage, I) - c.issued(stage, W))]
    return tuple(a for a in actions if a.microbatch < microbatches)


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    device_actions = tuple(rank_actions(r, devices, microbatches) for r in range(devices))
    return Schedule(
        device_actions, v_placement(devices), single_chain(2 * devices, microbatches), NAME
    )


POLICY = Policy(
    name=NAME,
    summary="Zero Bubble ZB-V: V placement, split backward, zero bubble at 1F1B's memory",
    constraints="virtual_stages = 2",
    chunks=ChunkRule.exactly(2),
    build=build,
)
