"""``pipesim sweep``: one scenario at every combination of the --grid values, in parallel.

Parse, call ``pipesim.analysis.sweep.run_sweep`` (or, for a scenario with a ``serving:``
section, ``pipesim.analysis.serving_sweep.run_serving_sweep``), render
(``pipesim.cli.render.sweep``).

Ctrl-C (or another signal that stops it) ends a sweep with exit code 128 + the signal's
number and writes nothing, unless ``--partial-on-interrupt`` asks it to keep the points
that finished: then ``-o`` (or the terminal) gets their rows, in grid order, marked as
partial (``pipesim.cli.render.sweep``), and ``--plot`` is not drawn. A flag rather than
the default, so that a stopped sweep never replaces a complete table under the same name
with a part of one, nor hands a script a file it would read as the whole grid.
"""

from __future__ import annotations

import importlib.util
import signal
from functools import partial

import click

from pipesim.analysis.serving_sweep import is_serving, run_serving_sweep
from pipesim.analysis.sweep import MAX_POINTS, check_size, finished_frame, parse_grid, run_sweep
from pipesim.cli.fallback import say_if_uncompiled
from pipesim.cli.options import (
    WholeNumber,
    executor_option,
    jobs_option,
    no_progress_option,
    scheduler_option,
    set_option,
    worker_count,
)
from pipesim.cli.output import (
    FIGURE_SUFFIXES,
    Output,
    UserError,
    check_outputs,
    error,
    note,
    nothing_ran,
    scenario_inputs,
    suffix_of,
    user_errors,
    write_outputs,
)
from pipesim.cli.progress import progress_bar
from pipesim.cli.render.sweep import (
    SWEEP_SUFFIXES,
    SweepStop,
    partial_sweep_files,
    sweep_files,
)
from pipesim.cli.signals import on_stop
from pipesim.scenario.build import apply_overrides, read_mapping


@click.command("sweep")
@click.argument("scenario")
@set_option
@click.option(
    "--grid",
    "grids",
    multiple=True,
    required=True,
    metavar="KEY.PATH=V1,V2,...",
    help="Values of one scenario key; the sweep runs every combination of all --grid keys.",
)
@click.option(
    "--max-points",
    type=WholeNumber(min=1),
    default=MAX_POINTS,
    show_default=True,
    metavar="N",
    help="Refuse a grid of more points than this (checked before any point runs).",
)
@jobs_option
@executor_option
@scheduler_option
@click.option(
    "-o", "--output", metavar="PATH", help="Write the table (.csv, .parquet, .json); else print it."
)
@click.option("--plot", "plot_path", metavar="PATH", help="Sweep figure (.png, .svg, .pdf).")
@click.option(
    "--partial-on-interrupt",
    is_flag=True,
    help="When a signal stops the sweep (Ctrl-C, SIGTERM), write the points that finished "
    "(to -o, .csv or .json, or the terminal), marked as partial (CSV: a '# partial sweep' "
    'first line; JSON: an object with "complete": false around the rows); no --plot. Off '
    "by default, so that a stopped sweep never replaces a complete table with a part of one.",
)
@no_progress_option
@user_errors
def sweep_command(
    scenario,
    overrides,
    grids,
    max_points,
    jobs,
    executor,
    scheduler,
    output,
    plot_path,
    partial_on_interrupt,
    no_progress,
) -> None:
    """Run SCENARIO for every combination of the --grid values, in parallel.

    One row per point: the grid keys, the report's scalar fields, and an error column
    (a point that cannot run is a row with its reason, never an aborted sweep). Ctrl-C
    stops it with exit code 130 (--partial-on-interrupt keeps the points that finished).
    """
    _check_outputs(scenario, overrides, output, plot_path, partial_on_interrupt)
    axes = parse_grid(grids)
    total = check_size(axes, max_points)
    base = apply_overrides(read_mapping(scenario), list(overrides))
    serving = is_serving(base)
    runner = run_serving_sweep if serving else partial(run_sweep, max_points=max_points)
    workers, capped = worker_count(jobs)
    finished: list = []
    keep = partial(_write_partial, axes, finished, total, serving, output)
    keep = keep if partial_on_interrupt else None
    with (
        on_stop(keep),
        progress_bar(total, "point", "sweep", disabled=no_progress) as progress,
    ):
        frame = runner(
            base,
            scenario,
            axes,
            jobs=workers,
            executor=executor,
            scheduler=scheduler,
            progress=progress,
            into=finished,
        )
    refused = nothing_ran(
        zip(point_labels(frame, axes), frame.get("error", ()), strict=True), "points"
    )
    if refused is not None:  # no point ran: a refusal, not a report of nothing
        raise UserError(f"{scenario}: {refused}")
    write_outputs(sweep_files(frame, serving, output, plot_path))
    say_if_uncompiled()
    if capped is not None:  # notes come after the outputs, so none precedes an error line
        note(capped)


def _check_outputs(scenario, overrides, output, plot_path, partial_on_interrupt: bool) -> None:
    """Every output path, before any point runs (one line, exit code 2, for a bad one)."""
    check_outputs(
        Output("-o", output, SWEEP_SUFFIXES),
        Output("--plot", plot_path, FIGURE_SUFFIXES),
        inputs=scenario_inputs(scenario, overrides),
    )
    if output and suffix_of(output) == ".parquet" and not _has_parquet():
        raise UserError(
            f"-o {output}: writing parquet needs pyarrow: pip install 'pipesim[parquet]'"
        )
    if partial_on_interrupt and output and suffix_of(output) == ".parquet":
        raise UserError(
            f"-o {output}: --partial-on-interrupt writes .csv or .json (a parquet table has "
            "no place a reader would see the partial mark)"
        )


def _write_partial(
    axes, finished: list, total: int, serving: bool, output: str | None, signum: int
) -> None:
    """What a signal that stops the sweep does first: write the points that finished,
    marked as partial (a full disk is said in one line; the signal still ends the sweep)."""
    stop = SweepStop(signal.Signals(signum).name, len(finished), total)
    try:
        write_outputs(partial_sweep_files(finished_frame(axes, finished), serving, output, stop))
    except UserError as exc:
        error(str(exc))


def _has_parquet() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def point_labels(frame, axes) -> list[str]:
    """Each row's point, as ``key=value`` of its grid keys."""
    keys = [axis.key for axis in axes if axis.key in frame]
    return [", ".join(f"{k}={row[k]}" for k in keys) for _, row in frame[keys].iterrows()]
