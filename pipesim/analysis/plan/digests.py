"""Digests of a planner's pieces by value: equal digests, equal inputs.

The fold (``pipesim.analysis.plan.fold``) and the timeline cache tell two candidates' steps
apart by what goes into them, never by their names: a schedule as data (its lists,
placement and chains; its policy's name left out, so two policies that give the same lists
give one digest), and a ModelCosts' costs, tail and memory terms.
"""

from __future__ import annotations

import hashlib

import numpy as np

from pipesim.cluster.job_costs import ModelCosts
from pipesim.schedules.columns import columns
from pipesim.schedules.ir import Schedule


class Digests:
    """Digests of a Scorer's cached pieces by value, each made once: a schedule as data
    (its lists, placement and chains; its policy's name left out, so two policies that
    give the same lists give one digest), and a ModelCosts' costs, tail and memory terms
    (by the object's id: each lives in the Scorer's cache as long as the Scorer)."""

    def __init__(self) -> None:
        self._schedules: dict[tuple, str] = {}
        self._costs: dict[int, str] = {}

    def schedule(self, key: tuple, s: Schedule) -> str:
        if key not in self._schedules:
            self._schedules[key] = schedule_digest(s)
        return self._schedules[key]

    def costs(self, derived: ModelCosts) -> str:
        if id(derived) not in self._costs:
            values = (derived.costs, derived.tail_ms, derived.optimizer_ms, derived.accounting)
            self._costs[id(derived)] = digest(values)
        return self._costs[id(derived)]


def digest(inputs: tuple) -> str:
    """A short digest of a tuple of values, by its repr."""
    return hashlib.blake2b(repr(inputs).encode(), digest_size=12).hexdigest()


def schedule_digest(s: Schedule) -> str:
    """A schedule as data, read from its columns (each action's node, device, stage, kind
    and microbatch) and the kinds of its groups, with its placement, chains and posts: a
    million actions hashed as arrays instead of as text."""
    table = columns(s)
    hashed = hashlib.blake2b(digest_size=12)
    for array in (table.node, table.device, table.stage, table.kind, table.microbatch):
        hashed.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
    hashed.update(np.ascontiguousarray(table.is_group, dtype=bool).tobytes())  # OVERLAP_F_B
    hashed.update(repr((s.placement, s.chains, s.posts)).encode())
    return hashed.hexdigest()


__all__ = ["Digests", "digest", "schedule_digest"]
