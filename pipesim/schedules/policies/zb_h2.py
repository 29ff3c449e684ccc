"""ZB-H2 (Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024, section 2.2).

ZB-H1's split backward with a longer warm-up: enough extra forwards to fill the wait before
each device's first ``I``, and the W passes pushed to the tail, so that with equal F, I and
W times every device works without a gap from its first action to its last (the paper's
figure 3, bottom: the trapezoid of 1F1B becomes a parallelogram).

Rank r (0-based) of p runs, in the figure's order:

* warm-up: ``2(p - r) - 1`` forwards (device 1 of the figure runs F1..F7, device 4 F1);
* steady state: ``I``, then the ``W`` of the oldest microbatch once more than ``2r`` are
  owed, then the next ``F``;
* cool-down: the same without the ``F``;
* flush: the ``2r`` W's still owed (device 4 of the figure ends B8 W2 W3 ... W8).

With m >= 2p - 1 and ``T_W`` no larger than ``T_F`` and ``T_I``, the bubble is
``(p-1)(T_F + T_I - 2 T_W)`` (table 2), zero when the three are equal. By the paper's
convention it is measured on a device's own span: device r starts r forwards late, so the
step as a whole takes longer than any one device's span (27 against 24 with p = 4, m = 8
and unit times). The price is activation memory: rank r holds up to
``2(p-r) - 1`` activations awaiting their ``I`` and ``2r`` awaiting their ``W``, a peak of
``(2p-2r-1) M_B + 2r M_W``, about twice 1F1B's ``p M_B``.

Fewer than 2p - 1 microbatches cannot fill the longer warm-up: rank r would still hold its
W's back by 2r, past the last I, and the step would end later than ZB-H1's (with unit
times, p = 4 and m = 5: 19 against 18). Since the order cannot see the costs, it then runs
ZB-H1's order exactly (warm-up ``p - r``, W delay ``r``), which is never slower than ZB-H1
and holds less memory.
"""

from __future__ import annotations

import numpy as np

from pipesim.schedules.columns import rank_lists
from pipesim.schedules.ir import Action, Schedule, single_chain
from pipesim.schedules.policies.registry import ChunkRule, Policy
from pipesim.schedules.policies.zb_h1 import rank_actions as zb_h1_rank_actions
from pipesim.schedules.policies.zb_h1 import rank_columns as zb_h1_rank_columns
from pipesim.schedules.policies.zb_h1 import (
    split_backward_rank_actions,
    split_backward_rank_columns,
)

NAME = "zb-h2"


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    p = devices
    lists = rank_lists([rank_columns(r, p, microbatches) for r in range(p)])
    return Schedule(lists, tuple(range(p)), single_chain(p, microbatches), NAME)


def rank_actions(rank: int, devices: int, microbatches: int) -> tuple[Action, ...]:
    """Rank ``rank``'s order: ZB-H2's with m >= 2p - 1, ZB-H1's below (see the docstring)."""
    p, r = devices, rank
    if microbatches < 2 * p - 1:  # too few to fill the warm-up: ZB-H1's order
        return zb_h1_rank_actions(r, p, microbatches)
    return split_backward_rank_actions(r, microbatches, warmup=2 * (p - r) - 1, weight_delay=2 * r)


def rank_columns(rank: int, devices: int, microbatches: int) -> tuple[np.ndarray, ...]:
    """``rank_actions`` as columns ``(stage, kind, microbatch)``."""
    p, r = devices, rank
    if microbatches < 2 * p - 1:
        return zb_h1_rank_columns(r, p, microbatches)
    return split_backward_rank_columns(r, microbatches, warmup=2 * (p - r) - 1, weight_delay=2 * r)


POLICY = Policy(
    name=NAME,
    summary="Zero Bubble ZB-H2: split backward, longer warm-up; zero bubble at 2x 1F1B's memory",
    constraints="virtual_stages = 1",
    chunks=ChunkRule.exactly(1),
    build=build,
)
