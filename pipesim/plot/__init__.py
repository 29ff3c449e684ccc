"""Matplotlib figures: Gantt charts, memory panels, sweeps, plans, serving runs and
cross-checks. Each builder returns a figure (matplotlib is imported when one is drawn);
``save_figure`` writes one whole or not at all."""

from pipesim.plot.figures import (
    crosscheck_figure,
    gantt_figure,
    save_figure,
    stacked_gantt_figure,
    sweep_figure,
)
from pipesim.plot.pareto import pareto_figure
from pipesim.plot.serving import serving_figure, serving_sweep_figure

__all__ = [
    "crosscheck_figure",
    "gantt_figure",
    "pareto_figure",
    "save_figure",
    "serving_figure",
    "serving_sweep_figure",
    "stacked_gantt_figure",
    "sweep_figure",
]
