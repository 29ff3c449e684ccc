"""``pipesim plan``: the ranked candidates as a table, JSON or CSV, the winner as a scenario
file, and the Pareto figure.

Rendering only: the planner ranked, pruned and explained; the table shows one row per
distinct outcome (JSON keeps them all). A partial plan (stopped by a signal) says so first
in every format: the JSON's ``complete``/``interrupted`` keys, the CSV's ``#`` line, the
table's ``PARTIAL PLAN`` line.
"""

from __future__ import annotations

import csv
import io
import json

import yaml

from pipesim.analysis.plan import (
    AXIS_ATTRIBUTES,
    DELAY_AXIS,
    EXPERT_AXIS,
    METRICS,
    Plan,
    PlanExplanation,
    PlanRow,
    describe,
    distinct,
)
from pipesim.analysis.plan.accuracy import PlanAccuracy, plan_accuracy
from pipesim.cli.output import Files, figure_bytes, suffix_of
from pipesim.plot.html.plan import plan_report
from pipesim.plot.pareto import pareto_figure

GIB = 2**30


def plan_files(
    result: Plan, emit: str | None, pareto: str | None, html: str | None = None
) -> Files:
    """The winner as a ready-to-run scenario file, the Pareto figure and the interactive
    report (the winner's step simulated again for its timeline), if asked for."""
    files: Files = []
    if emit:
        files.append((emit, emit_text(result, suffix_of(emit))))
    if pareto:
        files.append((pareto, figure_bytes(pareto_figure(result), suffix_of(pareto))))
    if html:
        files.append((html, plan_report(result)))
    return files


def emit_text(result: Plan, suffix: str) -> str:
    mapping = result.winner_mapping(0)
    if suffix == ".json":
        return json.dumps(mapping, indent=2) + "\n"
    return yaml.safe_dump(mapping, sort_keys=False)


def render_plan(
    result: Plan, fmt: str, explanation: PlanExplanation | None = None, timing: bool = True
) -> str:
    """The plan as a table, JSON or CSV (results only). ``timing=False`` leaves out how
    long it took (the JSON's ``wall_s``, the table's seconds; the CSV has none), so that
    the same plan gives the same bytes every time."""
    if fmt == "json":
        data = result.to_dict()
        if not timing:
            del data["wall_s"]
        if explanation is not None:
            data["explain"] = explanation.to_dict()
        accuracy = plan_accuracy(result)
        data["accuracy"] = None if accuracy is None else accuracy.to_dict()
        return json.dumps(data, indent=2) + "\n"
    if fmt == "csv":
        marker = "" if result.stopped is None else f"# {_partial_line(result, 'partial plan')}\n"
        return marker + _csv(result.results)
    lines = [] if result.stopped is None else [_partial_line(result, "PARTIAL PLAN")]
    lines += _summary(result, timing)
    if result.stopped is not None and not result.results:
        lines.append("no candidate scored before the stop")
    else:
        lines += _table(distinct(result.results))  # one row per outcome; JSON keeps them all
    lines += _accuracy_lines(plan_accuracy(result))
    if explanation is not None:
        lines += ["", "why the winner wins:", *explanation.sentences()]
    return "\n".join(lines) + "\n"


def _partial_line(result: Plan, head: str) -> str:
    """What a partial plan says first: which signal stopped it, and how much had finished."""
    stop = result.stopped
    return (
        f"{head}: stopped by {stop.signal} after {stop.finished:,} of {stop.total:,} "
        "candidates; the best of those, none confirmed on the SimPy engine"
    )


def _summary(result: Plan, timing: bool) -> list[str]:
    pruned = sum(result.pruned.values())
    took = f"; {result.wall_s:.1f} s" if timing else ""
    lines = [
        f"space: {result.space_size:,} candidates; pruned {pruned:,}; bounded out "
        f"{result.bounded:,}; scored {result.scored:,} "
        f"({result.timelines:,} distinct timelines); confirmed {result.confirmed} on the SimPy "
        f"engine{took}",
    ]
    lines += [f"  pruned: {n:,} {reason}" for reason, n in result.pruned.items()]
    lines.append(f"Pareto front (step time against peak memory): {len(result.pareto)} candidates")
    return lines + [""]


def _accuracy_lines(accuracy: PlanAccuracy | None) -> list[str]:
    """The winner's expected error, and whether the ranking's lead lies inside it."""
    if accuracy is None:
        return []
    return ["", f"expected error: {accuracy.band.text}", f"  {accuracy.ranking}"]


COLUMNS = ("rank", "layout", "step ms", "tokens/s", "MFU", "peak GiB", "bubble")


def _table(rows: list[PlanRow]) -> list[str]:
    if not rows:
        return ["no candidate fits"]
    cells = [
        (
            str(n),
            describe(row),
            f"{row.step_time_ms:.1f}",
            f"{row.tokens_per_second:,.0f}",
            f"{row.mfu:.3f}",
            f"{row.peak_memory_bytes / GIB:.1f}",
            f"{row.bubble_fraction:.3f}",
        )
        for n, row in enumerate(rows, 1)
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(COLUMNS)]
    return [_aligned(line, widths) for line in [COLUMNS, *cells]]


def _aligned(cells: tuple[str, ...], widths: list[int]) -> str:
    """Numbers right-aligned, the layout (second column) left-aligned."""
    parts = [
        c.ljust(w) if i == 1 else c.rjust(w)
        for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    ]
    return "  ".join(parts).rstrip()


def _csv(rows: list[PlanRow]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    moe = any(row.candidate.expert is not None for row in rows)
    delays = any(row.candidate.delay_wgrad is not None for row in rows)
    axes = [*AXIS_ATTRIBUTES, *(EXPERT_AXIS if moe else ()), *(DELAY_AXIS if delays else ())]
    header = [*axes, *METRICS, "evaluator"]
    writer.writerow(header)
    for row in rows:  # a schedule without delay_wgrad leaves its cell empty
        writer.writerow([row.to_dict().get(key, "") for key in header])
    return buffer.getvalue()
