"""Numbers in the units a reader takes in at a glance, shared by every table."""

from __future__ import annotations


def format_bytes(value: float) -> str:
    """``value`` bytes in the largest binary unit it reaches: ``1.50 GiB``, ``512 B``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"


def format_count(value: int) -> str:
    """A count of parameters in the largest decimal unit it reaches, as model cards write
    them: ``671.20 B``, ``12.88 B``, ``350.00 M``, ``4,096``."""
    for unit, size in (("T", 10**12), ("B", 10**9), ("M", 10**6)):
        if value >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:,}"
