"""Progress bars for long runs (sweeps, Monte Carlo studies), on stderr.

A bar is drawn only when stderr is a terminal, so pipes, files and tests see nothing;
the library gets a plain callback ``progress(n)`` (n more steps done) or None.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm import tqdm

Progress = Callable[[int], None]


@contextmanager
def progress_bar(
    total: int, unit: str, desc: str, disabled: bool = False
) -> Iterator[Progress | None]:
    """A tqdm bar of ``total`` ``unit`` on stderr, yielding its update callback (or None)."""
    if disabled or total <= 0 or not sys.stderr.isatty():
        yield None
        return
    with tqdm(total=total, unit=unit, desc=desc, file=sys.stderr) as bar:
        yield bar.update
