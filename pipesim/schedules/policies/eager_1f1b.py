"""Eager 1F1B (Zhuang et al., "On Optimizing the Communication of Model Parallelism",
MLSys 2023, arXiv 2211.05322: the "overlapping-friendly" 1F1B schedule).

In 1F1B's steady state each forward's output is sent just before the receiver wants it,
so on a slow link the receiver waits for it. Eager 1F1B runs more forwards up front, so
that every activation is already on its way while both devices compute something else.
It hides the forward sends only: a backward still waits on the gradient from below.

The definition followed is the authors' own implementation, Alpa's
``OverlapFriendlyPipeDreamSchedule`` (alpa-projects/alpa,
``alpa/pipeline_parallel/schedules.py``: "the warmup batch number doubles", to
``min(m, 2(p - r) - 1)`` forwards before rank r's first backward).

Rank r of p runs:

* warm-up: ``min(2(p - r - 1), m)`` forwards, twice 1F1B's ``p - r - 1``: one more per
  rank below this one, so rank r stays ``p - r - 1`` forwards ahead of 1F1B;
* steady state: one forward, then one backward (of the oldest microbatch in flight);
* cool-down: the backwards still owed.

The last rank runs exactly what it runs in 1F1B. With uniform costs and no communication
the makespan equals 1F1B's; with a pure latency ``c <= min(T_F, T_B)`` on every hop it is
GPipe's ``(m + p - 1)(T_F + T_B) + 2 (p - 1) c``, the latency paid only while filling and
draining, where 1F1B pays it in every steady-state cycle. The price is memory: rank r
holds up to ``2(p - r) - 1`` activations, ``2p - 1`` on rank 0 against 1F1B's ``p``.
"""

from __future__ import annotations

from pipesim.schedules.columns import rank_lists
from pipesim.schedules.ir import Schedule, single_chain
from pipesim.schedules.policies.one_f_one_b import rank_columns
from pipesim.schedules.policies.registry import ChunkRule, Policy

NAME = "eager-1f1b"


def build(devices: int, microbatches: int, virtual_stages: int) -> Schedule:
    p = devices
    lists = rank_lists([rank_columns(r, p, microbatches, warmup=2 * (p - r - 1)) for r in range(p)])
    return Schedule(lists, tuple(range(p)), single_chain(p, microbatches), NAME)


POLICY = Policy(
    name=NAME,
    summary="eager 1F1B: twice 1F1B's warm-up so forward sends overlap compute (Alpa)",
    constraints="virtual_stages = 1",
    chunks=ChunkRule.exactly(1),
    build=build,
)
