"""The fast evaluator's inner loop, once for Python and once compiled.

The sweep (see ``pipesim.sim.fast``) visits every compute node once, in an order where
each comes after what it waits for: devices in turn, each running on while its next
node's input is known, recording start, end, cause and when it was due of each node, and
when each message entered its channel: a loop over a million small integers, which
Python runs at a few million steps a second and machine code at a few hundred million.
So the loop is written once (``sweep_kernel``) and run in one of three ways:

* as C (``sweep.c``, the same statements), built when pipesim is installed where a C
  compiler is found and loaded through ctypes in about a millisecond
  (``pipesim.sim.fast.native``); first wherever it is there, whatever the graph's size;
* compiled by numba (a dependency, which may fail to install) over NumPy arrays, on
  first use, then cached on disk: about a second once per installation, and 0.3 s to
  load in each new process;
* as it is, over ``array.array`` buffers (quick to index one at a time from Python),
  where neither is there, and, without the C loop, for small graphs: until a process has
  swept ``COMPILE_AFTER_NODES`` nodes, the Python loop is cheaper than loading numba.

All three run the same operations on doubles in the same order, so their timelines agree
to the bit and are the engine's (no fast-math, no reassociation, no fused multiply-adds).

``longest_paths`` is the entry: one sweep of a graph, into the buffers a caller's
``SweepBuffers`` kept from the last sweep of it, where there are any.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from pipesim.sim.fast.jit import compiled, worth_compiling
from pipesim.sim.fast.native import load as load_native
from pipesim.sim.trace import Cause

_START, _DEVICE, _SENDING, _INPUT = map(
    int, (Cause.START, Cause.DEVICE, Cause.SENDING, Cause.INPUT)
)


class SweepGraph(NamedTuple):
    """The graph the sweep walks, as flat int64 vectors (``pipesim.sim.fast.index``):
    device ranges, each node's input and output (a message, -1, or ``-2 - g`` for group
    g), and the groups' message lists in compressed form (group g's inputs are
    ``group_inputs[group_input_first[g]:group_input_first[g + 1]]``, likewise outputs)."""

    bounds: Any
    input_of: Any
    output_of: Any
    group_input_first: Any
    group_inputs: Any
    group_output_first: Any
    group_outputs: Any


class SweepResult(NamedTuple):
    """What the sweep found, in ms where a time.

    Per node: ``end``, ``start``, ``cause`` (a ``Cause`` code) and ``cause_ref`` (the
    reference it names: node n, or message k as ``nodes + k``, or -1), and ``scheduled``,
    when the engine's clock would be set for its end (its device free and its input sent).
    Per message: ``arrival``, ``begin`` (when it entered its channel) and ``behind`` (the
    message it queued behind on its channel, or -1). Per device: ``free`` and
    ``free_ref``, when it fell free after its last node and the reference that freed it.
    ``runs``: the runs of nodes in the order computed (first, stop per row)."""

    end: np.ndarray
    start: np.ndarray
    cause: np.ndarray
    cause_ref: np.ndarray
    scheduled: np.ndarray
    arrival: np.ndarray
    begin: np.ndarray
    behind: np.ndarray
    free: np.ndarray
    free_ref: np.ndarray
    runs: np.ndarray
    state: tuple  # the buffers behind these views, to hand back for the next sweep (or ())


def compiled_kernel(enabled: bool | str | None = True, nodes: int = 0):
    """The compiled ``sweep_kernel``: the C one where the install built it
    (``pipesim.sim.fast.native``, a millisecond to load), else numba's; None where neither
    is there or ``enabled`` is False (the Python loop is asked for). ``enabled`` None:
    numba's only once it pays, for a sweep of ``nodes`` nodes (see
    ``COMPILE_AFTER_NODES``); ``"numba"``: numba's, C or not (tests, benchmarks)."""
    if enabled is False:
        return None
    if enabled != "numba" and (native := load_native()) is not None:
        return native
    if enabled is None and not worth_compiling(sweep_kernel, nodes):
        return None
    return compiled(
        sweep_kernel, (_first_active, _run_device, _all_sent, _group_input, _ship_group, _send)
    )


class SweepBuffers:
    """What one sweep leaves for the next over the same graph, held by the caller.

    Its output buffers: fresh memory costs the operating system a page fault per page, as
    much as the sweep itself at a million nodes, so a repeat sweep writes into the last
    one's (every value is rewritten). For the Python loop, the graph as ``array.array``
    buffers. Only the last graph's are kept, so at most one set is held. ``compiled``:
    None (the default) runs the C loop where the install built it, else numba's where it
    is installed and pays for itself (see ``compiled_kernel``); True, the C or numba loop
    wherever there is one, whatever the size; ``"numba"``, numba's; False, the Python
    one (for the tests and benchmarks that compare them)."""

    __slots__ = ("compiled", "_spare", "_python_graph")

    def __init__(self, compiled: bool | str | None = None) -> None:
        self.compiled = compiled
        self._spare: list[tuple[SweepGraph, tuple, Callable[[], None] | None]] = []
        self._python_graph: tuple[SweepGraph, tuple] | None = None

    def keep(
        self, graph: SweepGraph, state: tuple, release: Callable[[], None] | None = None
    ) -> None:
        """Keep a finished sweep's buffers (``SweepResult.state``) for the next sweep of
        ``graph``. ``release``: called before the buffers are written again, by whatever
        still reads the result's views then (a Trace that lays out its rows when first
        read makes them now); None: nothing reads them any more."""
        if state:
            self._spare[:] = [(graph, state, release)]

    def holds(self, graph: SweepGraph) -> bool:
        """Whether the next sweep of ``graph`` may write into kept buffers."""
        return any(owner is graph for owner, _, _ in self._spare)

    def take(self, graph: SweepGraph, sizes: tuple) -> tuple | None:
        """The kept buffers, if they are ``graph``'s and of ``sizes`` (taken: one user at
        a time, released by their last reader first), or None."""
        try:
            owner, state, release = self._spare.pop()
        except IndexError:  # none kept, or another thread took the last one
            return None
        if owner is graph and tuple(len(b) for b in state) == sizes:
            if release is not None:
                release()
            return state
        return None

    def python_graph(self, graph: SweepGraph) -> tuple:
        """``graph`` as ``array.array`` buffers for the Python loop, kept for the last graph."""
        kept = self._python_graph
        if kept is not None and kept[0] is graph:
            return kept[1]
        buffers = tuple(_buffer("q", v) for v in graph)
        self._python_graph = (graph, buffers)
        return buffers


# one per buffer of ``state``: float64 "d", int64 "q", or int8 "b" (the causes)
_STATE_CODES = "ddbqdddqdqdqdqqq"
_DTYPES = {"d": np.float64, "q": np.int64, "b": np.int8}


def longest_paths(
    graph: SweepGraph,
    times: tuple,
    channels: int,
    overhead_ms: float,
    hold: bool,
    buffers: SweepBuffers | None = None,
) -> SweepResult | None:
    """Sweep ``graph`` with ``times``: per node its duration, per message its channel
    (-1: delivered at once), channel time and latency (ms), over ``channels`` channels.
    A ``SweepResult``, or None on a deadlock (no device can move while some have work).

    ``buffers``: what earlier sweeps left (see ``SweepBuffers``; None: fresh ones)."""
    buffers = SweepBuffers() if buffers is None else buffers
    devices = len(graph.bounds) - 1
    sizes = _state_sizes(len(graph.input_of), len(times[1]), channels, devices)
    kernel = compiled_kernel(buffers.compiled, len(graph.input_of))
    if kernel is not None:
        state = buffers.take(graph, sizes) or tuple(
            np.empty(n, dtype=_DTYPES[c]) for c, n in zip(_STATE_CODES, sizes, strict=True)
        )
        written = kernel(graph, times, float(overhead_ms), bool(hold), state)
        kept = state
    else:
        state = tuple(
            array(c, bytes(np.dtype(_DTYPES[c]).itemsize * n))
            for c, n in zip(_STATE_CODES, sizes, strict=True)
        )
        times = tuple(_buffer(c, v) for c, v in zip("dqdd", times, strict=True))
        python_graph = buffers.python_graph(graph)
        written = sweep_kernel(python_graph, times, float(overhead_ms), bool(hold), state)
        state = tuple(np.frombuffer(b, dtype=b.typecode) for b in state)
        kept = ()  # not for reuse: the compiled loop takes only NumPy's own buffers
    return None if written < 0 else _result(state, written, kept)


def _state_sizes(nodes: int, messages: int, channels: int, devices: int) -> tuple:
    """The length of each buffer of ``state`` (see ``sweep_kernel``): per node end, start,
    cause, cause_ref, scheduled; per message arrival, begin, behind, sent; the run bounds;
    per channel when it falls free and its last message; per device free, free_ref, at,
    and the list of active devices."""
    lanes = max(channels, 1)
    return (
        *(nodes,) * 5,
        *(messages,) * 4,
        2 * nodes + 2,
        lanes,
        lanes,
        *(devices,) * 4,
    )


def _result(state: tuple, written: int, kept: tuple) -> SweepResult:
    """The ``SweepResult`` over a finished sweep's buffers (``written`` run bounds)."""
    end, start, cause, cause_ref, scheduled, arrival, begin, behind, _sent = state[:9]
    runs, free, free_ref = state[9][:written].reshape(-1, 2), state[12], state[13]
    return SweepResult(
        end,
        start,
        cause,
        cause_ref,
        scheduled,
        arrival,
        begin,
        behind,
        free,
        free_ref,
        runs,
        kept,
    )


def _buffer(code: str, values) -> array:
    """A vector as a compact ``array.array`` (int64 ``"q"`` or float64 ``"d"``)."""
    out = array(code)
    values = np.ascontiguousarray(values, dtype=np.int64 if code == "q" else np.float64)
    out.frombytes(values.tobytes())
    return out


def sweep_kernel(graph, times, overhead_ms, hold, state):
    """Fill ``state`` (see ``longest_paths``); return how many run bounds were written, or -1
    on a deadlock. Devices are visited in turn; each runs on while its next node's input
    is known (a message not yet sent has ``sent`` -1). Every float operation is the
    engine's, in the engine's order."""
    bounds, runs, at, active = graph[0], state[9], state[14], state[15]
    count = _first_active(graph, state)
    written = 0
    while count > 0:
        moved = False
        for j in range(count):
            device = active[j]
            first = at[device]
            stop = _run_device(graph, times, overhead_ms, hold, state, device)
            if stop != first:
                moved = True
                runs[written], runs[written + 1] = first, stop
                written += 2
        if not moved:
            return -1
        alive = 0
        for j in range(count):
            d = active[j]
            if at[d] < bounds[d + 1]:
                active[alive] = d
                alive += 1
        count = alive
    return written


def _first_active(graph, state):
    """Start every device at its first node, free at 0 with no cause, every channel free
    at 0; mark every message unsent; list the devices with work; return how many."""
    bounds, sent, channel_free = graph[0], state[8], state[10]
    free, free_ref, at, active = state[12], state[13], state[14], state[15]
    for k in range(len(sent)):
        sent[k] = -1.0
    for c in range(len(channel_free)):
        channel_free[c] = 0.0
    count = 0
    for d in range(len(bounds) - 1):
        at[d], free[d], free_ref[d] = bounds[d], 0.0, -1
        if bounds[d] < bounds[d + 1]:
            active[count] = d
            count += 1
    return count


def _run_device(graph, times, overhead_ms, hold, state, device):
    """Run ``device`` on while its next node's input is known; return where it stopped."""
    input_of, output_of, duration = graph[1], graph[2], times[0]
    end, start, cause, cause_ref, scheduled = state[0], state[1], state[2], state[3], state[4]
    arrival, sent = state[5], state[8]
    free, free_ref, at = state[12], state[13], state[14]
    nodes = len(input_of)
    i, stop, t, ref = at[device], graph[0][device + 1], free[device], free_ref[device]
    while i < stop:
        why = _START if ref < 0 else (_SENDING if ref >= nodes else _DEVICE)
        ready, due, k = t, t, input_of[i]
        if k >= 0:
            if sent[k] < 0.0:
                break
            if sent[k] > due:
                due = sent[k]
            if arrival[k] > ready:
                ready, why, ref = arrival[k], _INPUT, nodes + k
        elif k != -1:
            if not _all_sent(graph, -2 - k, sent):
                break
            ready, due, why, ref = _group_input(graph, -2 - k, state, (ready, due, why, ref))
        start[i], cause[i], cause_ref[i], scheduled[i] = ready, why, ref, due
        t = ready + duration[i] + overhead_ms
        end[i], ref, k = t, i, output_of[i]
        if k >= 0:
            a = _send(times, state, k, t)
            if hold and a > t:
                t, ref = a, nodes + k
        elif k != -1:
            t, ref = _ship_group(graph, -2 - k, times, hold, state, (i, t))
        i += 1
    at[device], free[device], free_ref[device] = i, t, ref
    return i


def _all_sent(graph, g, sent):
    """Whether every input of group g has been sent."""
    first, inputs = graph[3], graph[4]
    for q in range(first[g], first[g + 1]):
        if sent[inputs[q]] < 0.0:
            return False
    return True


def _group_input(graph, g, state, known):
    """When group g starts (after its device falls free and every member's input is in),
    when it is due, and its cause: the first input strictly later than all before it."""
    first, inputs = graph[3], graph[4]
    arrival, sent, nodes = state[5], state[8], len(graph[1])
    ready, due, why, ref = known
    for q in range(first[g], first[g + 1]):
        m = inputs[q]
        if sent[m] > due:
            due = sent[m]
        if arrival[m] > ready:
            ready, why, ref = arrival[m], _INPUT, nodes + m
    return ready, due, why, ref


def _ship_group(graph, g, times, hold, state, node_end):
    """Send group g's messages, member by member, as the engine does; return when its
    device falls free and what frees it: its end (the node), or with ``hold`` the latest
    arrival after it (among equal ones the last sent)."""
    first, outputs, nodes = graph[5], graph[6], len(graph[1])
    node, end = node_end
    free, ref = end, node
    for q in range(first[g], first[g + 1]):
        m = outputs[q]
        a = _send(times, state, m, end)
        if hold and a > end and a >= free:
            free, ref = a, nodes + m
    return free, ref


def _send(times, state, k, t):
    """Send message k at time t: delivered at once without a channel, else queued behind
    its channel's last message (``behind``: that one, where the channel is still busy at
    t), on it for its occupancy, then its latency; return its arrival."""
    channel, occupancy, latency = times[1], times[2], times[3]
    arrival, begin, behind, sent = state[5], state[6], state[7], state[8]
    channel_free, channel_last = state[10], state[11]
    c = channel[k]
    sent[k], behind[k] = t, -1
    if c < 0:
        arrival[k], begin[k] = t, t
        return t
    f = channel_free[c]
    if f > t:
        behind[k] = channel_last[c]
    b = f if f > t else t
    begin[k] = b
    f = b + occupancy[k]
    channel_free[c], channel_last[c] = f, k
    a = f + latency[k]
    arrival[k] = a
    return a


__all__ = [
    "SweepBuffers",
    "SweepGraph",
    "SweepResult",
    "compiled",
    "compiled_kernel",
    "longest_paths",
    "sweep_kernel",
]
