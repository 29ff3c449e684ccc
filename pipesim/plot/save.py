"""Saving a figure so the same run gives the same bytes.

matplotlib stamps files with the date (SVG ``dc:date``, PDF ``CreationDate``), the
software version (PNG ``Software``) and random SVG element ids; each is switched off
here (ids come from a fixed hash salt), so a figure can be checked in, diffed and cached.
"""

from __future__ import annotations

import os

from pipesim.plot.style import SAVE_DPI, pyplot

# What each format would otherwise stamp on the file.
METADATA = {
    "svg": {"Date": None},
    "pdf": {"CreationDate": None},
    "png": {"Software": None},
}
HASH_SALT = "pipesim"


def figure_format(path, fmt: str | None = None) -> str:
    """The file format: ``fmt`` if given, else the path's suffix, else matplotlib's default."""
    import matplotlib

    if fmt:
        return fmt.lower()
    suffix = os.path.splitext(os.fspath(path))[1] if isinstance(path, str | os.PathLike) else ""
    return suffix[1:].lower() or matplotlib.rcParams["savefig.format"]


def save_figure(fig, path, *, fmt: str | None = None, close: bool = True) -> None:
    """Save ``fig`` to ``path`` (a path, or a binary file with ``fmt``), byte for byte the
    same on every run, and close it (``close=False`` keeps it open); the caller handles
    atomic replacement."""
    import matplotlib

    plt = pyplot()
    kind = figure_format(path, fmt)
    with matplotlib.rc_context({"svg.hashsalt": HASH_SALT}):
        fig.savefig(path, dpi=SAVE_DPI, format=kind, metadata=METADATA.get(kind))
    if close:
        plt.close(fig)
