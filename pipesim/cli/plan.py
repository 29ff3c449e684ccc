"""``pipesim plan``: parse, call ``pipesim.analysis.plan.plan``, render.

Exit codes: 0 on success; 2 for a user mistake (a bad --space key or value, bad --gpus, a
bad scenario), one line on stderr; 1 when the planner's number for one of the confirmed
candidates differs from the SimPy engine's on its emitted scenario (a bug in pipesim,
never the user's doing), one line on stderr and no output written.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from contextlib import ExitStack

import click
import yaml

from pipesim.analysis.plan import Plan, PlanMismatch, plan
from pipesim.analysis.plan_explain import PlanExplanation, explain_plan
from pipesim.analysis.plan_rank import describe, distinct
from pipesim.analysis.plan_score import METRICS
from pipesim.analysis.plan_space import AXIS_ATTRIBUTES, PlanError
from pipesim.cli.options import no_progress_option, set_option
from pipesim.cli.output import (
    FIGURE_SUFFIXES,
    Output,
    UserError,
    cap_line,
    check_outputs,
    figure_bytes,
    note,
    suffix_of,
    user_errors,
    write_outputs,
)
from pipesim.cli.progress import progress_bar
from pipesim.plot.pareto import pareto_figure
from pipesim.scenario.build import apply_overrides, read_mapping

EMIT_SUFFIXES = (".yaml", ".yml", ".json")
GIB = 2**30


@click.command("plan")
@click.argument("scenario")
@click.option(
    "--gpus", required=True, metavar="N", help="GPUs of the job (tensor x pipeline x data)."
)
@set_option
@click.option(
    "--space",
    "space",
    multiple=True,
    metavar="KEY=V1,V2,...",
    help="Values of one axis, by its scenario key (e.g. parallel.tensor=4,8); "
    "replaces that axis's default values.",
)
@click.option(
    "--confirm",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Simulate the top K again from their emitted scenarios on the SimPy engine.",
)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Ranked results to show and keep (the Pareto front is over all).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "csv"]),
    default="table",
    show_default=True,
)
@click.option("-o", "--output", default="-", metavar="PATH|-", help="Write the results here.")
@click.option("--emit", metavar="PATH", help="Write the winner as a ready-to-run scenario (.yaml).")
@click.option(
    "--pareto",
    "pareto_path",
    metavar="PATH",
    help="Step time against peak memory, the front marked (.png, .svg, .pdf).",
)
@click.option(
    "--explain",
    "explain",
    is_flag=True,
    help="Say where the winner's lead over the runner-up comes from.",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Local worker processes (default: one per CPU).",
)
@click.option(
    "--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True
)
@click.option("--scheduler", metavar="tcp://HOST:PORT", help="Dask scheduler (--executor dask).")
@no_progress_option
def plan_command(
    scenario,
    gpus,
    overrides,
    space,
    confirm,
    top,
    fmt,
    output,
    emit,
    pareto_path,
    explain,
    jobs,
    executor,
    scheduler,
    no_progress,
) -> None:
    """Find the fastest way to run SCENARIO's model on N GPUs that fits in memory.

    Every layout (tensor x pipeline x data), schedule, microbatch size, virtual stages,
    recompute, ZeRO stage and partition is a candidate; those that cannot fit are pruned
    by memory before any simulation, the rest are scored with exact timelines. Exit code 1
    means a confirmed candidate disagreed with the SimPy engine (a pipesim bug).
    """
    try:
        _plan(
            scenario,
            gpus,
            overrides,
            space,
            confirm,
            top,
            fmt,
            output,
            emit,
            pareto_path,
            explain,
            jobs,
            executor,
            scheduler,
            no_progress,
        )
    except PlanMismatch as exc:
        click.echo(cap_line(f"pipesim: error: {exc}"), err=True)
        sys.exit(1)


def _plan_body(
    scenario,
    gpus,
    overrides,
    space,
    confirm,
    top,
    fmt,
    output,
    emit,
    pareto_path,
    explain,
    jobs,
    executor,
    scheduler,
    no_progress,
) -> None:
    check_outputs(
        Output("-o", output, stdout=True),
        Output("--emit", emit, EMIT_SUFFIXES),
        Output("--pareto", pareto_path, FIGURE_SUFFIXES),
    )
    count = _gpus(gpus)
    base = apply_overrides(read_mapping(scenario), list(overrides))
    with ExitStack() as bars:  # the bar opens once the space size is known
        updates: list = []

        def on_size(n: int) -> None:
            note(f"planning over {n:,} candidates")
            updates.append(
                bars.enter_context(progress_bar(n, "candidate", "plan", disabled=no_progress))
            )

        def progress(n: int) -> None:
            if updates and updates[0] is not None:
                updates[0](n)

        result = plan(
            base,
            scenario,
            count,
            space,
            confirm=confirm,
            top=top,
            jobs=jobs or os.cpu_count() or 1,
            executor=executor,
            scheduler=scheduler,
            progress=progress,
            on_size=on_size,
        )
    if (emit or explain) and not result.results:
        raise UserError(f"{scenario}: no candidate fits; nothing to emit or explain")
    explanation = explain_plan(base, scenario, result.results) if explain else None
    files: list[tuple[str | None, str | bytes]] = []
    if emit:
        files.append((emit, _emit_text(result, suffix_of(emit))))
    if pareto_path:
        figure = pareto_figure(result)
        files.append((pareto_path, figure_bytes(figure, suffix_of(pareto_path))))
    if explanation is not None and fmt == "csv":
        for line in explanation.sentences():
            note(line)
    files.append((output, render_plan(result, fmt, explanation)))
    write_outputs(files)


_plan = user_errors(_plan_body, also=(PlanError,))


def _gpus(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise PlanError(
            f"--gpus {text!r}: expected a whole number of GPUs, e.g. --gpus 64"
        ) from None
    if not 1 <= value <= 1 << 20:
        raise PlanError(f"--gpus {value}: must be from 1 to 1048576")
    return value


def _emit_text(result: Plan, suffix: str) -> str:
    mapping = result.winner_mapping(0)
    if suffix == ".json":
        return json.dumps(mapping, indent=2) + "\n"
    return yaml.safe_dump(mapping, sort_keys=False)


# ---------------------------------------------------------------------------
# Rendering


def render_plan(result: Plan, fmt: str, explanation: PlanExplanation | None = None) -> str:
    """The plan as a table, JSON or CSV (results only)."""
    if fmt == "json":
        data = result.to_dict()
        if explanation is not None:
            data["explain"] = explanation.to_dict()
        return json.dumps(data, indent=2) + "\n"
    if fmt == "csv":
        return _csv(result.results)
    lines = _summary(result)
    lines += _table(distinct(result.results))  # one row per outcome; JSON keeps them all
    if explanation is not None:
        lines += ["", "why the winner wins:", *explanation.sentences()]
    return "\n".join(lines) + "\n"


def _summary(result: Plan) -> list[str]:
    pruned = sum(result.pruned.values())
    lines = [
        f"space: {result.space_size:,} candidates; pruned {pruned:,}; scored {result.scored:,} "
        f"({result.timelines:,} distinct timelines); confirmed {result.confirmed} on the SimPy "
        f"engine; {result.wall_s:.1f} s",
    ]
    lines += [f"  pruned: {n:,} {reason}" for reason, n in result.pruned.items()]
    lines.append(f"Pareto front (step time against peak memory): {len(result.pareto)} candidates")
    return lines + [""]


COLUMNS = ("rank", "layout", "step ms", "tokens/s", "MFU", "peak GiB", "bubble")


def _table(rows: list[dict]) -> list[str]:
    if not rows:
        return ["no candidate fits"]
    cells = [
        (
            str(n),
            describe(row),
            f"{row['step_time_ms']:.1f}",
            f"{row['tokens_per_second']:,.0f}",
            f"{row['mfu']:.3f}",
            f"{row['peak_memory_bytes'] / GIB:.1f}",
            f"{row['bubble_fraction']:.3f}",
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


def _csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header = [*AXIS_ATTRIBUTES, *METRICS, "evaluator"]
    writer.writerow(header)
    for row in rows:
        writer.writerow([row[key] for key in header])
    return buffer.getvalue()
