"""Pause Python's cyclic garbage collector around bulk allocation.

Building a schedule or simulating one allocates millions of small tuples that never form
reference cycles; the collector's full passes would scan them all again and again, which
makes large runs super-linear. The ordinary reference counting still frees everything.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
