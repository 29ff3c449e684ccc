"""DualPipe (DeepSeek-V3 technical report, 2024; deepseek-ai/DualPipe).

Two copies of the model run in opposite directions at once. Device d holds stage d of the
forward-direction copy and stage D-1-d of the reverse-direction copy; half of the
microbatches enter at device 0 and walk down, the other half enter at device D-1 and
walk up. In the IR these are two chains: chain 0 is stages 0..D-1 (stage s on device s,
microbatches 0..m/2-1) and chain 1 is stages D..2D-1 (stage D+k on device D-1-k,
microbatches m/2..m-1).

Each device sees the two directions as a *near* copy (the one whose input reaches it
first: the forward copy on the first half of the devices, the reverse copy on the second
half) and a *far* copy. DualPipe's ``step()`` names them phase 0 and phase 1 and runs
eight phases; with ``P = D/2`` devices per half and ``h = min(d, D-1-d)`` the device's
distance from its end of the pipeline:

1. ``nF0``: ``2 (P-h-1)`` forwards of the near copy;
2. ``nF0F1``: ``h+1`` times a near forward then a far forward;
3. ``nB1W1F1``: ``P-h-1`` times a far input-gradient backward, a weight-gradient
   backward, a far forward (zero-bubble style split backward);
4. ``nF0B1F1B0`` (main step): ``m/2 - D + h + 1`` times the overlapped pair
   (near forward, far backward) then the pair (far forward, near backward). The two
   middle devices run their first pair as two plain actions, which shortens the bubble;
5. ``nB1F1B0``: ``P-h-1`` times a far backward then the pair (far forward, near backward);
6. ``nB1B0``: ``h+1`` times a far then a near backward; from the middle of the loop on,
   backwards are split (I now, W later);
7. ``nWB0``: ``P-h-1`` times a pending W then a near I;
8. ``nW``: the ``h+1`` W still pending.

Pending weight-gradient work is done first in, first out. Bubble per device
``(PP/2-1)(F&B + B - 3W)`` where F&B is an overlapped pair (report table 2), half of
1F1B's, for twice the parameters per device. DualPipeV (``dualpipev``) runs the same
program on one V-shaped copy.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from pipesim.schedules.columns import make_action
from pipesim.schedules.ir import (
    OVERLAP_F_B,
    Action,
    B,
    Chain,
    F,
    I,
    Kind,
    Schedule,
    W,
    require,
)
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "dualpipe"


@dataclass
class _Program:
    """One device's action list under construction, with per-stage microbatch counters.

    Forwards and backwards of a stage take microbatches in order; a split backward leaves
    its W in a first-in first-out queue for a later ``weight()``.
    """

    first_microbatch: dict[int, int]
    actions: list[Action] = field(default_factory=list)
    _next: dict[tuple[int, Kind], int] = field(default_factory=dict)
    _pending_w: deque[Action] = field(default_factory=deque)

    def _take(self, stage: int, direction: Kind) -> int:
        """The next microbatch of ``stage`` in this direction (F, or B for any backward)."""
        count = self._next.get((stage, direction), 0)
        self._next[(stage, direction)] = count + 1
        return self.first_microbatch[stage] + count

    # Actions are made as tuples (``make_action``): a long schedule makes millions
    def forward(self, stage: int) -> None:
        self.actions.append(make_action((stage, F, self._take(stage, F), None)))

    def backward(self, stage: int, split: bool = False) -> None:
        microbatch = self._take(stage, B)
        if split:
            self._pending_w.append(make_action((stage, W, microbatch, None)))
        self.actions.append(make_action((stage, I if split else B, microbatch, None)))

    def weight(self) -> None:
        self.actions.append(self._pending_w.popleft())

    def pair(self, forward_stage: int, backward_stage: int) -> None:
        """An overlapped forward-and-backward pair (one compound action, as ``overlapped``
        makes it)."""
        fwd = make_action((forward_stage, F, self._take(forward_stage, F), None))
        bwd = make_action((backward_stage, B, self._take(backward_stage, B), None))
        self.actions.append(make_action((-1, OVERLAP_F_B, -1, (fwd, bwd))))


def rank_actions(
    near: int,
    far: int,
    half_devices: int,
    half_rank: int,
    microbatches: int,
    first_microbatch: dict[int, int],
) -> tuple[Action, ...]:
    """DualPipe's eight phases for one device holding stages ``near`` and ``far``.

    ``half_devices`` is P (D/2 for DualPipe, D for DualPipeV), ``half_rank`` the device's
    distance h from its end, ``microbatches`` the count each stage sees.
    """
    p, h, n = half_devices, half_rank, microbatches
    prog = _Program(first_microbatch)
    # Step 1: nF0
    for _ in range(2 * (p - h - 1)):
        prog.forward(near)
    # Step 2: nF0F1
    for _ in range(h + 1):
        prog.forward(near)
        prog.forward(far)
    # Step 3: nB1W1F1 (zero bubble: split backward, its W right away)
    for _ in range(p - h - 1):
        prog.backward(far, split=True)
        prog.weight()
        prog.forward(far)
    # Step 4 (main step): nF0B1F1B0, m/2 - D + h + 1 rounds (n - 2P + h + 1)
    for i in range(n - 2 * p + h + 1):
        if i == 0 and h == p - 1:  # middle devices: not overlapped, to shrink the bubble
            prog.forward(near)
            prog.backward(far)
        else:
            prog.pair(near, far)
        prog.pair(far, near)
    # Step 5: nB1F1B0
    for _ in range(p - h - 1):
        prog.backward(far)
        prog.pair(far, near)
    # Step 6: nB1B0, split backward from the middle of the loop on
    split = False
    for i in range(h + 1):
        split = split or (i == (h + 1) // 2 and h % 2 == 1)
        prog.backward(far, split)
        split = split or (i == (h + 1) // 2 and h % 2 == 0)
        prog.backward(near, split)
    # Step 7: nWB0
    for _ in range(p - h - 1):
        prog.weight()
        prog.backward(near, split=True)
    # Step 8: nW
    for _ in range(h + 1):
        prog.weight()
    return tuple(prog.actions)


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    d, m = devices, microbatches
    require(d % 2 == 0, f"dualpipe needs an even number of devices, got devices={d}")
    require(
        m % 2 == 0 and m >= 2 * d,
        f"dualpipe needs microbatches even and >= 2 * devices, got microbatches={m}, devices={d}",
    )
    half = m // 2
    chains = (Chain(0, d - 1, range(half)), Chain(d, 2 * d - 1, range(half, m)))
    first = {s: (0 if s < d else half) for s in range(2 * d)}
    placement = tuple(range(d)) + tuple(d - 1 - k for k in range(d))
    device_actions = []
    for rank in range(d):
        forward_copy, reverse_copy = rank, 2 * d - 1 - rank
        near, far = (forward_copy, reverse_copy) if rank < d // 2 else (reverse_copy, forward_copy)
        device_actions.append(rank_actions(near, far, d // 2, min(rank, d - 1 - rank), half, first))
    return Schedule(tuple(device_actions), placement, chains, NAME)


POLICY = Policy(
    name=NAME,
    summary="DeepSeek-V3 DualPipe: two model copies in opposite directions, overlapped F&B pairs",
    constraints="devices even; microbatches even and >= 2 * devices; virtual_stages = 1",
    chunks=ChunkRule.exactly(1),
    build=build,
)
