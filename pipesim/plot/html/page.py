"""One self-contained HTML page: the plotting library, the page's own script and style,
the figures and the data, all inline, so the file opens offline and can be sent on.

A page is built from parts: HTML sections (headings, tables), figures (a plotly figure
each, kept as JSON in a ``<script type="application/json">`` block that the page's script
draws on load) and data blocks (JSON: the headline numbers as ``pipesim-data``, and the
row tables that large Gantt charts are drawn from). Nothing in the bytes depends on the
clock, the machine or chance: every element id is given here, so the same inputs give the
same file.

Large charts stay small on disk: a Gantt chart's boxes are not written as coordinates and
hover texts; the page holds one table of the rows (typed columns in base64, names as
strings) and the script draws each box from it on load (``report.js``), as one WebGL line
segment. Arrays of numbers are written as plotly does (``{"dtype": "f8", "bdata": ...}``,
little-endian), so one decoder reads them all.
"""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

INSTALL_HINT = "pip install 'pipesim[html]'"
CONFIG = {"displaylogo": False, "responsive": True, "scrollZoom": True}
# JSON inside a <script> block: nothing that could close it or open a comment
_SCRIPT_SAFE = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026"}
_INT_TYPES = (("i1", np.int8), ("i2", np.int16), ("i4", np.int32))


def plotly_missing() -> bool:
    """Whether plotly, the optional extra the report is drawn with, cannot be imported."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        return True
    return False


def script_json(value: object) -> str:
    """``value`` as JSON that is safe inside a ``<script>`` element (finite numbers only)."""
    return json.dumps(value, allow_nan=False, separators=(",", ":")).translate(_SCRIPT_SAFE)


def typed(values, dtype: str | None = None) -> dict[str, str]:
    """A NumPy array as plotly's typed-array form ``{"dtype", "bdata"}``: whole numbers in
    the smallest of int8, int16 and int32 that holds them, other numbers as float64 (or
    ``dtype`` where given: ``f4``, ``f8``, ``i4``, ...)."""
    array = np.asarray(values)
    if dtype is None:
        dtype = "f8"
        if array.dtype.kind in "iub":
            low, high = (int(array.min()), int(array.max())) if array.size else (0, 0)
            dtype = next(
                name
                for name, kind in _INT_TYPES
                if np.iinfo(kind).min <= low and high <= np.iinfo(kind).max
            )
    data = np.ascontiguousarray(array, dtype=np.dtype(dtype).newbyteorder("<"))
    return {"dtype": dtype, "bdata": base64.b64encode(data.tobytes()).decode("ascii")}


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


@dataclass(frozen=True, slots=True)
class RowTable:
    """Rows a chart is drawn from in the page: typed columns (and string columns), and
    ``lookups``, lists a column's codes index (kind names, cause phrases)."""

    table_id: str
    columns: dict[str, object]
    lookups: dict[str, list[str]] = field(default_factory=dict)

    @property
    def length(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def payload(self) -> dict:
        columns = {
            name: list(values) if isinstance(values, list) else typed(values)
            for name, values in self.columns.items()
        }
        return {"length": self.length, "columns": columns, "lookups": self.lookups}


@dataclass(slots=True)
class Page:
    """An HTML report being put together; ``render()`` gives the whole file."""

    title: str
    parts: list[str] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)

    def heading(self, text: str, level: int = 2) -> None:
        self.parts.append(f"<h{level}>{escape(text)}</h{level}>")

    def paragraph(self, text: str, css: str = "note") -> None:
        self.parts.append(f'<p class="{css}">{escape(text)}</p>')

    def raw(self, markup: str) -> None:
        """Markup built by this package's own helpers (already escaped)."""
        self.parts.append(markup)

    def figure(self, figure_id: str, figure, link: str = "") -> None:
        """A plotly figure drawn into ``<div id=figure_id>``; figures that share a ``link``
        name zoom and pan their time axes together."""
        import plotly.io as pio

        attribute = f' data-link="{escape(link)}"' if link else ""
        self.parts.append(f'<div class="figure" id="{escape(figure_id)}"{attribute}></div>')
        spec = json.loads(pio.to_json(figure, validate=False))
        spec["config"] = CONFIG
        self.blocks.append(_block(f"{figure_id}-spec", spec, "pipesim-figure", figure_id))

    def table_data(self, table: RowTable) -> None:
        self.blocks.append(_block(table.table_id, table.payload(), "pipesim-table"))

    def data(self, value: dict) -> None:
        """The numbers the report shows, for scripts and tests: ``id="pipesim-data"``."""
        self.blocks.append(_block("pipesim-data", value, "pipesim-data"))

    def render(self) -> str:
        import plotly.offline

        library = plotly.offline.get_plotlyjs().replace("</script", "<\\/script")
        body = "\n".join(self.parts)
        blocks = "\n".join(self.blocks)
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(self.title)}</title>\n"
            f"<style>\n{_asset('report.css')}</style>\n"
            f"<script>\n{library}\n</script>\n"
            "</head>\n<body>\n<main>\n"
            f"{body}\n</main>\n{blocks}\n"
            f"<script>\n{_asset('report.js')}</script>\n"
            "</body>\n</html>\n"
        )


def _block(block_id: str, value: object, css: str, target: str = "") -> str:
    aim = f' data-target="{escape(target)}"' if target else ""
    return (
        f'<script type="application/json" id="{escape(block_id)}" class="{css}"{aim}>'
        f"{script_json(value)}</script>"
    )


def _asset(name: str) -> str:
    return resources.files("pipesim.plot.html").joinpath(name).read_text(encoding="utf-8")
