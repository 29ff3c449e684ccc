"""Numbers in the units a reader takes in at a glance, shared by every table."""

from __future__ import annotations


def format_bytes(value: float) -> str:
    """``value`` bytes in the largest binary unit it reaches: ``1.50 GiB``, ``512 B``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"
