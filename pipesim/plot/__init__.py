"""Matplotlib figures: Gantt charts, memory panels, sweeps, plans, serving runs and
cross-checks. Each builder returns a figure (matplotlib is imported when one is drawn);
``save_figure`` writes one whole or not at all; ``runtime_for`` is what a scenario's
accounting adds to the memory panel. And the self-contained interactive HTML
report (``pipesim.plot.html``): ``training_report``, ``compare_report``, ``serving_report``
and ``plan_report`` each return a page as text (plotly is imported when one is drawn)."""

from pipesim.schedules.lazy import lazy_front

_PUBLIC = {
    "compare_report": "pipesim.plot.html.compare",
    "crosscheck_figure": "pipesim.plot.figures",
    "gantt_figure": "pipesim.plot.figures",
    "pareto_figure": "pipesim.plot.pareto",
    "plan_report": "pipesim.plot.html.plan",
    "runtime_for": "pipesim.plot.memory",
    "save_figure": "pipesim.plot.save",
    "serving_figure": "pipesim.plot.serving",
    "serving_report": "pipesim.plot.html.serving",
    "serving_sweep_figure": "pipesim.plot.serving",
    "stacked_gantt_figure": "pipesim.plot.figures",
    "sweep_figure": "pipesim.plot.figures",
    "training_report": "pipesim.plot.html.training",
}


__getattr__, __dir__ = lazy_front(globals(), _PUBLIC)

__all__ = [
    "compare_report",
    "crosscheck_figure",
    "gantt_figure",
    "pareto_figure",
    "plan_report",
    "runtime_for",
    "save_figure",
    "serving_figure",
    "serving_report",
    "serving_sweep_figure",
    "stacked_gantt_figure",
    "sweep_figure",
    "training_report",
]
