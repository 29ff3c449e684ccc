"""The ``pipesim`` command line. It renders Reports; it never computes them.

User mistakes (bad file, unknown key, impossible combination) print one line
``pipesim: error: FILE: FIELD: what is allowed`` on stderr and exit with code 2; no
output file is written unless the whole run succeeded (files are written to a
temporary name and renamed).
"""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import click

from pipesim.engine import DeadlockError
from pipesim.metrics import Report
from pipesim.run import Result, run_scenario
from pipesim.scenario import (
    ScenarioError,
    apply_overrides,
    build_scenario,
    load_scenario,
    parse_spec,
    read_mapping,
)
from pipesim.schedules import POLICIES, fit_virtual_stages, list_schedules
from pipesim.schedules.ir import ScheduleError, to_csv
from pipesim.trace import to_chrome_trace
from pipesim.trace import to_csv as trace_to_csv

EXIT_USAGE = 2


class UserError(Exception):
    """Bad input: reported as one line, exit code 2."""


def user_errors(command: Callable) -> Callable:
    """Turn every user mistake into one line on stderr and exit code 2."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (UserError, ScenarioError, ScheduleError, DeadlockError) as exc:
            text = str(exc)
            head, _, rest = text.partition("\n")
            click.echo(f"pipesim: error: {head}", err=True)
            if rest:
                click.echo(rest, err=True)  # the step x rank grid with the bad entry marked
            sys.exit(EXIT_USAGE)

    return wrapper


# ---------------------------------------------------------------------------
# Output files: whole or not at all


def write_atomic(path: str, write: Callable[[str], None]) -> None:
    """Call ``write(tmp_path)``, then move the finished file into place."""
    target = Path(path)
    if target.parent and not target.parent.exists():
        raise UserError(f"{path}: directory {target.parent} does not exist")
    fd, tmp = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=target.suffix, dir=target.parent or "."
    )
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str, text: str) -> None:
    if path == "-":
        click.echo(text, nl=not text.endswith("\n"))
        return
    write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def check_suffix(path: str | None, option: str, allowed: tuple[str, ...]) -> None:
    if path is not None and path != "-" and Path(path).suffix.lower() not in allowed:
        raise UserError(f"{option} {path}: unsupported file type; allowed: {', '.join(allowed)}")


# ---------------------------------------------------------------------------
# Rendering


def render_table(report: Report) -> str:
    lines = [f"pipesim - {report.scenario}", ""]
    analytic = report.analytic or {}

    def line(label: str, value: str, key: str | None = None, fmt: str = "{:.4f}") -> None:
        extra = f"   (analytic {fmt.format(analytic[key])})" if key in analytic else ""
        lines.append(f"  {label:<18}{value}{extra}")

    line("schedule", report.schedule)
    line("devices", f"{report.devices}   stages {report.stages}")
    line("microbatches", f"{report.microbatches} x {report.microbatch_size} samples")
    line("makespan", f"{report.makespan_ms:.3f} ms", "makespan_ms", "{:.3f} ms")
    line("bubble fraction", f"{report.bubble_fraction:.4f}", "bubble_fraction")
    line("bubble overhead", f"{report.bubble_overhead:.4f}", "bubble_overhead")
    line("span bubble rate", f"{report.span_bubble_rate:.4f}")
    line("throughput", f"{report.samples_per_second:,.1f} samples/s")
    if report.tokens_per_second:
        line("", f"{report.tokens_per_second:,.0f} tokens/s")
    if "makespan_ms_p50" in report.extra:
        extra = report.extra
        runs = f"({extra['monte_carlo_runs']} runs, seed {extra['monte_carlo_seed']})"
        lines.append("")
        lines.append(f"  Monte Carlo {runs}        p50        p90        p99")
        for label, key, fmt in (("makespan ms", "makespan_ms", "{:>10.3f}"),
                                ("bubble fraction", "bubble_fraction", "{:>10.4f}")):  # fmt: skip
            values = " ".join(fmt.format(extra[f"{key}_p{p}"]) for p in (50, 90, 99))
            lines.append(f"  {label:<18}{' ' * 10}{values}")
    if report.mfu is not None:
        line("MFU", f"{report.mfu:.1%}")
    if any(d.static_memory_bytes for d in report.per_device):
        worst = max(report.per_device, key=lambda d: d.peak_memory_bytes)
        verdict = "OUT OF MEMORY" if report.oom else "fits"
        line(
            "peak memory", f"{_bytes(worst.peak_memory_bytes)} on device {worst.device} ({verdict})"
        )
    lines.append("")
    header = f"  {'device':>6} {'busy ms':>10} {'idle ms':>10} {'span ms':>10} {'bubble':>8} {'peak in-flight':>15} {'peak activations':>18} {'at ms':>9}"
    lines.append(header)
    with_static = any(d.static_memory_bytes for d in report.per_device)
    if with_static:
        lines[-1] += f" {'static':>12} {'peak total':>12}"
    for d in report.per_device:
        static = (
            f" {_bytes(d.static_memory_bytes):>12} {_bytes(d.peak_memory_bytes):>12}"
            if with_static
            else ""
        )
        oom = "  OOM" if d.oom else ""
        lines.append(
            f"  {d.device:>6} {d.busy_ms:>10.3f} {d.idle_ms:>10.3f} {d.span_ms:>10.3f} "
            f"{d.bubble_fraction:>8.4f} {d.peak_inflight:>15d} {_bytes(d.peak_activation_bytes):>18} "
            f"{d.peak_activation_time_ms:>9.3f}" + static + oom
        )
    return "\n".join(lines) + "\n"


def _bytes(value: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"


def render_csv(report: Report) -> str:
    """One row per device: the report's scalar fields, then the device's own fields."""
    scalars = {k: v for k, v in report.to_dict().items() if not isinstance(v, list | dict)}
    buffer = io.StringIO()
    rows = [
        {
            **scalars,
            **{
                f"device_{k}" if k == "bubble_fraction" else k: v
                for k, v in _device_dict(d).items()
            },
        }
        for d in report.per_device
    ]
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _device_dict(device) -> dict:
    from dataclasses import asdict

    return asdict(device)


RENDERERS = {"table": render_table, "json": render_json, "csv": render_csv}


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
        from pipesim.critical import explain, with_critical_path

        scn = result.scenario
        explanation = explain(result.trace, scn.schedule, scn.topology)
        path = explanation.critical_path
        result = replace(result, report=with_critical_path(result.report, explanation))
    if runs is not None:
        from pipesim.variability import study, with_monte_carlo

        monte_carlo = study(result.scenario, runs, seed)
        result = replace(result, report=with_monte_carlo(result.report, monte_carlo))
    text = RENDERERS[fmt](result.report)
    write_outputs(result, gantt, trace_path, trace_csv, schedule_csv, path)
    write_text(output, text)


def write_outputs(
    result: Result, gantt, trace_path, trace_csv, schedule_csv, critical_path=None
) -> None:
    if gantt:
        from pipesim.plot import gantt_figure, save_figure

        if critical_path is None:
            figure = gantt_figure(result.trace, result.report)
        else:
            figure = gantt_figure(result.trace, result.report, critical_path=critical_path)
        write_atomic(gantt, lambda tmp: save_figure(figure, tmp))
    if trace_path:
        chrome = to_chrome_trace(result.trace, label=result.report.scenario or "pipesim")
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
            data, note = _with_schedule(base, name)
            result = run_scenario(build_scenario(parse_spec(data, scenario), scenario))
        except (ScenarioError, ScheduleError, DeadlockError) as exc:
            reason = str(exc).splitlines()[0].removeprefix(f"{scenario}: ")
            rows.append({"schedule": name, "error": reason})
            continue
        results.append((result.trace, result.report))
        rows.append(_compare_row(result.report, note))
        if runs is not None:
            from pipesim.variability import study

            rows[-1].update(study(result.scenario, runs, seed).summary())
    if runs is not None:
        rows = _rank(rows)
    if gantt and results:
        from pipesim.plot import save_figure, stacked_gantt_figure

        figure = stacked_gantt_figure(results)
        write_atomic(gantt, lambda tmp: save_figure(figure, tmp))
    write_text(output, _render_compare(rows, fmt))


_PER_CHUNK_COSTS = (
    "forward_ms",
    "backward_ms",
    "backward_input_ms",
    "backward_weight_ms",
    "overlapped_fb_ms",
    "activation_memory_bytes",
    "weight_grad_memory_bytes",
)


def _with_schedule(base: dict, name: str) -> tuple[dict, str]:
    """The scenario under another schedule, and a note on what had to change.

    When the policy needs another number of virtual stages, the model is cut into that many
    chunks per device instead: scalar per-chunk costs scale by old/new chunks so every
    schedule does the same work. Per-stage cost lists cannot be re-cut: ScenarioError.
    """
    data = json.loads(json.dumps(base))
    data["pipeline"]["schedule"] = name
    old = int(data["pipeline"].get("virtual_stages", 1))
    new = fit_virtual_stages(name, old)
    if new == old:
        return data, ""
    data["pipeline"]["virtual_stages"] = new
    costs = data.setdefault("costs", {})
    for key in _PER_CHUNK_COSTS:
        value = costs.get(key)
        if isinstance(value, list):
            raise ScenarioError(
                f"costs.{key}: per-stage list fits virtual_stages={old}, {name} needs {new}"
            )
        if value is not None:
            costs[key] = value * old / new
    if "forward_ms" not in costs:
        costs["forward_ms"] = old / new
    return data, f"virtual_stages={new}, per-chunk costs x{old}/{new}"


def _compare_row(report: Report, note: str) -> dict:
    return {
        "schedule": report.schedule,
        "makespan_ms": report.makespan_ms,
        "bubble_fraction": report.bubble_fraction,
        "span_bubble_rate": report.span_bubble_rate,
        "samples_per_second": report.samples_per_second,
        "peak_activation_bytes": [d.peak_activation_bytes for d in report.per_device],
        "note": note,
        "error": "",
    }


_STUDY_FIELDS = (
    "rank",
    "makespan_ms_p50",
    "makespan_ms_p90",
    "makespan_ms_p99",
    "bubble_fraction_p50",
    "bubble_fraction_p90",
    "bubble_fraction_p99",
    "monte_carlo_runs",
    "monte_carlo_seed",
)


def _rank(rows: list[dict]) -> list[dict]:
    """Order by p50 makespan, ties by p99 (error rows last), and number the ranks."""
    ran = sorted(
        (r for r in rows if not r.get("error")),
        key=lambda r: (r["makespan_ms_p50"], r["makespan_ms_p99"]),
    )
    for rank, row in enumerate(ran, start=1):
        row["rank"] = rank
    return ran + [r for r in rows if r.get("error")]


def _render_compare(rows: list[dict], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(rows, indent=2) + "\n"
    if fmt == "csv":
        buffer = io.StringIO()
        fields = [
            "schedule",
            "makespan_ms",
            "bubble_fraction",
            "span_bubble_rate",
            "samples_per_second",
            "peak_activation_bytes",
            "note",
            "error",
        ]
        fields[1:1] = [k for k in _STUDY_FIELDS if any(k in r for r in rows)]
        writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {
                    **row,
                    "peak_activation_bytes": ";".join(
                        f"{v:.0f}" for v in row.get("peak_activation_bytes", [])
                    ),
                }
            )
        return buffer.getvalue()
    width = max(len(r["schedule"]) for r in rows)
    study = any("rank" in r for r in rows)
    lines = [
        ("rank  " if study else "")
        + f"{'schedule':<{width}}  {'makespan ms':>12} "
        + (f"{'p50 ms':>10} {'p99 ms':>10} " if study else "")
        + f"{'bubble':>8} {'span bubble':>12} {'samples/s':>12}  peak activations per device"
    ]
    for row in rows:
        if row.get("error"):
            lines.append(
                ("-     " if study else "") + f"{row['schedule']:<{width}}  not run: {row['error']}"
            )
            continue
        peaks = " ".join(_bytes(v) for v in row["peak_activation_bytes"])
        percentiles = (
            f" {row['makespan_ms_p50']:>10.3f} {row['makespan_ms_p99']:>10.3f}" if study else ""
        )
        lines.append(
            (f"{row['rank']:<4}  " if study else "")
            + f"{row['schedule']:<{width}}  {row['makespan_ms']:>12.3f}{percentiles} {row['bubble_fraction']:>8.4f} "
            f"{row['span_bubble_rate']:>12.4f} {row['samples_per_second']:>12.1f}  {peaks}"
            + (f"  ({row['note']})" if row["note"] else "")
        )
    return "\n".join(lines) + "\n"


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
    from pipesim.sweep import SweepError, parse_grid, run_sweep

    check_suffix(output, "-o", _SWEEP_SUFFIXES)
    check_suffix(plot_path, "--plot", (".png", ".svg", ".pdf"))
    if output and output.lower().endswith(".parquet") and not _has_parquet():
        raise UserError(f"-o {output}: writing parquet needs pyarrow: pip install pyarrow")
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
        from pipesim.plot import save_figure, sweep_figure

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
    from pipesim.critical import explain as explain_trace

    result = run_scenario(load_scenario(scenario, overrides))
    scn = result.scenario
    explanation = explain_trace(result.trace, scn.schedule, scn.topology)
    if fmt == "json":
        write_text(output, json.dumps(explanation.to_dict(), indent=2) + "\n")
        return
    write_text(output, _render_explanation(result.report, explanation, max_gaps))


def _render_explanation(report: Report, explanation, max_gaps: int) -> str:
    from pipesim.critical import describe_gap, format_ms

    path = explanation.critical_path
    lines = [
        f"pipesim explain - {report.scenario} ({report.schedule}): "
        f"makespan {format_ms(report.makespan_ms)} ms",
        "",
        f"critical path ({len(path)} steps, 0 to {format_ms(report.makespan_ms)} ms):",
        f"  {'start ms':>10} {'end ms':>10}  device  action",
    ]
    lines += [
        f"  {format_ms(e['start_ms']):>10} {format_ms(e['end_ms']):>10}  {e['device']:>6}  {e['name']}"
        for e in path
    ]
    lines += ["", "idle time per device and cause (ms):"]
    for device, causes in sorted(explanation.idle_by_cause().items()):
        parts = ", ".join(f"{cause} {format_ms(ms)}" for cause, ms in causes.items())
        lines.append(f"  device {device}: {parts}")
    lines += ["", "idle gaps:"]
    shown: dict[int, int] = {}
    for gap in explanation.gaps:
        shown[gap.device] = shown.get(gap.device, 0) + 1
        if shown[gap.device] <= max_gaps:
            lines.append(f"  {describe_gap(gap)}")
    hidden = sum(max(0, n - max_gaps) for n in shown.values())
    if hidden:
        lines.append(f"  ... {hidden} more (raise --max-gaps, or use --format json)")
    return "\n".join(lines) + "\n"


def _register_calibration() -> None:
    """The calibration commands (profile, import-trace, crosscheck, fit) need torch only
    when they run, so they are always listed."""
    from pipesim.calibrate.commands import COMMANDS

    for command in COMMANDS:
        main.add_command(command)


_register_calibration()


if __name__ == "__main__":  # pragma: no cover
    main()
