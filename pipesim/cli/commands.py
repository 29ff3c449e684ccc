"""The ``pipesim`` command line. It renders Reports; it never computes them.

User mistakes (bad file, unknown key, impossible combination) print one line
``pipesim: error: FILE: FIELD: what is allowed`` on stderr and exit with code 2; no
output file is written unless the whole run succeeded (files are written to a
temporary name and renamed).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import click

from pipesim.analysis.critical import explain as explain_trace
from pipesim.analysis.critical import with_critical_path
from pipesim.analysis.monte_carlo import with_monte_carlo
from pipesim.analysis.run import Result, run_scenario, study
from pipesim.analysis.sweep import SweepError, parse_grid, run_sweep
from pipesim.cli.calibrate import COMMANDS
from pipesim.cli.output import UserError, check_suffix, user_errors, write_atomic, write_text
from pipesim.cli.render import RENDERERS, compare_row, rank_rows, render_compare, render_explanation
from pipesim.plot.figures import gantt_figure, save_figure, stacked_gantt_figure, sweep_figure
from pipesim.scenario.build import (
    ScenarioError,
    apply_overrides,
    build_scenario,
    load_scenario,
    parse_spec,
    read_mapping,
    with_schedule,
)
from pipesim.schedules import POLICIES, list_schedules
from pipesim.schedules.ir import ScheduleError, to_csv
from pipesim.sim.engine import DeadlockError
from pipesim.sim.export import to_chrome_trace
from pipesim.sim.export import to_csv as trace_to_csv

# ---------------------------------------------------------------------------
# Commands


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pipesim")
def main() -> None:
    """Simulate pipeline-parallel schedules and show where the time goes."""


set_option = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY.PATH=VALUE",
    help="Override a scenario key (value parsed as YAML), e.g. --set pipeline.microbatches=16.",
)
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
@user_errors
def run(
    scenario, overrides, fmt, output, gantt, trace_path, trace_csv, schedule_csv, runs, seed,
    critical_path,
) -> None:  # fmt: skip
    """Simulate SCENARIO and print its report.

    With --runs N, also run a Monte Carlo study of N random steps under the scenario's
    variability section and report makespan and bubble fraction percentiles (p50, p90,
    p99); the same --seed gives the same output.
    """
    check_suffix(gantt, "--gantt", (".png", ".svg", ".pdf"))
    check_suffix(trace_path, "--trace", (".json",))
    check_suffix(trace_csv, "--trace-csv", (".csv",))
    check_suffix(schedule_csv, "--schedule-csv", (".csv",))
    result = run_scenario(load_scenario(scenario, overrides))
    path = None
    if critical_path:
        scn = result.scenario
        explanation = explain_trace(result.trace, scn.schedule, scn.topology)
        path = explanation.critical_path
        result = replace(result, report=with_critical_path(result.report, explanation))
    if runs is not None:
        monte_carlo = study(result.scenario, runs, seed)
        result = replace(result, report=with_monte_carlo(result.report, monte_carlo))
    text = RENDERERS[fmt](result.report)
    write_outputs(result, gantt, trace_path, trace_csv, schedule_csv, path)
    write_text(output, text)


def write_outputs(
    result: Result, gantt, trace_path, trace_csv, schedule_csv, critical_path=None
) -> None:
    if gantt:
        if critical_path is None:
            figure = gantt_figure(result.trace, result.report, result.memory)
        else:
            figure = gantt_figure(
                result.trace, result.report, result.memory, critical_path=critical_path
            )
        write_atomic(gantt, lambda tmp: save_figure(figure, tmp))
    if trace_path:
        chrome = to_chrome_trace(
            result.trace, label=result.report.scenario or "pipesim", memory=result.memory
        )
        write_text(trace_path, json.dumps(chrome))
    if trace_csv:
        write_text(trace_csv, trace_to_csv(result.trace))
    if schedule_csv:
        write_text(schedule_csv, to_csv(result.scenario.schedule))


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
    rows = list_schedules() + [
        ("csv", "a schedule read from pipeline.schedule_file (torch CSV)", "any valid schedule")
    ]
    width = max(len(name) for name, _, _ in rows)
    for name, summary, constraints in rows:
        click.echo(f"{name:<{width}}  {summary}")
        click.echo(f"{'':<{width}}  constraints: {constraints}")


@main.command()
@click.argument("scenario")
@set_option
@click.option("--schedules", "names", required=True, help="Comma-separated schedule names.")
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
@user_errors
def compare(scenario, overrides, names, fmt, output, gantt, runs, seed) -> None:
    """Run SCENARIO under several schedules and compare them side by side.

    With --runs N each schedule also runs a Monte Carlo study under the variability section,
    and the schedules are ranked by p50 makespan, then p99.
    """
    check_suffix(gantt, "--gantt", (".png", ".svg", ".pdf"))
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in POLICIES]
    if unknown:
        raise UserError(
            f"--schedules: unknown schedule {unknown[0]!r}; allowed: {', '.join(POLICIES)}"
        )
    base = apply_overrides(read_mapping(scenario), list(overrides))
    rows, results = [], []
    for name in wanted:
        try:
            data, note = with_schedule(base, name)
            result = run_scenario(build_scenario(parse_spec(data, scenario), scenario))
        except (ScenarioError, ScheduleError, DeadlockError) as exc:
            reason = str(exc).splitlines()[0].removeprefix(f"{scenario}: ")
            rows.append({"schedule": name, "error": reason})
            continue
        results.append((result.trace, result.report))
        rows.append(compare_row(result.report, note))
        if runs is not None:
            rows[-1].update(study(result.scenario, runs, seed).summary())
    if runs is not None:
        rows = rank_rows(rows)
    if gantt and results:
        figure = stacked_gantt_figure(results)
        write_atomic(gantt, lambda tmp: save_figure(figure, tmp))
    write_text(output, render_compare(rows, fmt))


# ---------------------------------------------------------------------------
# Sweeps and explanations

_SWEEP_SUFFIXES = (".csv", ".parquet", ".json")


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
@click.option("--no-progress", is_flag=True, help="No progress bar on stderr.")
@user_errors
def sweep(
    scenario, overrides, grids, jobs, executor, scheduler, output, plot_path, no_progress
) -> None:
    """Run SCENARIO for every combination of the --grid values, in parallel.

    One row per point: the grid keys, the report's scalar fields, and an error column
    (a point that cannot run is a row with its reason, never an aborted sweep).
    """

    check_suffix(output, "-o", _SWEEP_SUFFIXES)
    check_suffix(plot_path, "--plot", (".png", ".svg", ".pdf"))
    if output and output.lower().endswith(".parquet") and not _has_parquet():
        raise UserError(
            f"-o {output}: writing parquet needs pyarrow: pip install 'pipesim[parquet]'"
        )
    try:
        axes = parse_grid(grids)
        base = apply_overrides(read_mapping(scenario), list(overrides))
        with _progress_bar(no_progress, axes) as progress:
            frame = run_sweep(
                base, scenario, axes, jobs=jobs or os.cpu_count() or 1, executor=executor,
                scheduler=scheduler, progress=progress,
            )  # fmt: skip
    except SweepError as exc:
        raise UserError(str(exc)) from None
    if plot_path:
        figure = sweep_figure(frame)
        write_atomic(plot_path, lambda tmp: save_figure(figure, tmp))
    if output:
        write_atomic(output, lambda tmp: _write_frame(frame, tmp, output))
    else:
        click.echo(frame.to_string(index=False))


def _has_parquet() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def _write_frame(frame, tmp: str, target: str) -> None:
    suffix = Path(target).suffix.lower()
    if suffix == ".parquet":
        frame.to_parquet(tmp, index=False)
    elif suffix == ".json":
        Path(tmp).write_text(
            frame.to_json(orient="records", indent=2, double_precision=15) + "\n",
            encoding="utf-8",
        )
    else:
        frame.to_csv(tmp, index=False)


class _NoBar:
    def __enter__(self):
        return None

    def __exit__(self, *exc) -> None:
        return None


def _progress_bar(disabled: bool, axes):
    """tqdm on stderr, only when stderr is a terminal; else no callback at all."""
    if disabled or not sys.stderr.isatty():
        return _NoBar()
    import math

    from tqdm import tqdm

    class _Bar:
        def __enter__(self):
            total = math.prod(len(axis.raw) for axis in axes)
            self.bar = tqdm(total=total, unit="point", file=sys.stderr, desc="sweep")
            return self.bar.update

        def __exit__(self, *exc) -> None:
            self.bar.close()

    return _Bar()


@main.command()
@click.argument("scenario")
@set_option
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option("--max-gaps", type=click.IntRange(min=0), default=40, show_default=True,
              help="Sentences to print per device at most (text format).")  # fmt: skip
@click.option("-o", "--output", default="-", metavar="PATH|-")
@user_errors
def explain(scenario, overrides, fmt, max_gaps, output) -> None:
    """Say where SCENARIO's time goes: the critical path, and why each device idles."""

    result = run_scenario(load_scenario(scenario, overrides))
    scn = result.scenario
    explanation = explain_trace(result.trace, scn.schedule, scn.topology)
    if fmt == "json":
        write_text(output, json.dumps(explanation.to_dict(), indent=2) + "\n")
        return
    write_text(output, render_explanation(result.report, explanation, max_gaps))


def _register_calibration() -> None:
    """The calibration commands (profile, import-trace, crosscheck, fit) need torch only
    when they run, so they are always listed."""

    for command in COMMANDS:
        main.add_command(command)


_register_calibration()


if __name__ == "__main__":  # pragma: no cover
    main()
