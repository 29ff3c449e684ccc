"""1F1B with expert-parallel all-to-all overlap: Megatron-Core's combined 1F1B.

Megatron-Core's ``--overlap-moe-expert-parallel-comm`` merges, in the steady state, each
forward of one microbatch with the backward of another into one unit, run on two streams,
so that each one's dispatch and combine all-to-alls hide under the other's compute
(``pipesim.sim.sublayers`` times the unit). A merged unit cannot start before both its
forward's activation and its backward's gradient are there, so the ranks warm up further
apart than in 1F1B: the unit of rank r that sends a gradient to rank r - 1 must not wait
for a forward rank r - 1 runs in the same round. With adjacent ranks two forwards apart,
as Megatron-Core's interleaved warm-up has them (``2 (p - r - 1)``), plus the one forward
its combined schedule adds, every rank runs one unit per round in the steady state:

* warm-up: ``min(2 (p - r - 1) + 1, m)`` forwards on rank r (the last rank runs one, as
  Megatron-Core's combined schedule without a pipeline does);
* steady state: ``m - warmup`` units ``(F(warmup + k); B(k))``, each an ``OVERLAP_F_B``;
* cool-down: the ``warmup`` backwards still owed, alone.

With ``delay_wgrad`` (``--delay-wgrad-compute``) each unit's backward is split: the unit
runs ``F``, ``I`` and that ``I``'s ``W``, whose weight-gradient compute is issued after
the forward's parts so that it covers the backward's all-to-alls. Rank r holds up to
``2 (p - r)`` microbatches' activations (its warm-up and a unit's forward), one more than
eager 1F1B. Without sub-layer parts (a dense
model) a unit takes ``F + B``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipesim.schedules.columns import ATOM_CODE
from pipesim.schedules.ir import Action, I, Kind, Schedule, W, group, overlapped, single_chain
from pipesim.schedules.policies.one_f_one_b import rank_columns
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "1f1b-a2a-overlap"
_KIND_OF_CODE = {code: kind for kind, code in ATOM_CODE.items()}


def combined_units(
    columns: tuple[np.ndarray, np.ndarray, np.ndarray], warmup: int, delay_wgrad: bool
) -> tuple[Action, ...]:
    """A 1F1B-shaped list (``warmup`` forwards, then forward/backward steps in turn, then
    backwards) with each steady-state forward merged with the backward after it."""
    stage, kind, microbatch = (np.asarray(c).tolist() for c in columns)
    plain = [
        Action(s, _KIND_OF_CODE[k], i) for s, k, i in zip(stage, kind, microbatch, strict=True)
    ]
    steady = (len(plain) - 2 * warmup) // 2
    units: list[Action] = list(plain[:warmup])
    for k in range(steady):
        units.append(_unit(plain[warmup + 2 * k], plain[warmup + 2 * k + 1], delay_wgrad))
    return (*units, *plain[warmup + 2 * steady :])


def _unit(forward: Action, backward: Action, delay_wgrad: bool) -> Action:
    if not delay_wgrad:
        return overlapped(forward, backward)
    stage, microbatch = backward.stage, backward.microbatch
    return group(forward, Action(stage, I, microbatch), Action(stage, W, microbatch))


def build(
    devices: int, microbatches: int, virtual_stages: int, *, delay_wgrad: bool = False
) -> Schedule:
    p, m = devices, microbatches
    lists = []
    for rank in range(p):
        warmup = min(2 * (p - rank - 1) + 1, m)
        lists.append(combined_units(rank_columns(rank, p, m, warmup=warmup), warmup, delay_wgrad))
    return Schedule(tuple(lists), tuple(range(p)), single_chain(p, m), NAME)


def unit_kinds(actions: Sequence[Action]) -> list[tuple[Kind, ...]]:
    """The kinds inside each merged unit of a list (for tests and pictures)."""
    return [tuple(a.kind for a in action.atoms) for action in actions if action.sub_actions]


POLICY = Policy(
    name=NAME,
    summary="1F1B with MoE all-to-all overlap (Megatron-Core combined 1F1B; option delay_wgrad)",
    constraints="virtual_stages = 1",
    chunks=ChunkRule.exactly(1),
    build=build,
)
