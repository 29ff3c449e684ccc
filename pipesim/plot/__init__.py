"""Matplotlib figures: Gantt charts, memory panels, sweeps, plans, serving runs and
cross-checks. Each builder returns a figure (matplotlib is imported when one is drawn);
``save_figure`` writes one whole or not at all."""

from pipesim.lazy import lazy_names

_PUBLIC = {
    "crosscheck_figure": "pipesim.plot.figures",
    "gantt_figure": "pipesim.plot.figures",
    "pareto_figure": "pipesim.plot.pareto",
    "save_figure": "pipesim.plot.save",
    "serving_figure": "pipesim.plot.serving",
    "serving_sweep_figure": "pipesim.plot.serving",
    "stacked_gantt_figure": "pipesim.plot.figures",
    "sweep_figure": "pipesim.plot.figures",
}
__getattr__, __dir__ = lazy_names(__name__, _PUBLIC)

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
