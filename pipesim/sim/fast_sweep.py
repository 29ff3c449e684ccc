"""The fast evaluator's inner loop, once for Python and once compiled.

The sweep (see ``pipesim.sim.fast``) visits every compute node once, in an order where
each comes after what it waits for: devices in turn, each running on while its next
node's input is known. That is a loop over a million small integers, which Python runs
at a few million steps a second and machine code at a few hundred million.

So the loop is written once, as a plain function over indexable buffers
(``sweep_kernel``), and run in one of two ways:

* compiled by numba (an optional extra, ``pip install pipesim[fast]``) over NumPy
  arrays, where numba is installed; it is compiled on first use and cached on disk, so
  the compile cost (a few seconds) is paid once per installation;
* as it is, over ``array.array`` buffers and lists (quick to index one at a time from
  Python), where it is not.

Both run the same source, hence the same floating-point operations in the same order:
their timelines agree to the bit, and both are the engine's (no fast-math, no
reassociation: numba keeps IEEE semantics unless asked otherwise).
"""

from __future__ import annotations

from array import array
from typing import Any, NamedTuple

import numpy as np

_compiled: dict[str, Any] = {}  # "kernel": the compiled function, None if numba is missing
_settings = {"compiled": True}


class SweepGraph(NamedTuple):
    """The graph the sweep walks, as flat int64 vectors (``pipesim.sim.fast_index``):
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
    """Per node its end, per message its arrival and the time it entered its channel
    (ms), and the runs of nodes in the order computed (first, stop, first, stop, ...)."""

    end: np.ndarray
    arrival: np.ndarray
    begin: np.ndarray
    runs: np.ndarray


def prefer_compiled(enabled: bool) -> bool:
    """Use the compiled loop where numba is installed (``True``, the default) or always
    the Python one; returns the previous setting. For benchmarks and tests that compare
    the two."""
    previous = _settings["compiled"]
    _settings["compiled"] = enabled
    return previous


def compiled_kernel():
    """The numba-compiled ``sweep_kernel``, or None where numba is not installed (or the
    Python loop is preferred). numba is imported here, on first use, as an optional
    extra."""
    if not _settings["compiled"]:
        return None
    if "kernel" not in _compiled:
        try:
            import numba
        except ImportError:
            _compiled["kernel"] = None
        else:
            for helper in (_first_active, _still_active, _group_ready, _ship_group):
                numba.extending.register_jitable(helper)
            _compiled["kernel"] = numba.njit(cache=True, nogil=True)(sweep_kernel)
    return _compiled["kernel"]


def run_sweep(
    graph: SweepGraph, times: tuple, channels: int, overhead_ms: float, hold: bool
) -> SweepResult | None:
    """Sweep ``graph`` with ``times``: per node its duration, per message its channel
    (-1: delivered at once), channel time and latency (ms), over ``channels`` channels.
    A ``SweepResult``, or None on a deadlock (no device can move while some have work)."""
    nodes, messages = len(graph.input_of), len(times[1])
    devices = len(graph.bounds) - 1
    kernel = compiled_kernel()
    if kernel is not None:
        state = (
            np.full(messages, -1.0), np.zeros(messages), np.zeros(nodes),
            np.zeros(2 * nodes + 2, dtype=np.int64), np.zeros(max(channels, 1)),
            np.zeros(devices), np.zeros(devices, dtype=np.int64), np.zeros(devices, dtype=np.int64),
        )  # fmt: skip
        written = kernel(graph, times, float(overhead_ms), bool(hold), state)
        arrival, begin, end, runs = state[:4]
    else:
        state = (
            array("d", [-1.0]) * messages, array("d", bytes(8 * messages)),
            array("d", bytes(8 * nodes)), array("q", bytes(8 * (2 * nodes + 2))),
            [0.0] * channels, [0.0] * devices, [0] * devices, [0] * devices,
        )  # fmt: skip
        codes = ("d", "q", "d", "d")
        buffers = tuple(_buffer(c, v) for c, v in zip(codes, times, strict=True))
        graph_buffers = tuple(_buffer("q", v) for v in graph)
        written = sweep_kernel(graph_buffers, buffers, float(overhead_ms), bool(hold), state)
        arrival, begin, end, runs = (np.frombuffer(b, dtype=b.typecode) for b in state[:4])
    if written < 0:
        return None
    return SweepResult(end, arrival, begin, runs[:written].reshape(-1, 2))


def _buffer(code: str, values) -> array:
    """A vector as a compact ``array.array`` (int64 ``"q"`` or float64 ``"d"``)."""
    out = array(code)
    out.frombytes(
        np.ascontiguousarray(values, dtype=np.int64 if code == "q" else np.float64).tobytes()
    )
    return out


def sweep_kernel(graph, links, overhead_ms, hold, state):
    """Fill ``state``'s arrival, begin, end and runs; return how many run bounds were
    written, or -1 on a deadlock. Devices are visited in turn; each runs on while its
    next node's input is known (an arrival of -1: not yet sent). ``hold``: a send keeps
    its device busy until it arrives. Every float operation is the engine's, in order."""
    bounds, input_of, output_of = graph[0], graph[1], graph[2]
    duration, channel, occupancy, latency = links
    arrival, begin, end, runs, channel_free, free, at, active = state
    count = _first_active(bounds, at, active)
    written = 0
    while count > 0:
        moved = False
        for j in range(count):
            device = active[j]
            i = first = at[device]
            h, t = bounds[device + 1], free[device]
            while i < h:
                k = input_of[i]
                if k >= 0:
                    a = arrival[k]
                    if a < 0.0:
                        break
                    if a > t:
                        t = a
                elif k != -1:
                    a = _group_ready(graph, -2 - k, arrival, t)
                    if a < 0.0:
                        break
                    t = a
                t = t + duration[i] + overhead_ms
                end[i] = t
                k = output_of[i]
                if k >= 0:
                    c = channel[k]
                    if c < 0:
                        arrival[k] = t
                    else:
                        f = channel_free[c]
                        b = f if f > t else t
                        begin[k] = b
                        f = b + occupancy[k]
                        channel_free[c] = f
                        a = f + latency[k]
                        arrival[k] = a
                        if hold and a > t:
                            t = a
                elif k != -1:
                    t = _ship_group(graph, -2 - k, t, hold, links, (arrival, begin, channel_free))
                i += 1
            if i != first:
                moved, at[device], free[device] = True, i, t
                runs[written], runs[written + 1] = first, i
                written += 2
        if not moved:
            return -1
        count = _still_active(bounds, at, active, count)
    return written


def _first_active(bounds, at, active):
    """Start every device at its first node; list those with work; return how many."""
    count = 0
    for d in range(len(bounds) - 1):
        at[d] = bounds[d]
        if bounds[d] < bounds[d + 1]:
            active[count] = d
            count += 1
    return count


def _still_active(bounds, at, active, count):
    """Keep in ``active`` only the devices with work left; return how many."""
    alive = 0
    for j in range(count):
        d = active[j]
        if at[d] < bounds[d + 1]:
            active[alive] = d
            alive += 1
    return alive


def _group_ready(graph, g, arrival, free):
    """When group g may start: after ``free`` and every member's input (-1.0 if one is
    not yet sent)."""
    first, inputs = graph[3], graph[4]
    for q in range(first[g], first[g + 1]):
        a = arrival[inputs[q]]
        if a < 0.0:
            return -1.0
        if a > free:
            free = a
    return free


def _ship_group(graph, g, end, hold, links, sent):
    """Send group g's messages, member by member, as the engine does; return when its
    device falls free (later than ``end`` if a send holds it)."""
    first, outputs = graph[5], graph[6]
    channel, occupancy, latency = links[1], links[2], links[3]
    arrival, begin, channel_free = sent
    free = end
    for q in range(first[g], first[g + 1]):
        k = outputs[q]
        c = channel[k]
        if c < 0:
            arrival[k] = end
            continue
        f = channel_free[c]
        b = f if f > end else end
        begin[k] = b
        f = b + occupancy[k]
        channel_free[c] = f
        a = f + latency[k]
        arrival[k] = a
        if hold and a > free:
            free = a
    return free


__all__ = [
    "SweepGraph",
    "SweepResult",
    "compiled_kernel",
    "prefer_compiled",
    "run_sweep",
    "sweep_kernel",
]
