"""Pause Python's cyclic garbage collector for the whole of a command.

Building a schedule or simulating one allocates millions of small tuples that never form
reference cycles; the collector's full passes would scan them all again and again, which
makes large runs super-linear (about a third of the time at 10^6 actions). The ordinary
reference counting still frees everything.

The collector is process-wide state, so only the owner of the process may switch it off:
``pipesim.cli`` does, once around each command. The library never touches it; a script or
notebook that runs large simulations may take the same pause around its own work.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """The collector off inside the block, and as the caller had it after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
