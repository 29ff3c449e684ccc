"""Interleaved 1F1B with expert-parallel all-to-all overlap (Megatron-Core's combined 1F1B
on virtual pipeline stages, ``--overlap-moe-expert-parallel-comm``).

The interleaved order of ``interleaved-1f1b`` (torch's and Megatron-LM's steps, chunks in
rounds) with one warm-up step more on every rank, ``min((v - 1) n + 2 (p - r - 1) + 1,
m v)`` (Megatron-Core adds one when the overlap is on), and each steady-state forward step
merged with the backward step after it into one ``OVERLAP_F_B`` unit, whose all-to-alls
overlap the other's compute (``pipesim.sim.sublayers``); ``delay_wgrad`` splits each
unit's backward into ``I`` and a delayed ``W`` (see ``one_f_one_b_a2a``). Same rounds as
interleaved 1F1B: microbatches a multiple of ``max(1, m // p)``.
"""

from __future__ import annotations

from pipesim.schedules.ir import ConstraintError, Schedule, loop_placement, single_chain
from pipesim.schedules.policies import interleaved
from pipesim.schedules.policies.one_f_one_b_a2a import combined_units
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "interleaved-1f1b-a2a-overlap"


def warmup_steps(rank: int, devices: int, microbatches: int, chunks: int) -> int:
    """Forward steps before the first unit: torch's interleaved warm-up, plus one."""
    per_round = interleaved.microbatches_per_round(devices, microbatches)
    warmup = (chunks - 1) * per_round + 2 * (devices - rank - 1) + 1
    return min(warmup, microbatches * chunks)


def build(
    devices: int, microbatches: int, virtual_stages: int, *, delay_wgrad: bool = False
) -> Schedule:
    p, m, v = devices, microbatches, virtual_stages
    try:  # interleaved 1F1B's own checks (equal rounds), under this schedule's name
        interleaved.build(p, m, v)
    except ConstraintError as exc:
        raise ConstraintError(str(exc).replace(interleaved.NAME, NAME, 1)) from None
    lists = []
    for rank in range(p):
        warmup = warmup_steps(rank, p, m, v)
        columns = interleaved.rank_columns(rank, p, m, v, warmup=warmup)
        lists.append(combined_units(columns, warmup, delay_wgrad))
    return Schedule(tuple(lists), loop_placement(p, v), single_chain(p * v, m), NAME)


POLICY = Policy(
    name=NAME,
    summary="interleaved 1F1B with MoE all-to-all overlap (Megatron-Core combined 1F1B)",
    constraints="virtual_stages >= 2; microbatches as interleaved-1f1b; option delay_wgrad",
    chunks=ChunkRule.at_least(2, note="1 is 1f1b-a2a-overlap"),
    build=build,
)
