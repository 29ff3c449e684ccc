"""The fast evaluator: the engine's timeline as a longest-path sweep, without SimPy.

For a deterministic scenario nothing in a step is left to chance: each device runs its
list in a fixed order, and on a link of its own a message leaves in its sender's order.
So every start and end is fixed by the dependency graph alone, a longest-path problem:

    start(action)  = max(end of the device's previous action, arrival of its input)
    end(action)    = start + duration (+ overhead)
    leave(message) = max(end of its producer, when its channel fell free) + channel time
    arrive         = leave + latency

``sweep`` solves it in one pass over the graph: it visits the devices in turn and runs
each as far as its inputs are known, so every node is computed once, after what it
waits for, with the engine's own floating-point operations in the engine's order. The
loop is ``pipesim.sim.fast.kernel``'s, compiled by numba (a dependency) where it is
installed and plain Python otherwise, with the same results to the bit.
Everything around the pass is bulk NumPy (``pipesim.sim.fast.rows``): the durations and
link times it reads, and the Trace it yields, with the same rows, times and causes as
``pipesim.sim.engine.simulate``.

Why one pass and not rounds of vectorised scans (per device, end = max(previous end,
ready) + duration is a max-plus prefix scan): iterating such scans to the fixed point
takes one round per change of device along the longest path. That is about 2(D-1)
rounds on ideal links, but with a latency on each hop 1F1B's steady state hands work
back and forth between the last two devices once per microbatch (124 rounds at D=8,
m=64), so the rounds grow with the microbatches and each costs a pass over every node.
The pass here costs one visit per node, whatever the path.

What it cannot express goes to the engine (``pipesim.sim.fast.choose``): channels shared
by several senders (served first come, first served across senders, with a tie rule
over the instant), random durations or link times, torch's runtime posts, negative
times. An invalid schedule or a deadlock also goes to the engine, whose validator says
what is wrong, with the grid.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from functools import partial

import numpy as np

from pipesim.schedules.ir import Kind, Schedule
from pipesim.sim.costs import Costs
from pipesim.sim.fast.cache import EvaluatorCache
from pipesim.sim.fast.index import ScheduleIndex, remember
from pipesim.sim.fast.kernel import SweepBuffers, SweepResult, longest_paths
from pipesim.sim.fast.rows import LinkTimes, build_trace
from pipesim.sim.links import Topology
from pipesim.sim.trace import Trace


def unsupported(
    schedule: Schedule,
    costs: Costs,
    topology: Topology | None,
    cache: EvaluatorCache | None = None,
) -> str | None:
    """Why the sweep cannot reproduce the engine here (one line), or None.

    An invalid schedule is not a reason: the sweep hands it to the engine, whose
    validator raises the same error either way. ``cache``: as for ``fast_simulate``."""
    if schedule.posts:
        return "the schedule carries torch's runtime posts (a lowered CSV), run by the engine"
    if _negative(costs, topology):
        return "a duration or link time is negative, which only the engine runs"
    if topology is None:
        return None
    return _wiring((cache or EvaluatorCache()).index(schedule), topology)[0]


def _wiring(index: ScheduleIndex, topology: Topology) -> tuple:
    """Whether a channel is shared by several senders (why the sweep cannot run, or None),
    each route's channel number (-1: delivered at once) and link, how many channels, and
    each message's channel. Kept on the index for the last few topologies it met (by
    what they say, not which object they are), as a planner asks again and again."""
    key = (
        "wiring",
        topology.default,
        frozenset(topology.links.items()),
        frozenset(topology.channels.items()),
    )
    kept = index.memo.get(key)
    if kept is not None:
        return kept
    names: dict[str, int] = {}
    senders: dict[str, set[int]] = {}
    per_route = []
    for src, dst, _ in index.routes.tolist():
        link = topology.link(src, dst)
        if src == dst or link.is_ideal:
            per_route.append((-1, link))
            continue
        name = topology.channel(src, dst)
        senders.setdefault(name, set()).add(src)
        per_route.append((names.setdefault(name, len(names)), link))
    shared = [name for name, found in sorted(senders.items()) if len(found) > 1]
    reason = None
    if shared:
        reason = f"channel {shared[0]!r} is shared by several senders (queueing across senders)"
    channel = np.array([number for number, _ in per_route], dtype=np.int64)[index.route_of]
    wiring = (reason, per_route, len(names), channel)
    remember(index, key, wiring)
    return wiring


def fast_simulate(
    schedule: Schedule,
    costs: Costs,
    topology: Topology | None = None,
    *,
    tail_ms: Sequence[float] | None = None,
    tail_after_flush: bool = True,
    optimizer_ms: Sequence[float] | None = None,
    cache: EvaluatorCache | None = None,
) -> Trace | None:
    """The Trace ``simulate`` would return, or None where the sweep stops short (a
    deadlock or an invalid schedule: the engine then says what is wrong). Its rows are
    laid out when first read (``pipesim.sim.fast.rows``); a report reads none of them.

    The caller checks ``unsupported`` first; ``tail_ms``, ``tail_after_flush`` and
    ``optimizer_ms`` mean what they mean to ``simulate``. ``cache``: what earlier calls
    left to reuse (the schedule's index, the sweep's buffers); None: made for this call
    alone.
    """
    cache = cache or EvaluatorCache()
    topology = topology or cache.ideal(schedule.devices)
    index = cache.index(schedule)
    if index.fault is not None:
        return None
    duration = node_durations(index, costs)
    links = link_times(index, costs, topology)
    hold = not topology.comm_overlap
    solved = sweep(index, duration, links, costs.overhead_ms, hold, cache.buffers)
    if solved is None:
        return None
    trace = build_trace(index, solved, links, tail_ms, tail_after_flush, optimizer_ms)
    # the Trace reads the buffers until it lays out its rows: it does so before they are
    # written again, if it is still held then (only weakly referenced here)
    cache.buffers.keep(index.graph, solved.state, partial(_lay_out, weakref.ref(trace)))
    return trace


def _lay_out(trace: weakref.ref) -> None:
    """Lay out a Trace's rows, if it is still held, and let go of the sweep's buffers."""
    held = trace()
    if held is not None:
        held.lay_out()


def node_durations(index: ScheduleIndex, costs: Costs) -> np.ndarray:
    """Each node's duration (ms), as the engine takes it from ``costs``."""
    table = np.array(
        [costs.forward_ms, costs.backward_ms, costs.backward_input_ms, costs.backward_weight_ms],
        dtype=np.float64,
    )
    kind = index.memo.get("cost kind")
    if kind is None:  # a group's row is overwritten below; without groups, kinds are 0-3
        kind = np.minimum(index.node_kind, 3) if index.groups else index.node_kind
        remember(index, "cost kind", kind)
    duration = table[kind, index.node_model_stage]
    lengths: dict[tuple[tuple[Kind, int], ...], float] = {}  # a MoE pair's timeline, once
    for node, _, _, members in index.groups:
        length = lengths.get(members)
        if length is None:
            length = lengths[members] = costs.group_ms(members)
        duration[node] = length
    return duration


def link_times(index: ScheduleIndex, costs: Costs, topology: Topology) -> LinkTimes:
    """Channel, channel time and latency of every message (LogGP, as the engine has it)."""
    _, per_route, channels, channel = _wiring(index, topology)
    table = np.array(
        [
            (link.occupancy_ms(costs.activation_bytes[stage]), link.latency_ms)
            if number >= 0
            else (0.0, 0.0)
            for (number, link), stage in zip(per_route, index.routes[:, 2].tolist(), strict=True)
        ],
        dtype=np.float64,
    ).reshape(-1, 2)
    return LinkTimes(channel, table[index.route_of, 0], table[index.route_of, 1], channels)


def _negative(costs: Costs, topology: Topology | None) -> bool:
    """Whether any time the sweep adds up is below zero (it marks "not yet sent" by -1)."""
    times = (
        costs.forward_ms,
        costs.backward_ms,
        costs.backward_input_ms,
        costs.backward_weight_ms,
        costs.overlapped_fb_ms or (),
        costs.activation_bytes,
    )
    if costs.overhead_ms < 0 or any(min(values, default=0.0) < 0 for values in times):
        return True
    links = () if topology is None else (topology.default, *topology.links.values())
    return any(min(k.latency_us, k.gap_us, k.bandwidth_gbps) < 0 for k in links)


def sweep(
    index: ScheduleIndex,
    duration: np.ndarray,
    links: LinkTimes,
    overhead_ms: float,
    hold: bool,
    buffers: SweepBuffers | None = None,
) -> SweepResult | None:
    """Every node's start, end and cause, every message's arrival and the time it entered
    its channel, and the runs of nodes in the order they were computed (a topological
    order): a ``SweepResult``, or None on a deadlock. The loop itself is
    ``pipesim.sim.fast.kernel.longest_paths`` (compiled where numba is installed);
    ``hold``: a send keeps its device busy until it arrives; ``buffers``: what earlier
    sweeps left (None: fresh ones)."""
    times = (duration, links.channel, links.occupancy_ms, links.latency_ms)
    return longest_paths(index.graph, times, links.channels, overhead_ms, hold, buffers)


__all__ = ["LinkTimes", "fast_simulate", "link_times", "node_durations", "sweep", "unsupported"]
