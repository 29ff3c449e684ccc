"""The self-contained interactive HTML report: one file, every script and style inline
(plotly.js included), that opens offline, zooms, hovers and can be sent on.

One module per view: ``training`` (one step: headline numbers, Gantt chart with the
critical path, memory, idle time by cause), ``compare`` (several schedules on one linked
time axis and a sortable table), ``serving`` (iterations per stage, latency CDFs, batch
size and KV use, every request) and ``plan`` (the Pareto front, the ranked table and the
winner's timeline). ``page`` assembles a file, ``gantt`` draws the WebGL Gantt chart.
Each view returns the page as text; plotly, the optional extra ``pipesim[html]``, is
imported when one is drawn (``plotly_missing`` says whether it can be). A view's module is
imported when its name is first used, so ``pipesim run`` loads the training view only.
"""

import importlib

_PUBLIC = {
    "INSTALL_HINT": "pipesim.plot.html.page",
    "compare_report": "pipesim.plot.html.compare",
    "plan_report": "pipesim.plot.html.plan",
    "plotly_missing": "pipesim.plot.html.page",
    "serving_report": "pipesim.plot.html.serving",
    "training_report": "pipesim.plot.html.training",
}


def __getattr__(name: str) -> object:
    """A public name, imported from its module on first use and kept here (PEP 562)."""
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(_PUBLIC[name]), name)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


__all__ = [
    "INSTALL_HINT",
    "compare_report",
    "plan_report",
    "plotly_missing",
    "serving_report",
    "training_report",
]
