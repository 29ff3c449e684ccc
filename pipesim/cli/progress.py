"""Progress bars for long runs (sweeps, Monte Carlo studies), on stderr.

A bar is drawn only when stderr is a terminal, so pipes, files and tests see nothing;
the library gets a plain callback ``progress(n)`` (n more steps done) or None.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # tqdm is imported where a bar is drawn: a piped run draws none
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
    from tqdm import tqdm

    with tqdm(total=total, unit=unit, desc=desc, file=sys.stderr) as bar:
        yield bar.update


@contextmanager
def open_ended_bar(unit: str, desc: str, disabled: bool = False) -> Iterator[Progress | None]:
    """A counting bar (no known total) that appears only once something is counted: a
    scenario loads silently unless it searches a schedule (zb-auto, v-auto)."""
    if disabled or not sys.stderr.isatty():
        yield None
        return
    bars: list[tqdm] = []

    def update(count: int) -> None:
        if not bars:
            from tqdm import tqdm

            bars.append(tqdm(unit=unit, desc=desc, file=sys.stderr, leave=False))
        bars[0].update(count)

    try:
        yield update
    finally:
        for bar in bars:
            bar.close()
