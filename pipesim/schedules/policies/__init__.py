"""The schedule policies, one module each, and ``POLICIES``, their registry.

Each module builds one published schedule and ends with its registry entry,
``POLICY = Policy(...)`` (see ``pipesim.schedules.policies.registry``); ``POLICIES`` below
lists the entries in the order ``pipesim schedules`` shows them. A new policy is one
module here and one line in that list (or ``POLICIES.register(Policy(...))`` from
outside). ``building_blocks`` holds the V-shape machinery V-Half and V-Min share.
"""

from __future__ import annotations

from pipesim.schedules.policies import (
    chimera,
    dualpipe,
    dualpipev,
    eager_1f1b,
    gpipe,
    interleaved,
    interleaved_a2a,
    interleaved_zero_bubble,
    looped_bfs,
    one_f_one_b,
    one_f_one_b_a2a,
    v_half,
    v_min,
    zb_h1,
    zb_h2,
    zbv,
)
from pipesim.schedules.policies.registry import (
    Builder,
    ChunkRule,
    ClosedForm,
    Policy,
    Registry,
)

POLICIES = Registry(
    [
        gpipe.POLICY,
        one_f_one_b.POLICY,
        interleaved.POLICY,
        looped_bfs.POLICY,
        zb_h1.POLICY,
        zb_h2.POLICY,
        eager_1f1b.POLICY,
        interleaved_zero_bubble.POLICY,
        dualpipe.POLICY,
        dualpipev.POLICY,
        zbv.POLICY,
        v_half.POLICY,
        v_min.POLICY,
        chimera.POLICY,
        one_f_one_b_a2a.POLICY,
        interleaved_a2a.POLICY,
    ]
)

# the combined-1F1B variants: their merged units overlap MoE all-to-alls
A2A_OVERLAP_POLICIES = (one_f_one_b_a2a.NAME, interleaved_a2a.NAME)

__all__ = [
    "A2A_OVERLAP_POLICIES",
    "POLICIES",
    "Builder",
    "ChunkRule",
    "ClosedForm",
    "Policy",
    "Registry",
]
