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
@user_errors
def run(scenario, overrides, fmt, output, gantt, trace_path, trace_csv, schedule_csv) -> None:
    """Simulate SCENARIO and print its report."""
    check_suffix(gantt, "--gantt", (".png", ".svg", ".pdf"))
    check_suffix(trace_path, "--trace", (".json",))
    check_suffix(trace_csv, "--trace-csv", (".csv",))
    check_suffix(schedule_csv, "--schedule-csv", (".csv",))
    result = run_scenario(load_scenario(scenario, overrides))
    text = RENDERERS[fmt](result.report)
    write_outputs(result, gantt, trace_path, trace_csv, schedule_csv)
    write_text(output, text)


def write_outputs(result: Result, gantt, trace_path, trace_csv, schedule_csv) -> None:
    if gantt:
        from pipesim.plot import gantt_figure, save_figure

        figure = gantt_figure(result.trace, result.report)
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
@user_errors
def compare(scenario, overrides, names, fmt, output, gantt) -> None:
    """Run SCENARIO under several schedules and compare them side by side."""
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
    lines = [
        f"{'schedule':<{width}}  {'makespan ms':>12} {'bubble':>8} {'span bubble':>12} {'samples/s':>12}  peak activations per device"
    ]
    for row in rows:
        if row.get("error"):
            lines.append(f"{row['schedule']:<{width}}  not run: {row['error']}")
            continue
        peaks = " ".join(_bytes(v) for v in row["peak_activation_bytes"])
        lines.append(
            f"{row['schedule']:<{width}}  {row['makespan_ms']:>12.3f} {row['bubble_fraction']:>8.4f} "
            f"{row['span_bubble_rate']:>12.4f} {row['samples_per_second']:>12.1f}  {peaks}"
            + (f"  ({row['note']})" if row["note"] else "")
        )
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
