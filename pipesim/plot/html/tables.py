"""HTML tables of a report: the headline numbers, and tables a click on a header sorts.

A cell shows text and may carry the exact number behind it (``data-value``), so sorting
orders numbers as numbers ("9.5" before "10.2") and the page's script can read them back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipesim.plot.html.page import escape


@dataclass(frozen=True, slots=True)
class Cell:
    """One table cell: its ``text``, the ``value`` it sorts by (None: the text) and a CSS
    class (``text``: left-aligned words; ``bad``: a warning, such as OOM)."""

    text: str
    value: float | int | str | None = None
    css: str = ""


def cell(value: float | int | None, fmt: str = "{:.3f}", css: str = "") -> Cell:
    """A number shown with ``fmt`` that sorts by its exact value; ``-`` where undefined."""
    if value is None:
        return Cell("-", "", css)
    return Cell(fmt.format(value), value, css)


def html_table(
    header: Sequence[str],
    rows: Sequence[Sequence[Cell | str]],
    *,
    table_id: str = "",
    sortable: bool = False,
) -> str:
    """A ``<table>``; ``sortable``: a click on a header sorts the rows by that column."""
    classes = "sortable" if sortable else ""
    attributes = (f' id="{escape(table_id)}"' if table_id else "") + (
        f' class="{classes}"' if classes else ""
    )
    first = rows[0] if rows else []
    words = [isinstance(c, str) or c.css == "text" for c in first] + [False] * len(header)
    head = "".join(
        f'<th class="text">{escape(name)}</th>' if words[n] else f"<th>{escape(name)}</th>"
        for n, name in enumerate(header)
    )
    body = "\n".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    return (
        f'<div class="scroll"><table{attributes}>\n<thead><tr>{head}</tr></thead>\n'
        f"<tbody>\n{body}\n</tbody></table></div>"
    )


def _cell(item: Cell | str) -> str:
    item = item if isinstance(item, Cell) else Cell(item, css="text")
    value = "" if item.value is None else f' data-value="{escape(_value_text(item.value))}"'
    css = f' class="{escape(item.css)}"' if item.css else ""
    return f"<td{css}{value}>{escape(item.text)}</td>"


def _value_text(value: float | int | str) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def headline_table(lines: Sequence[tuple[str, str, str]]) -> str:
    """The headline numbers: ``(quantity, simulated, analytic)``, analytic "" where no
    closed form applies (the column is left out when none does)."""
    analytic = any(predicted for _, _, predicted in lines)
    header = ["quantity", "simulated", *(["analytic"] if analytic else [])]
    rows = [
        [label, Cell(value, css=_warning(value)), *([Cell(predicted)] if analytic else [])]
        for label, value, predicted in lines
    ]
    return html_table(header, rows, table_id="pipesim-headline")


def _warning(text: str) -> str:
    return "bad" if "OUT OF MEMORY" in text else ""
