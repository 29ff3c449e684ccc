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
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_double,
            ctypes.c_int32,
        )
        self._function = function

    def __call__(self, graph, times, overhead_ms: float, hold: bool, state: tuple) -> int:
        graph = [
            np.ascontiguousarray(v, dtype=t) for v, t in zip(graph, _GRAPH_DTYPES, strict=True)
        ]
        times = [np.ascontiguousarray(v, dtype=t) for v, t in zip(times, _TIME_DTYPES, strict=True)]
        for buffer in state:  # written in place: they must be the caller's own
            if not buffer.flags.c_contiguous:
                raise ValueError("the sweep's state buffers must be contiguous")
        sizes = np.array(
            [len(graph[1]), len(times[1]), len(state[10]), len(graph[0]) - 1], dtype=np.int64
        )
        return int(
            self._function(
                _addresses(graph),
                _addresses(times),
                _addresses(state),
                sizes.ctypes.data,
                _CODES.ctypes.data,
                float(overhead_ms),
                1 if hold else 0,
            )
        )


def _addresses(arrays) -> ctypes.Array:
    """The data addresses of ``arrays``, as a C array of pointers."""
    return (ctypes.c_void_p * len(arrays))(*(a.ctypes.data for a in arrays))


__all__ = ["LIBRARY", "SOURCE", "NativeSweep", "library_path", "load"]
