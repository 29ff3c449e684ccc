"""The figures pipesim draws, in one place for callers (the CLI, notebooks).

The code lives by idea: ``style`` (colours, sizes, the legend), ``boxes`` and ``busy``
(a Gantt chart box by box, or as a busy-fraction strip for many devices), ``memory``
(the memory panel), ``gantt`` (the Gantt figures), ``sweep`` (the sweep figure) and
``save`` (files that are the same bytes on every run).
"""

from __future__ import annotations

from pipesim.plot.boxes import draw_critical_path
from pipesim.plot.gantt import crosscheck_figure, draw_gantt, gantt_figure, stacked_gantt_figure
from pipesim.plot.memory import draw_memory
from pipesim.plot.save import save_figure
from pipesim.plot.style import COLOURS, CRITICAL
from pipesim.plot.sweep import sweep_figure

__all__ = [
    "COLOURS",
    "CRITICAL",
    "crosscheck_figure",
    "draw_critical_path",
    "draw_gantt",
    "draw_memory",
    "gantt_figure",
    "save_figure",
    "stacked_gantt_figure",
    "sweep_figure",
]
