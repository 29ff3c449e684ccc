"""The plan view: what ``pipesim plan`` found, and the winner's step.

The Pareto front of step time against peak memory per device: every scored candidate as
a grey dot, the ranked results (``--top`` of them) and the front marked, the winner as a
star, the GPU's memory and the memory the plan pruned against as vertical lines. Hovering
over a ranked or front candidate shows its configuration (layout, schedule, microbatches,
recompute, ZeRO stage, ...); the planner keeps only the step time and peak of the other
scored candidates, so their hover says those two. Then the ranked table (a click on a
header sorts it) and the winner's step, simulated as ``pipesim run`` simulates the
scenario ``--emit`` would write (``pipesim.analysis.plan.run_emitted``): its headline
numbers, Gantt chart with the critical path, memory and idle time.
"""

from __future__ import annotations

from pipesim.analysis.plan import Plan, PlanRow, describe, run_emitted
from pipesim.plot.html.headline import training_data, without_timing
from pipesim.plot.html.page import Page
from pipesim.plot.html.tables import Cell, cell, html_table
from pipesim.plot.html.training import add_training
from pipesim.plot.style import CRITICAL

GIB = 2**30
SAME_POINT = 3  # candidates named in the hover of a point several share
SAME_STEP = 1e-5  # step times this close (relative) are drawn at one point
MARGIN = {"l": 80, "r": 30, "t": 60, "b": 60}


def plan_report(plan: Plan) -> str:
    """The whole page of a finished plan (without a winner where no candidate fits)."""
    page = Page("pipesim plan")
    page.heading("pipesim plan", 1)
    pruned = sum(plan.pruned.values())
    page.paragraph(
        f"space: {plan.space_size:,} candidates; pruned {pruned:,}; bounded out "
        f"{plan.bounded:,}; scored {plan.scored:,}; confirmed {plan.confirmed} on the SimPy "
        f"engine; {len(plan.pareto)} on the Pareto front"
    )
    page.heading("step time against peak memory")
    page.figure("plan-pareto", pareto_figure(plan))
    page.heading("ranked candidates")
    page.raw(ranked_table(plan.results))
    data = {"view": "plan", "plan": without_timing(plan.to_dict()), "winner": None}
    if plan.results:
        winner = run_emitted(plan.winner_mapping(0), plan.source)
        page.heading(f"the winner's step: {describe(plan.results[0])}")
        add_training(page, winner, "winner")
        data["winner"] = training_data(winner)
    else:
        page.paragraph("No candidate fits: there is no winner to show.")
    page.data(data)
    return page.render()


def candidate_text(row: PlanRow, rank: int | None = None) -> str:
    """A candidate's configuration and outcome, for its hover."""
    c = row.candidate
    head = f"<b>{'#' + str(rank) + ' ' if rank else ''}{describe(row)}</b>"
    return "<br>".join(
        [
            head,
            f"TP {c.tensor} · PP {c.devices} · DP {c.data}"
            + (f" · EP {c.expert}" if c.expert is not None else "")
            + f" · {c.schedule}, {c.virtual_stages} virtual stages",
            f"microbatch size {c.microbatch_size}, {c.microbatches} microbatches · "
            f"recompute {'on' if c.recompute else 'off'} · ZeRO {c.zero_stage}",
            f"step {row.step_time_ms:.3f} ms · peak {row.peak_memory_bytes / GIB:.2f} GiB · "
            f"bubble {row.bubble_fraction:.3f}",
        ]
    )


def pareto_figure(plan: Plan):
    """Every scored candidate, the ranked ones, the front and the winner (see the module)."""
    import plotly.graph_objects as go

    traces = []
    shown = {(row.step_time_ms, row.peak_memory_bytes) for row in (*plan.results, *plan.pareto)}
    others = [point for point in plan.points if point not in shown]
    if others:
        times, peaks = zip(*others, strict=True)
        traces.append(
            go.Scattergl(
                x=[p / GIB for p in peaks],
                y=list(times),
                mode="markers",
                marker={"size": 4, "color": "#BBBBBB"},
                name="other scored candidates",
                hovertemplate="step %{y:.3f} ms, peak %{x:.2f} GiB<extra></extra>",
            )
        )
    texts = point_texts(plan)
    for name, rows, marker in (
        ("ranked", plan.results, {"size": 7, "color": "#1F77B4", "symbol": "circle-open"}),
        ("Pareto front", sorted(plan.pareto, key=lambda r: r.peak_memory_bytes), None),
        ("winner", plan.results[:1], {"size": 16, "color": CRITICAL, "symbol": "star"}),
    ):
        if rows:
            traces.append(_candidates(name, rows, texts, marker))
    figure = go.Figure(traces)
    usable = plan.usable_bytes if plan.usable_bytes < plan.capacity_bytes else 0.0
    for limit, dash, label, where in (
        (plan.capacity_bytes, "dash", "GPU memory", "top right"),
        (usable, "dot", "usable (what the plan pruned against)", "bottom left"),
    ):
        if limit:
            figure.add_vline(
                x=limit / GIB,
                line={"color": "#555555", "dash": dash, "width": 1},
                annotation_text=f"{label} {limit / GIB:.1f} GiB",
                annotation_position=where,
            )
    figure.update_layout(
        template="plotly_white",
        height=520,
        margin=MARGIN,
        hovermode="closest",
        title={"text": f"{plan.scored:,} candidates scored", "x": 0, "font": {"size": 14}},
        xaxis={"title": {"text": "peak memory per device (GiB)"}},
        yaxis={"title": {"text": "step time (ms)"}},
    )
    return figure


def same_point(row: PlanRow, other: PlanRow) -> bool:
    """Whether two candidates sit at one spot of the chart: step times within
    ``SAME_STEP`` of each other, peaks within a MiB."""
    close = abs(row.step_time_ms - other.step_time_ms) <= SAME_STEP * other.step_time_ms
    return close and abs(row.peak_memory_bytes - other.peak_memory_bytes) <= 2**20


def points_of(plan: Plan) -> list[list[PlanRow]]:
    """The ranked and front candidates gathered by spot (``same_point`` with the first of
    a group), the ranked ones first, by rank; each candidate once."""
    groups: list[list[PlanRow]] = []
    for row in (*plan.results, *plan.pareto):
        group = next((g for g in groups if same_point(row, g[0])), None)
        if group is None:
            groups.append([row])
        elif all(row.candidate != other.candidate for other in group):
            group.append(row)
    return groups


def point_texts(plan: Plan) -> dict[int, tuple[tuple[float, float], str]]:
    """For each ranked or front candidate (by ``id``), where it is drawn (its group's first
    candidate's peak GiB and step ms) and the hover there: the candidates of the spot (up
    to ``SAME_POINT``), so every trace drawn at one spot says the same."""
    ranks = {id(row): n for n, row in enumerate(plan.results, 1)}
    found = {}
    for group in points_of(plan):
        shown = [candidate_text(row, ranks.get(id(row))) for row in group[:SAME_POINT]]
        more = len(group) - SAME_POINT
        text = "<br><br>".join(shown) + (f"<br>... and {more} more here" if more > 0 else "")
        where = (group[0].peak_memory_bytes / GIB, group[0].step_time_ms)
        found.update({id(row): (where, text) for row in group})
    return found


def _candidates(name: str, rows, texts: dict[int, tuple[tuple[float, float], str]], marker):
    """One point per spot of ``rows`` (``points_of``), with its hover."""
    import plotly.graph_objects as go

    front = marker is None
    spots = dict(texts[id(row)] for row in rows)  # spot -> hover, in the rows' order
    return go.Scattergl(  # WebGL as the scored dots, so they stay on top of them
        x=[peak for peak, _ in spots],
        y=[step for _, step in spots],
        text=list(spots.values()),
        mode="lines+markers" if front else "markers",
        line={"shape": "hv", "color": "#1F77B4", "width": 1.5} if front else None,
        marker=marker or {"size": 8, "color": "#1F77B4"},
        name=name,
        hovertemplate="%{text}<extra></extra>",
    )


COLUMNS = ("rank", "layout", "step ms", "tokens/s", "MFU", "peak GiB", "bubble", "evaluator")


def ranked_table(rows: list[PlanRow]) -> str:
    """Every ranked result (``--top`` of them), sortable by any column."""
    cells = [
        [
            cell(n, "{}"),
            Cell(describe(row), css="text"),
            cell(row.step_time_ms, "{:.1f}"),
            cell(row.tokens_per_second, "{:,.0f}"),
            cell(row.mfu, "{:.3f}"),
            cell(row.peak_memory_bytes / GIB, "{:.1f}"),
            cell(row.bubble_fraction, "{:.3f}"),
            Cell(str(row.evaluator.value), css="text"),
        ]
        for n, row in enumerate(rows, 1)
    ]
    return html_table(COLUMNS, cells, table_id="plan-table", sortable=True)
