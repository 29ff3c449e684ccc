"""numba's side of the fast evaluator: compiling a loop, and when it is worth loading.

The one process-wide store of the fast evaluator is here: numba's machine code, by
function name (None where numba is missing). It is the same code for every caller,
compiled or loaded from numba's disk cache once per process (about a second on a first
install, about 0.3 s to import numba and load it afterwards), and numba keeps its own
dispatchers per process anyway; everything a caller's calls reuse lives on objects the
caller holds (``pipesim.sim.fast.kernel.SweepBuffers``,
``pipesim.sim.fast.cache.EvaluatorCache``).

Loading it pays only once a process sweeps enough: ``COMPILE_AFTER_NODES`` nodes is
about 50 ms of the Python loop at a few million nodes a second, against the ~0.3 s of
loading. So the Python loop sweeps small graphs until the process has swept that many
nodes with it, and a graph at least that large is compiled for at once.
"""

from __future__ import annotations

import importlib.util
from typing import Any

COMPILE_AFTER_NODES = 100_000
_compiled: dict[str, Any] = {}
_python_nodes = [0]  # nodes the Python loop swept in this process while numba was not loaded


def numba_installed() -> bool:
    """Whether numba can be imported here (found, not imported: that costs ~0.3 s)."""
    return importlib.util.find_spec("numba") is not None


def compiled(function, helpers=()):
    """``function`` compiled by numba (with the plain functions it calls, ``helpers``),
    or None where numba is not installed. numba is imported here, on first use; the
    machine code is cached on disk. No reference counting (``_nrt=False``): the loops
    allocate nothing, and counting every array taken out of a tuple at each device visit
    cost 20x the work."""
    if function.__name__ not in _compiled:
        try:
            import numba
        except ImportError:
            _compiled[function.__name__] = None
        else:
            for helper in helpers:
                numba.extending.register_jitable(_nrt=False)(helper)
            jitted = numba.njit(cache=True, nogil=True, _nrt=False)(function)
            _compiled[function.__name__] = jitted
    return _compiled[function.__name__]


def worth_compiling(function, nodes: int) -> bool:
    """Whether a sweep of ``nodes`` nodes should load ``function``'s compiled form: it is
    loaded already, or this sweep and the Python loop's sweeps so far reach
    ``COMPILE_AFTER_NODES``."""
    if _compiled.get(function.__name__) is not None:
        return True
    _python_nodes[0] += nodes
    return _python_nodes[0] >= COMPILE_AFTER_NODES


__all__ = ["COMPILE_AFTER_NODES", "compiled", "numba_installed", "worth_compiling"]
