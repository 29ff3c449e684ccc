"""The sweep compiled from C (``sweep.c``), where the install built it.

``hatch_build.py`` compiles ``sweep.c`` into ``_sweep.so`` beside it when pipesim is
installed and a C compiler is found. Loading it costs about a millisecond (ctypes, one
``dlopen``), where importing numba and loading its cached loop costs about 0.3 s in each
new process: a ``pipesim run`` of a million actions spends less waiting for its sweep to
load than it spends sweeping. It is the same loop as ``pipesim.sim.fast.kernel``'s, with
the same float operations in the same order, so its timelines are the Python loop's and
numba's to the bit.

The library records the CRC-32 of the source it was built from; one built from another
version of ``sweep.c`` (an edited checkout not rebuilt) is never loaded, and the sweep
falls back to numba's loop, then to Python's. ``PIPESIM_NO_NATIVE=1`` in the environment
skips it as well.
"""

from __future__ import annotations

import ctypes
import os
import weakref
import zlib
from pathlib import Path

import numpy as np

from pipesim.sim.trace import Cause

_HERE = Path(__file__).resolve().parent
SOURCE = _HERE / "sweep.c"
LIBRARY = _HERE / "_sweep.so"
_CODES = np.array([Cause.START, Cause.DEVICE, Cause.SENDING, Cause.INPUT], dtype=np.int8)
_GRAPH_DTYPES = (np.int64,) * 7
_TIME_DTYPES = (np.float64, np.int64, np.float64, np.float64)
_loaded: list = []  # [the library's sweep, or None], once per process


def library_path(library: Path = LIBRARY, source: Path = SOURCE) -> Path | None:
    """``library`` where it exists and was built from ``source`` as it is now, else None."""
    if os.environ.get("PIPESIM_NO_NATIVE") == "1" or not library.is_file():
        return None
    try:
        function = ctypes.CDLL(str(library)).pipesim_sweep_source_crc
    except (OSError, AttributeError):  # another platform's file, or not ours
        return None
    function.restype = ctypes.c_uint32
    return library if function() == zlib.crc32(source.read_bytes()) else None


def load(library: Path | None = None) -> NativeSweep | None:
    """The C sweep (a ``NativeSweep``), or None where it is not built, stale or disabled.
    ``library``: a library built elsewhere (tests), else the installed one, loaded once."""
    if library is not None:
        return NativeSweep(ctypes.CDLL(str(library)))
    if not _loaded:
        path = library_path()
        _loaded.append(None if path is None else NativeSweep(ctypes.CDLL(str(path))))
    return _loaded[0]


class NativeSweep:
    """Called as the compiled ``sweep_kernel`` is: ``(graph, times, overhead_ms, hold,
    state)`` with NumPy vectors (graph int64; times float64, int64, float64, float64;
    state as ``pipesim.sim.fast.kernel`` lays it out); returns how many run bounds were
    written, or -1 on a deadlock."""

    def __init__(self, library: ctypes.CDLL) -> None:
        function = library.pipesim_sweep
        function.restype = ctypes.c_int64
        pointers = ctypes.POINTER(ctypes.c_void_p)
        function.argtypes = (
            pointers,
            pointers,
            pointers,
            ctypes.POINTER(ctypes.c_int64),
            ctypes.c_void_p,
            ctypes.c_double,
            ctypes.c_int32,
        )
        self._function = function
        self._graph: tuple | None = None  # (weak references to a graph's vectors, pointers)
        self._state: tuple | None = None  # (the same for the state buffers)

    def __call__(self, graph, times, overhead_ms: float, hold: bool, state: tuple) -> int:
        # A planner sweeps the same graph into the same buffers again and again, under
        # other times: their pointers are made once, the times' on every call. The
        # arrays pointed into stay referenced here until the call returns.
        graph_pointers, _graph_arrays = self._kept(graph, _GRAPH_DTYPES, "_graph")
        state_pointers, _state_arrays = self._kept(state, None, "_state")
        times = [_vector(v, t) for v, t in zip(times, _TIME_DTYPES, strict=True)]
        sizes = (ctypes.c_int64 * 4)(
            len(graph[1]), len(times[1]), len(state[10]), len(graph[0]) - 1
        )
        written = self._function(
            graph_pointers,
            _addresses(times),
            state_pointers,
            sizes,
            _CODES.ctypes.data,
            float(overhead_ms),
            1 if hold else 0,
        )
        return int(written)

    def _kept(self, vectors: tuple, dtypes: tuple | None, slot: str):
        """The pointers of ``vectors`` (a graph, made ``dtypes``; or state buffers, written
        in place, so contiguous as they are), with what they point into. Those of the last
        vectors seen are kept, by weak reference: nothing is held alive for them."""
        kept = getattr(self, slot)
        if kept is not None and len(kept[0]) == len(vectors):
            if all(ref() is v for ref, v in zip(kept[0], vectors, strict=True)):
                return kept[1], vectors
        if dtypes is None:
            if not all(v.flags.c_contiguous for v in vectors):
                raise ValueError("the sweep's state buffers must be contiguous")
            arrays = list(vectors)
        else:
            arrays = [_vector(v, t) for v, t in zip(vectors, dtypes, strict=True)]
        pointers = _addresses(arrays)
        if all(a is v for a, v in zip(arrays, vectors, strict=True)):  # no copy made
            setattr(self, slot, ([weakref.ref(v) for v in vectors], pointers))
        return pointers, arrays


def _vector(values, dtype) -> np.ndarray:
    """``values`` as a contiguous vector of ``dtype`` (itself where it is one)."""
    if type(values) is np.ndarray and values.dtype == dtype and values.flags.c_contiguous:
        return values
    return np.ascontiguousarray(values, dtype=dtype)


def _addresses(arrays) -> ctypes.Array:
    """The data addresses of ``arrays``, as a C array of pointers."""
    return (ctypes.c_void_p * len(arrays))(*(a.ctypes.data for a in arrays))


__all__ = ["LIBRARY", "SOURCE", "NativeSweep", "library_path", "load"]
