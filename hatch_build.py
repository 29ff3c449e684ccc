"""Build step: the fast evaluator's sweep compiled from C, where a C compiler is found.

``pipesim/sim/fast/sweep.c`` is compiled into ``pipesim/sim/fast/_sweep.so``, a plain
shared library that ``pipesim.sim.fast.native`` loads through ctypes (about a millisecond,
against the ~0.3 s of importing numba and loading its cached code in every new process).
A wheel that carries it is tagged for this platform. Where no compiler is found or the
compile fails, the install goes on without it and pipesim runs numba's loop (or, without
numba, the Python one): the same timelines, only a slower start.

The compiler is ``$CC``, else ``cc``; ``PIPESIM_NO_NATIVE=1`` skips the step. The library
records the CRC-32 of the source it was built from, and pipesim loads it only while that
matches the source beside it (an edited ``sweep.c`` is never run stale: reinstall, or run
``python hatch_build.py``, to rebuild it).

The tests load this file by path to build the library into a folder of their own
(``build_library``); outside a build, hatchling need not be installed.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # loaded by path outside a build (tests, a rebuild by hand)
    BuildHookInterface = object

SOURCE = Path("pipesim") / "sim" / "fast" / "sweep.c"
LIBRARY = Path("pipesim") / "sim" / "fast" / "_sweep.so"
# No fused multiply-adds and no fast-math: the same IEEE operations as the Python loop.
FLAGS = ("-O2", "-std=c99", "-shared", "-fPIC", "-ffp-contract=off")


def source_crc(source: Path) -> int:
    """The CRC-32 of ``source``'s bytes (what the library records and the loader checks)."""
    return zlib.crc32(source.read_bytes())


def build_library(source: Path, target: Path) -> str | None:
    """Compile ``source`` into the shared library ``target`` (written whole or not at all);
    None where it worked, else why not (one line)."""
    if sys.platform == "win32":
        return "no C build on Windows"
    compiler = shlex.split(os.environ.get("CC") or "cc")
    crc = f"-DPIPESIM_SWEEP_SOURCE_CRC={source_crc(source)}u"
    handle, partial = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(handle)
    try:
        done = subprocess.run(
            [*compiler, *FLAGS, crc, "-o", partial, str(source)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as failed:
        os.unlink(partial)
        return f"{compiler[0]}: {failed}"
    if done.returncode != 0:
        os.unlink(partial)
        lines = (done.stderr or done.stdout).strip().splitlines()
        return f"{compiler[0]} failed: {lines[0] if lines else done.returncode}"
    os.chmod(partial, 0o755)
    os.replace(partial, target)
    return None


class NativeSweepHook(BuildHookInterface):
    """Compiles the sweep for the wheel (and the editable install) where it can."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel" or os.environ.get("PIPESIM_NO_NATIVE") == "1":
            return
        root = Path(self.root)
        failed = build_library(root / SOURCE, root / LIBRARY)
        if failed is not None:
            self.app.display_warning(
                f"pipesim: the C sweep was not built ({failed}); the fast evaluator will "
                "use numba (or Python) instead, with the same results"
            )
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version != "editable":  # an editable install runs it from the source tree
            build_data["force_include"][str(root / LIBRARY)] = LIBRARY.as_posix()


if __name__ == "__main__":  # rebuild in place: python hatch_build.py
    here = Path(__file__).resolve().parent
    why = build_library(here / SOURCE, here / LIBRARY)
    sys.stdout.write(f"{why or f'built {LIBRARY}'}\n")
    sys.exit(0 if why is None else 1)
