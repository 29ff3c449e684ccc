"""The ``pipesim`` command line: parse, call one library function, render.

User mistakes (bad file, unknown key, impossible combination) print one line
``pipesim: error: FILE: FIELD: what is allowed`` on stderr and exit with code 2. Every
output path is checked before anything runs, and nothing is written unless the whole run
succeeded (``pipesim.cli.output``). Notes worth reading next to the numbers (costs per
chunk, costs rescaled for a comparison) go to stderr as ``pipesim: note: ...``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os

import click

from pipesim.analysis.compare import (
    CompareError,
    Comparison,
    compare_schedules,
    default_schedules,
)
from pipesim.analysis.run import Result, explain_scenario, run_scenario
from pipesim.analysis.sweep import parse_grid, run_sweep
from pipesim.cli.calibrate import COMMANDS
from pipesim.cli.options import evaluator_option, no_progress_option, set_option
from pipesim.cli.output import (
    FIGURE_SUFFIXES,
    Output,
    UserError,
    check_outputs,
    figure_bytes,
    note,
    suffix_of,
    user_errors,
    write_outputs,
)
from pipesim.cli.plan import plan_command
from pipesim.cli.progress import open_ended_bar, progress_bar
from pipesim.cli.render import (
    RENDERERS,
    SWEEP_SUFFIXES,
    frame_bytes,
    render_compare,
    render_explanation,
    render_sweep_table,
)
from pipesim.cli.serve import serve, sweep_functions
from pipesim.plot.figures import gantt_figure, stacked_gantt_figure, sweep_figure
from pipesim.scenario.build import apply_overrides, load_scenario, read_mapping
from pipesim.schedules import list_schedules
from pipesim.schedules.torch_csv import to_torch_csv
from pipesim.search import AUTO_POLICIES, SUMMARIES
from pipesim.sim.decode import row_names
from pipesim.sim.export import to_chrome_trace
from pipesim.sim.export import to_csv as trace_to_csv

# ---------------------------------------------------------------------------
# Commands


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pipesim")
def main() -> None:
    """Simulate pipeline-parallel schedules and show where the time goes."""


runs_option = click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=None,
    help="Monte Carlo: simulate this many random steps under the scenario's variability.",
)
seed_option = click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the Monte Carlo study."
)


@main.command()
@click.argument("scenario")
@set_option
@click.option(
    "--format", "fmt", type=click.Choice(list(RENDERERS)), default="table", show_default=True
)
@click.option(
    "-o", "--output", default="-", metavar="PATH|-", help="Write the report here (default: stdout)."
)
@click.option(
    "--gantt", metavar="PATH", help="Gantt chart (.png, .svg, .pdf); memory over time under it."
)
@click.option(
    "--trace", "trace_path", metavar="PATH", help="Chrome trace JSON for Perfetto (.json)."
)
@click.option("--trace-csv", metavar="PATH", help="Every action and transfer with times, as CSV.")
@click.option(
    "--schedule-csv", metavar="PATH", help="Export the schedule in torch's compute-only CSV format."
)
@runs_option
@seed_option
@click.option(
    "--critical-path",
    is_flag=True,
    help="Add the critical path and idle time per cause to the report; outline it on --gantt.",
)
@evaluator_option
@no_progress_option
@user_errors
def run(
    scenario,
    overrides,
    fmt,
    output,
    gantt,
    trace_path,
    trace_csv,
    schedule_csv,
    runs,
    seed,
    critical_path,
    evaluator,
    no_progress,
) -> None:
    """Simulate SCENARIO and print its report.

    With --runs N, also run a Monte Carlo study of N random steps under the scenario's
    variability section and report makespan and bubble fraction percentiles (p50, p90,
    p99); the same --seed gives the same output.
    """
    check_outputs(
        Output("-o", output, stdout=True),
        Output("--gantt", gantt, FIGURE_SUFFIXES),
        Output("--trace", trace_path, (".json",)),
        Output("--trace-csv", trace_csv, (".csv",)),
        Output("--schedule-csv", schedule_csv, (".csv",)),
    )
    with open_ended_bar("candidate", "schedule search", disabled=no_progress) as searching:
        loaded = load_scenario(scenario, overrides, searching)
    with progress_bar(runs or 0, "run", "Monte Carlo", disabled=no_progress) as progress:
        result = run_scenario(
            loaded,
            runs=runs,
            seed=seed,
            critical_path=critical_path,
            progress=progress,
            evaluator=evaluator,
        )
    for text in result.notes:
        note(text)
    files = _run_files(result, gantt, trace_path, trace_csv, schedule_csv)
    write_outputs([*files, (output, RENDERERS[fmt](result))])


def _run_files(
    result: Result, gantt, trace_path, trace_csv, schedule_csv
) -> list[tuple[str | None, str | bytes]]:
    """Every extra output of ``run``, rendered in memory (nothing written yet)."""
    files: list[tuple[str | None, str | bytes]] = []
    if gantt:
        path = result.explanation.critical_path if result.explanation is not None else None
        accounting = result.scenario.accounting
        capacity = accounting.memory_capacity_bytes if accounting is not None else 0.0
        figure = gantt_figure(
            result.trace, result.report, result.memory, path, capacity_bytes=capacity
        )
        files.append((gantt, figure_bytes(figure, suffix_of(gantt))))
    if trace_path:
        label = result.report.scenario or "pipesim"
        names = row_names(result.trace) if result.decode is not None else None  # t3 g1
        chrome = to_chrome_trace(result.trace, label=label, memory=result.memory, names=names)
        files.append((trace_path, json.dumps(chrome)))
    if trace_csv:
        files.append((trace_csv, trace_to_csv(result.trace)))
    if schedule_csv:
        # torch's own row ends, so the file is byte for byte what torch writes
        files.append((schedule_csv, to_torch_csv(result.scenario.schedule).encode()))
    return files


@main.command()
@click.argument("scenario")
@set_option
@user_errors
def validate(scenario, overrides) -> None:
    """Check SCENARIO (schema, schedule constraints, costs) without simulating."""
    loaded = load_scenario(scenario, overrides)
    s = loaded.schedule
    click.echo(
        f"{scenario}: ok - {s.name}, {s.devices} devices, {s.stages} stages, "
        f"{s.microbatches} microbatches, {s.num_actions} actions"
    )


@main.command()
def schedules() -> None:
    """List every schedule policy with its constraints."""
    limit = "pipeline.memory_limit_bytes per device (default: what 1f1b holds)"
    searched = [
        (name, SUMMARIES[name], f"virtual_stages = {chunks}; {limit}")
        for name, chunks in AUTO_POLICIES.items()
    ]
    rows = (
        list_schedules()
        + searched
        + [("csv", "a schedule read from pipeline.schedule_file (torch CSV)", "any valid schedule")]
    )
    width = max(len(name) for name, _, _ in rows)
    for name, summary, constraints in rows:
        click.echo(f"{name:<{width}}  {summary}")
        click.echo(f"{'':<{width}}  constraints: {constraints}")


@main.command()
@click.argument("scenario")
@set_option
@click.option(
    "--schedules",
    "names",
    default=None,
    help="Comma-separated schedule names (default: every policy, and zb-auto and v-auto "
    "when the scenario trains).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "csv"]),
    default="table",
    show_default=True,
)
@click.option("-o", "--output", default="-", metavar="PATH|-")
@click.option(
    "--gantt",
    metavar="PATH",
    help="All Gantt charts stacked on one figure with a shared time axis.",
)
@runs_option
@seed_option
@evaluator_option
@no_progress_option
@user_errors
def compare(
    scenario, overrides, names, fmt, output, gantt, runs, seed, evaluator, no_progress
) -> None:
    """Run SCENARIO under several schedules and compare them side by side.

    Each schedule runs at the virtual stages it needs; hand-typed costs are per chunk, so
    they are scaled to keep the work the same (a note on stderr says so). The searched
    policies (zb-auto, v-auto) show the memory limit they searched under, the peak they
    reached and the candidates they tried. With --runs N
    each schedule also runs a Monte Carlo study under the variability section, and the
    schedules are ranked by p50 makespan, then p99.
    """
    wanted = None if names is None else [n.strip() for n in names.split(",") if n.strip()]
    if wanted is not None and not wanted:
        raise UserError(f"--schedules {names!r}: names no schedule; e.g. --schedules gpipe,1f1b")
    check_outputs(Output("-o", output, stdout=True), Output("--gantt", gantt, FIGURE_SUFFIXES))
    base = apply_overrides(read_mapping(scenario), list(overrides))
    if isinstance(base.get("pipeline"), dict) and base["pipeline"].get("mode") == "decode":
        raise UserError(
            f"{scenario}: pipeline.mode: decode runs one fixed schedule, nothing to compare; "
            "sweep it instead (pipesim sweep SCENARIO --grid pipeline.microbatches=1,2,4)"
        )
    total = len(wanted or default_schedules(base)) * (runs or 0)
    with progress_bar(total, "run", "Monte Carlo", disabled=no_progress) as progress:
        try:
            comparison = compare_schedules(
                base,
                scenario,
                wanted,
                runs=runs,
                seed=seed,
                progress=progress,
                evaluator=evaluator,
            )
        except CompareError as exc:
            raise UserError(f"--schedules: {exc}") from None
    _compare_notes(comparison)
    files: list[tuple[str | None, str | bytes]] = []
    if gantt and comparison.results:
        pairs = [(r.trace, r.report) for r in comparison.results]
        files.append((gantt, figure_bytes(stacked_gantt_figure(pairs), suffix_of(gantt))))
    elif gantt:
        note(f"--gantt {gantt}: not written, no schedule ran")
    write_outputs([*files, (output, render_compare(comparison, fmt))])


def _compare_notes(comparison: Comparison) -> None:
    """One note per rescaling: which schedules ran their hand-typed costs scaled."""
    by_note: dict[str, list[str]] = {}
    for row in comparison.rescaled:
        by_note.setdefault(row.note, []).append(row.schedule)
    for text, schedules in by_note.items():
        note(
            f"{', '.join(schedules)}: {text}: hand-typed costs are per chunk, so they were "
            "scaled to keep the work the same"
        )


# ---------------------------------------------------------------------------
# Sweeps and explanations


@main.command()
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
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Local worker processes (default: one per CPU).",
)
@click.option(
    "--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True
)
@click.option("--scheduler", metavar="tcp://HOST:PORT", help="Dask scheduler (--executor dask).")
@click.option(
    "-o", "--output", metavar="PATH", help="Write the table (.csv, .parquet, .json); else print it."
)
@click.option("--plot", "plot_path", metavar="PATH", help="Sweep figure (.png, .svg, .pdf).")
@no_progress_option
@user_errors
def sweep(
    scenario, overrides, grids, jobs, executor, scheduler, output, plot_path, no_progress
) -> None:
    """Run SCENARIO for every combination of the --grid values, in parallel.

    One row per point: the grid keys, the report's scalar fields, and an error column
    (a point that cannot run is a row with its reason, never an aborted sweep).
    """
    check_outputs(
        Output("-o", output, SWEEP_SUFFIXES), Output("--plot", plot_path, FIGURE_SUFFIXES)
    )
    if output and suffix_of(output) == ".parquet" and not _has_parquet():
        raise UserError(
            f"-o {output}: writing parquet needs pyarrow: pip install 'pipesim[parquet]'"
        )
    axes = parse_grid(grids)
    base = apply_overrides(read_mapping(scenario), list(overrides))
    total = math.prod(len(axis.raw) for axis in axes)
    runner, figure, table = sweep_functions(base, run_sweep, sweep_figure, render_sweep_table)
    with progress_bar(total, "point", "sweep", disabled=no_progress) as progress:
        frame = runner(
            base,
            scenario,
            axes,
            jobs=jobs or os.cpu_count() or 1,
            executor=executor,
            scheduler=scheduler,
            progress=progress,
        )
    files: list[tuple[str | None, str | bytes]] = []
    if plot_path:
        files.append((plot_path, figure_bytes(figure(frame), suffix_of(plot_path))))
    if output:
        files.append((output, frame_bytes(frame, suffix_of(output))))
    else:
        files.append(("-", table(frame)))
    write_outputs(files)


def _has_parquet() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


@main.command()
@click.argument("scenario")
@set_option
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--max-gaps",
    type=click.IntRange(min=0),
    default=40,
    show_default=True,
    help="Sentences to print per device at most (text format).",
)
@click.option("-o", "--output", default="-", metavar="PATH|-")
@user_errors
def explain(scenario, overrides, fmt, max_gaps, output) -> None:
    """Say where SCENARIO's time goes: the critical path, and why each device idles."""
    check_outputs(Output("-o", output, stdout=True))
    result = explain_scenario(load_scenario(scenario, overrides))
    if fmt == "json":
        text = json.dumps(result.explanation.to_dict(), indent=2) + "\n"
    else:
        text = render_explanation(result, max_gaps)
    write_outputs([(output, text)])


def _register_calibration() -> None:
    """The calibration commands (profile, import-trace, crosscheck, fit) need torch only
    when they run, so they are always listed."""

    for command in COMMANDS:
        main.add_command(command)


_register_calibration()
main.add_command(plan_command)
main.add_command(serve)


if __name__ == "__main__":  # pragma: no cover
    main()
