"""The building-block squeeze as one scalar loop, compiled by numba where it pays.

``pipesim.schedules.policies.building_blocks`` squeezes a V schedule pass by pass: each
pass moves to the first free slot after its inputs whose move keeps the device's
activation memory within the cap. Its NumPy form judges a move from the window of slots
it spans, a few array operations per tried slot; on a planner's schedules (thousands of
passes on a few hundred slots each) those small array calls are most of its time. This
module walks the same passes over the same arrays one slot at a time, in plain loops
that numba compiles to machine code, and takes exactly the same decisions: the first free
slot in ``[ready, old)`` whose move fits, in the same visiting order.

The arrays, for D devices, m microbatches and a grid of L slots:

* ``where`` (D, 4m): each pass's slot (rows F0, F1, I0, I1 of m microbatches);
* ``taken`` (D, L): 1 where a slot holds an F or I pass;
* ``rows`` (D, 3, L + 1): the running sums X, Y and held of ``_MemoryProfile``;
* ``known`` (D,): the last slot up to which held is exact;
* ``order``: the passes in visiting order, as ``device * 4m + pass``;
* ``inputs`` (D, 4, 2, 2): the (device, row) of up to two inputs of each pass, -1 none.

numba is imported on first use only (``compiled_squeeze``), and only once a process has
squeezed enough passes in NumPy for the import and the load from numba's disk cache
(about 0.3 s) to pay: a small ``pipesim run`` never loads it. Where numba is missing the
NumPy squeeze runs.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

COMPILE_AFTER_PASSES = 4096  # passes squeezed in NumPy (~0.2 s) before numba is loaded
_loaded: list[Any] = []  # the compiled loop once loaded (None: numba is missing)
_numpy_passes = [0]  # passes the NumPy squeeze took in this process before that


def squeeze_loop(
    where: np.ndarray,
    taken: np.ndarray,
    rows: np.ndarray,
    known: np.ndarray,
    order: np.ndarray,
    inputs: np.ndarray,
    cap: int,
    microbatches: int,
) -> None:
    """Pull each pass of ``order`` to the first free slot after its inputs that keeps
    the memory within ``cap``, updating the arrays in place (module docstring)."""
    m, passes = microbatches, where.shape[1]
    for visit in order:
        device, k = visit // passes, visit % passes
        row, mb = k // m, k % m
        ready = 0
        for j in range(2):
            source = inputs[device, row, j, 0]
            if source >= 0:
                ready = max(ready, where[source, inputs[device, row, j, 1] * m + mb] + 1)
        old = where[device, k]
        for slot in range(ready, old):
            if taken[device, slot] == 0 and try_move(
                rows[device], known, device, k < 2 * m, slot, old, cap
            ):
                taken[device, old] = 0
                taken[device, slot] = 1
                where[device, k] = slot
                break


def try_move(
    rows: np.ndarray, known: np.ndarray, device: int, forward: bool, slot: int, old: int, cap: int
) -> bool:
    """Move one pass from ``old`` to the free ``slot`` if the peak stays within ``cap``:
    ``_MemoryProfile.try_move``, slot by slot. An F raises X by 1 at both ends of the
    window and by 2 between, and lowers Y by 1 past its start; an I raises X by 1 and
    lowers Y by 2 past its start."""
    for t in range(known[device] + 1, slot + 1):  # held made exact up to slot
        rows[2, t] = max(rows[2, t - 1], rows[1, t])
    known[device] = max(known[device], slot)
    held = rows[2, slot]
    inner, drop = (2, 1) if forward else (1, 2)
    running = held
    for t in range(slot, old + 1):
        if t > slot:
            running = max(running, rows[1, t] - drop)
        if rows[0, t] + _raise(forward, inner, t, slot, old) + running > cap:
            return False
    running = held
    for t in range(slot, old + 1):
        rows[0, t] += _raise(forward, inner, t, slot, old)
        if t > slot:
            rows[1, t] -= drop
            running = max(running, rows[1, t])
        rows[2, t] = running
    known[device] = old
    return True


def _raise(forward: bool, inner: int, t: int, slot: int, old: int) -> int:
    """What the move adds to X at slot ``t`` of the window ``[slot, old]``."""
    if t == slot:
        return 1 if forward else 0
    if forward and t == old:
        return 1
    return inner


def compiled_squeeze(passes: int, enabled: bool | None = None):
    """The compiled ``squeeze_loop``, or None for the NumPy squeeze: where numba is
    missing, where ``enabled`` is False, or (``enabled`` None) while this process has
    squeezed fewer than ``COMPILE_AFTER_PASSES`` passes with this one's ``passes``."""
    if enabled is False:
        return None
    if not _loaded:
        if enabled is None and _numpy_passes[0] + passes < COMPILE_AFTER_PASSES:
            _numpy_passes[0] += passes
            return None
        _loaded.append(_compile())
    return _loaded[0]


def load_compiled() -> bool:
    """Load the compiled loop's machine code into this process now (numba's import, its
    disk cache), by squeezing nothing with it; False where numba is missing. A process
    about to fork workers calls it once, so that none of them loads it again."""
    loop = compiled_squeeze(0, enabled=True)
    if loop is None:
        return False
    where, known, order = np.zeros((1, 4), np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64)
    rows, inputs = np.zeros((1, 3, 2), np.int64), np.full((1, 4, 2, 2), -1, np.int64)
    loop(where, np.zeros((1, 1), np.uint8), rows, known, order, inputs, 0, 1)
    return True


def _compile():
    if importlib.util.find_spec("numba") is None:
        return None
    import numba

    for helper in (try_move, _raise):
        numba.extending.register_jitable(helper)
    return numba.njit(cache=True, nogil=True)(squeeze_loop)


__all__ = [
    "COMPILE_AFTER_PASSES",
    "compiled_squeeze",
    "load_compiled",
    "squeeze_loop",
    "try_move",
]
