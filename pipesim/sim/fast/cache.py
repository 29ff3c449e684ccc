"""What repeated calls of the fast evaluator reuse, kept on one object the caller holds.

A planner scores one schedule under thousands of costs, a sweep worker runs many points
of one schedule, a benchmark repeats a call. What depends on the schedule alone (its
graph laid out as arrays, ``pipesim.sim.fast.index``) and the memory a sweep writes into
(``pipesim.sim.fast.kernel.SweepBuffers``) need not be made again for each call: an
``EvaluatorCache`` keeps them for as long as its holder keeps it. Two caches share
nothing, and a call given none builds what it needs and drops it afterwards, so the
answer never depends on what ran before (only the time it takes does).

Held by: the planner's ``Scorer`` (one per worker and base scenario), a sweep worker's
chunk, ``simulate_step`` for the calls of one step, the benchmarks. The one store that
stays process-wide is numba's compiled code (see ``pipesim.sim.fast.kernel``).
"""

from __future__ import annotations

from collections import OrderedDict

from pipesim.schedules.ir import Schedule
from pipesim.schedules.lists import ActionLists
from pipesim.sim.fast.index import ScheduleIndex, build_index
from pipesim.sim.fast.kernel import SweepBuffers
from pipesim.sim.links import Topology


class EvaluatorCache:
    """The indexes of the last few schedules (``schedules`` of them, by content), the
    sweep's buffers, and ideal topologies by size.

    ``compiled``: as ``SweepBuffers`` takes it (None: the C loop where the install built
    it, else numba's where it is installed and pays for itself; True: the C or numba loop
    wherever there is one; ``"numba"``: numba's; False: the plain Python one).
    ``index_builds`` counts the schedules laid out, for tests and benchmarks.
    """

    __slots__ = ("buffers", "index_builds", "_indexes", "_first", "_last", "_ideal", "_schedules")

    def __init__(self, *, schedules: int = 8, compiled: bool | str | None = None) -> None:
        self.buffers = SweepBuffers(compiled)
        self.index_builds = 0
        self._indexes: OrderedDict[int, tuple[Schedule, ScheduleIndex]] = OrderedDict()
        self._first: tuple[Schedule, ScheduleIndex] | None = None  # the first, not yet hashed
        self._last: tuple[Schedule, int] | None = None  # the last schedule hashed, its hash
        self._ideal: dict[int, Topology] = {}
        self._schedules = schedules

    def index(self, schedule: Schedule) -> ScheduleIndex:
        """The index of ``schedule``, built on first use and kept for the last few schedules.

        Kept by content, not identity: a planner rebuilds the same schedule for every cost
        it tries, and hashing the action lists costs a small fraction of laying them out
        again (lists made from columns are hashed as their columns, and not made). The
        first schedule is hashed only once another one is asked for: a single run, which
        asks for one schedule, never hashes it.
        """
        first = self._first
        if first is not None:
            if first[0] is schedule:
                return first[1]
            self._first = None
            self._indexes[self._key(first[0])] = first
        if not self._indexes and self._schedules > 0:  # nothing to look up: hashed later
            self._first = (schedule, self._build(schedule))
            return self._first[1]
        key = self._key(schedule)
        hit = self._indexes.get(key)
        if hit is not None and (hit[0] is schedule or hit[0] == schedule):
            self._indexes.move_to_end(key)
            return hit[1]
        index = self._build(schedule)
        self._indexes[key] = (schedule, index)
        while len(self._indexes) > self._schedules:
            self._indexes.popitem(last=False)
        return index

    def _build(self, schedule: Schedule) -> ScheduleIndex:
        index = build_index(schedule)
        self.index_builds += 1
        return index

    def _key(self, schedule: Schedule) -> int:
        """A hash of the schedule's content (kept for the last schedule asked for)."""
        last = self._last
        if last is not None and last[0] is schedule:  # the very same object: no hashing
            return last[1]
        lists = schedule.device_actions
        content = lists.digest() if isinstance(lists, ActionLists) else lists
        key = hash((content, schedule.placement, schedule.chains))
        self._last = (schedule, key)
        return key

    def ideal(self, devices: int) -> Topology:
        """Ideal links between ``devices`` devices (made once per size)."""
        topology = self._ideal.get(devices)
        if topology is None:
            topology = self._ideal[devices] = Topology(devices)
        return topology


__all__ = ["EvaluatorCache"]
