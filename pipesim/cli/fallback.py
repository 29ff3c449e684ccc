"""One line on stderr where the fast evaluator has to run without a compiled loop.

The fast evaluator sweeps with the C loop the install built where a compiler was found
(``pipesim.sim.fast.native``), else with numba's. numba is a dependency of pipesim, but
where it cannot be installed (a platform without its wheels, a Python it does not support
yet) and no C loop was built, the fast evaluator falls back to the same sweep in plain Python: the same timelines to the bit, only slower. ``plan``, ``sweep``
and ``run --evaluator fast`` say so once, after their outputs (an error line is never
preceded by a note), with what it costs.
"""

from __future__ import annotations

from pipesim.cli.output import note
from pipesim.sim.fast.jit import numba_installed
from pipesim.sim.fast.native import load as load_native

# The plain-Python sweep's time over the compiled one's at 10^5 actions on 8 devices
# (benchmarks/bench_evaluator.py --max 1e5, with and without --no-numba, 2 cores): a
# first call on a schedule 2.3-3.1x (1F1B 2.7, interleaved 3.1, ZB-V 2.3), a repeat call
# under new costs, as a plan or a sweep makes them, 4.6-6.7x (6.7, 4.6, 5.0).
SLOWDOWN = "2-7x"
_said: list[bool] = []


def say_if_uncompiled() -> None:
    """The note, once per process, where neither the C loop nor numba is there."""
    if _said or native_built() or numba_installed():
        return
    _said.append(True)
    note(
        f"numba is not installed, so the fast evaluator sweeps in plain Python, {SLOWDOWN} "
        "slower than compiled (same results); pip install numba"
    )


def native_built() -> bool:
    """Whether the install built the C loop (and it is current)."""
    return load_native() is not None


__all__ = ["SLOWDOWN", "native_built", "say_if_uncompiled"]
