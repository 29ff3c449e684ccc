"""``pipesim plan``: parse, call ``pipesim.analysis.plan.plan``, render
(``pipesim.cli.render.plan``).

Exit codes: 0 on success; 2 for a user mistake (a bad --space key or value, bad --gpus, a
bad scenario), one line on stderr; 1 when the planner's number for one of the confirmed
candidates differs from the SimPy engine's on its emitted scenario (a bug in pipesim,
never the user's doing), one line on stderr and no output written; 128 + the signal's
number when a signal stops it (130 for Ctrl-C), one line on stderr.

A stopped plan writes nothing unless ``--partial-on-interrupt`` asks it to keep what
finished: then ``-o`` gets the candidates scored so far, ranked and marked as partial
(``"complete": false`` and the counts first in the JSON, a ``# partial plan`` first line
in the CSV, a ``PARTIAL PLAN`` first line in the table), none confirmed, and ``--emit``,
``--pareto``, ``--html`` and ``--explain`` are not written. It is a flag rather than the
default because a partial file written at every Ctrl-C would replace the last complete result
under the same name, and a script that reads the file would take the best of a fraction
of the space for the plan's winner; asked for, the file is written all or nothing as any
other output.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack

import click

from pipesim.analysis.plan import Plan, PlanError, PlanMismatch, PlanSoFar, explain_plan, plan
from pipesim.cli.fallback import say_if_uncompiled
from pipesim.cli.formats import format_option, output_format
from pipesim.cli.html import check_html, html_option, html_output
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
    scenario_inputs,
    user_errors,
    write_outputs,
)
from pipesim.cli.progress import progress_bar
from pipesim.cli.render.plan import plan_files, render_plan
from pipesim.cli.signals import on_stop
from pipesim.scenario.build import apply_overrides, read_mapping

EMIT_SUFFIXES = (".yaml", ".yml", ".json")
FORMATS = ("table", "json", "csv")


@click.command("plan")
@click.argument("scenario")
@click.option(
    "--gpus",
    required=True,
    metavar="N",
    help="GPUs of the job (tensor x context x pipeline x data).",
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
    type=WholeNumber(min=0),
    default=10,
    show_default=True,
    help="Simulate the top K again from their emitted scenarios on the SimPy engine.",
)
@click.option(
    "--top",
    type=WholeNumber(min=1),
    default=20,
    show_default=True,
    help="Ranked results to show and keep (the Pareto front is over all).",
)
@format_option(FORMATS)
@click.option("-o", "--output", default="-", metavar="PATH|-", help="Write the results here.")
@click.option("--emit", metavar="PATH", help="Write the winner as a ready-to-run scenario (.yaml).")
@click.option(
    "--pareto",
    "pareto_path",
    metavar="PATH",
    help="Step time against peak memory, the front marked (.png, .svg, .pdf).",
)
@html_option
@click.option(
    "--explain",
    "explain",
    is_flag=True,
    help="Say where the winner's lead over the runner-up comes from.",
)
@click.option(
    "--memory-headroom",
    type=click.FloatRange(min=0, max=1, max_open=True),
    metavar="FRACTION",
    help="Share of each GPU's memory kept free: a layout fits when its peak stays under "
    "capacity x (1 - FRACTION) [default: the scenario's hardware.memory_headroom, 0.05].",
)
@click.option(
    "--no-timing",
    is_flag=True,
    help="Leave out how long the plan took (wall_s in the JSON, the seconds in the table), "
    "so that two runs of one plan give the same bytes.",
)
@click.option(
    "--partial-on-interrupt",
    is_flag=True,
    help="When a signal stops the plan (Ctrl-C, SIGTERM), write the candidates that "
    'finished to -o, ranked and marked as partial (JSON: "complete": false; CSV and '
    "table: a first line saying so), none confirmed; --emit, --pareto, --html and --explain "
    "are not written. Off by default, so that a stopped plan never replaces a complete result "
    "with a partial one.",
)
@click.option(
    "--exhaustive",
    is_flag=True,
    help="Simulate every candidate that fits, even those whose lower bound shows they can "
    "change neither the results nor the Pareto front (same output, slower).",
)
@jobs_option
@executor_option
@scheduler_option
@no_progress_option
def plan_command(**options) -> None:
    """Find the fastest way to run SCENARIO's model on N GPUs that fits in memory.

    Every layout (tensor x pipeline x data; parallel.context as the scenario sets it;
    expert parallelism for a MoE model), schedule (the combined-1F1B ones with and without
    pipeline.delay_wgrad), microbatch size, virtual stages,
    recompute, ZeRO stage and partition is a candidate; those that cannot fit are pruned by memory before any simulation, the rest
    are scored with exact timelines. Exit code 1
    means a confirmed candidate disagreed with the SimPy engine (a pipesim bug); Ctrl-C
    stops the plan with exit code 130 (--partial-on-interrupt keeps what finished).
    """
    try:
        _plan(**options)
    except PlanMismatch as exc:
        error(str(exc))
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
    html_path,
    explain,
    memory_headroom,
    no_timing,
    partial_on_interrupt,
    exhaustive,
    jobs,
    executor,
    scheduler,
    no_progress,
) -> None:
    check_outputs(
        Output("-o", output, stdout=True),
        Output("--emit", emit, EMIT_SUFFIXES),
        Output("--pareto", pareto_path, FIGURE_SUFFIXES),
        html_output(html_path),
        inputs=scenario_inputs(scenario, overrides),
    )
    check_html(html_path)
    fmt = output_format(fmt, output, FORMATS)
    count = _gpus(gpus)
    base = _base(scenario, overrides, memory_headroom)
    workers, capped = worker_count(jobs)
    so_far = PlanSoFar()
    keep = _write_partial(so_far, output, fmt, top, not no_timing) if partial_on_interrupt else None
    with on_stop(keep):
        result = _run_planner(
            base,
            scenario,
            count,
            space,
            no_progress,
            confirm=confirm,
            top=top,
            jobs=workers,
            executor=executor,
            scheduler=scheduler,
            so_far=so_far,
            exhaustive=exhaustive,
        )
        if (emit or explain) and not result.results:
            raise UserError(f"{scenario}: no candidate fits; nothing to emit or explain")
        explanation = explain_plan(base, scenario, result.results) if explain else None
    files = plan_files(result, emit, pareto_path, html_path)
    report = render_plan(result, fmt, explanation, timing=not no_timing)
    write_outputs([*files, (output, report)])
    _notes(capped, result, explanation if fmt == "csv" else None)


def _notes(capped: str | None, result: Plan, explanation) -> None:
    """The notes, only once every output is written, so that an error (a bad space, no
    candidate to emit, a full disk) is the one line on stderr; a CSV plan's explanation
    is said here too."""
    for text in (capped, f"planning over {result.space_size:,} candidates"):
        if text is not None:
            note(text)
    say_if_uncompiled()
    if explanation is not None:
        for line in explanation.sentences():
            note(line)


_plan = user_errors(_plan_body, also=(PlanError,))


def _write_partial(so_far: PlanSoFar, output: str, fmt: str, top: int, timing: bool):
    """What a signal that stops the plan does first: write the candidates that finished to
    ``output``, marked as partial (nothing where none had: the space was not built yet)."""

    def finish(signum: int) -> None:
        result = so_far.interrupted(signum, top)
        if result is None:
            return
        try:
            write_outputs([(output, render_plan(result, fmt, timing=timing))])
        except UserError as exc:  # a full disk: said, and the signal still ends the plan
            error(str(exc))

    return finish


def _base(scenario: str, overrides, memory_headroom: float | None) -> dict:
    """The scenario under ``--set``, ``--memory-headroom`` as its hardware.memory_headroom
    (so the emitted winner flags OOM as the plan pruned)."""
    extra = [] if memory_headroom is None else [f"hardware.memory_headroom={memory_headroom!r}"]
    return apply_overrides(read_mapping(scenario), [*overrides, *extra])


def _run_planner(
    base: dict, scenario: str, gpus: int, space, no_progress: bool, **settings
) -> Plan:
    """``plan(...)`` with a progress bar that opens once the space's size is known."""
    with ExitStack() as bars:
        updates: list = []

        def on_size(n: int) -> None:
            updates.append(
                bars.enter_context(progress_bar(n, "candidate", "plan", disabled=no_progress))
            )

        def progress(n: int) -> None:
            if updates and updates[0] is not None:
                updates[0](n)

        return plan(base, scenario, gpus, space, progress=progress, on_size=on_size, **settings)


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
