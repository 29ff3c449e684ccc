"""The temporary files an output is written to before it is renamed into place.

Each is hidden beside its target and named after it and the process writing it,
``.<name>.<pid>.<random>.tmp``. A writer that is stopped by a signal it can catch removes
its own (``pipesim.cli.signals``); one killed outright (SIGKILL, a power cut) cannot, so
the next write of the same file removes the temporaries of writers that are no longer
running. A running writer's temporaries are never touched; process ids are those of this
machine, so in a folder that several machines write at once, a temporary another machine
is still writing goes if its process id is free here (its rename then fails, one line).
"""

from __future__ import annotations

import os
import re


def temporary_prefix(name: str) -> str:
    """The start of a temporary's name for the file ``name``, written by this process."""
    return f".{name}.{os.getpid()}."


def remove_stale(folder: str, name: str) -> None:
    """Remove the temporaries of ``name`` in ``folder`` left by writers no longer running;
    a folder that cannot be listed, or a temporary that cannot be removed, is left as is."""
    # mkstemp's random part: eight of a-z, 0-9 and _
    pattern = re.compile(rf"\.{re.escape(name)}\.(\d+)\.[a-z0-9_]{{8}}\.tmp")
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or _running(int(match.group(1))):
            continue
        try:
            if entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
        except OSError:
            pass


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process, or no process id at all: not ours to judge
    return True
