"""Click commands of the calibration workflow: profile, import-trace, crosscheck, fit.

``pipesim.cli`` registers them on its ``main`` group. User mistakes print one line
``pipesim: error: ...`` on stderr and exit with code 2; every output path is checked
before anything runs, and files are written by ``pipesim.cli.output``'s rules (whole or
not at all, devices and FIFOs in place). torch is imported only when a command needs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import click

from pipesim.calibrate.crosscheck import measured_costs
from pipesim.calibrate.fit import fit_host, timeline
from pipesim.calibrate.harness import HarnessError, cuda_links, gloo_link, profile_stages
from pipesim.calibrate.ops import StageSpec
from pipesim.calibrate.realrun import MeasuredRun, RealRunError
from pipesim.calibrate.suite import check_schedules, other_schedules
from pipesim.calibrate.trace_import import (
    TraceImportError,
    import_traces,
    profile_from_spans,
    trace_from_spans,
)
from pipesim.cli.options import WholeNumber, set_option
from pipesim.cli.output import (
    FIGURE_SUFFIXES,
    Output,
    check_folder,
    check_outputs,
    scenario_inputs,
    user_errors,
    write_outputs,
)
from pipesim.cli.render.calibrate import (
    crosscheck_files,
    crosscheck_text,
    fit_summary,
    import_summary,
    profile_summary,
    profile_text,
    timeline_files,
)
from pipesim.scenario.build import load_scenario
from pipesim.scenario.profile import (
    HostOverhead,
    Profile,
    ProfileError,
    Spread,
    StageTiming,
    costs_from_profile,
    load_profile,
)


class CalibrationError(Exception):
    """Bad input to a calibration command (one line)."""


def _user_errors(command: Callable) -> Callable:
    """pipesim's one-line error contract, plus the calibration modules' own errors."""

    return user_errors(
        command,
        also=(CalibrationError, ProfileError, TraceImportError, RealRunError, HarnessError),
    )


TORCH_PIN = "torch==2.13.0"  # unpinned, pip pulls several GB of CUDA packages


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise CalibrationError(f"this command needs torch: pip install {TORCH_PIN}") from None


def _count_option(name: str, default: int, help_text: str):
    return click.option(
        name, type=WholeNumber(min=1), default=default, show_default=True, help=help_text
    )


# Shapes of real stages, for scenarios without a model section.
_SHAPE_OPTIONS = [
    _count_option("--hidden", 256, "Stage width."),
    _count_option("--layers", 2, "Layers per stage."),
    _count_option("--batch", 8, "Samples per microbatch."),
    _count_option("--seq", 128, "Tokens (transformer)."),
    _count_option("--heads", 4, "Heads (transformer)."),
    click.option(
        "--dtype",
        type=click.Choice(["float32", "float16", "bfloat16"]),
        default="float32",
        show_default=True,
        help="Element type of the stages' weights and activations.",
    ),
]


def _shape_options(command: Callable) -> Callable:
    for option in reversed(_SHAPE_OPTIONS):
        command = option(command)
    return command


def stage_specs(scenario, ops: str, shapes: dict) -> list[StageSpec]:
    """One StageSpec per model stage: the scenario's costs as sleeps, or real layers."""
    stages = scenario.schedule.model_stages
    costs = scenario.costs
    try:
        if ops == "synthetic":
            return [
                StageSpec(
                    "synthetic",
                    hidden=16,
                    batch=1,
                    forward_ms=costs.forward_ms[s],
                    backward_input_ms=costs.backward_input_ms[s],
                    backward_weight_ms=costs.backward_weight_ms[s],
                )
                for s in range(stages)
            ]
        kind = "transformer" if ops == "transformer" else "mlp"
        return [StageSpec(kind, **shapes)] * stages
    except ValueError as exc:
        raise CalibrationError(str(exc)) from None


# ---------------------------------------------------------------------------
# profile


@click.command("profile")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, help="Profile file to write (.json).")
@set_option
@click.option(
    "--ops",
    type=click.Choice(["mlp", "transformer", "synthetic"]),
    default="mlp",
    show_default=True,
    help="Stage computation: MLP or GPT blocks at the given shapes, or sleeps of the scenario's costs.",
)
@_shape_options
@click.option(
    "--repeats",
    type=WholeNumber(min=20),
    default=20,
    show_default=True,
    help="Timed repetitions of each action (at least 20, for stable percentiles).",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="Where the stages run (auto: CUDA when available).",
)
@click.option(
    "--links/--no-links", default=True, show_default=True, help="Time point-to-point transfers."
)
@_user_errors
def profile_command(scenario, output, overrides, ops, repeats, device, links, **shapes) -> None:
    """Time each stage's F, I, W and B (and the links) and write a profile file."""
    check_outputs(Output("-o", output, (".json",)), inputs=scenario_inputs(scenario, overrides))
    _require_torch()
    import torch

    loaded = load_scenario(scenario, list(overrides))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise CalibrationError("--device cuda: no CUDA device is available")
    specs = stage_specs(loaded, ops, shapes)
    result = profile_stages(specs, repeats=repeats, device=device)
    if links:
        fits = tuple(cuda_links()) if device == "cuda" else (gloo_link(),)
        result = replace(result, links=fits)
    result = replace(result, provenance={**result.provenance, "scenario": str(scenario)})
    write_outputs([(output, profile_text(result)), ("-", profile_summary(result))])


# ---------------------------------------------------------------------------
# import-trace


@click.command("import-trace")
@click.argument("traces", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, help="Profile file to write (.json).")
@click.option(
    "--timeline", default=None, help="Also write the measured timeline as a Perfetto trace (.json)."
)
@click.option("--timeline-csv", default=None, help="Also write the measured timeline as CSV.")
@_user_errors
def import_trace_command(traces, output, timeline, timeline_csv) -> None:
    """Read PyTorch profiler traces (one per rank) of a real pipeline run into a profile."""

    check_outputs(
        Output("-o", output, (".json",)),
        Output("--timeline", timeline, (".json",)),
        Output("--timeline-csv", timeline_csv, (".csv",)),
        inputs=traces,
    )
    spans = import_traces(list(traces))
    result = profile_from_spans(spans, {"traces": [str(t) for t in traces]})
    measured = trace_from_spans(spans)
    write_outputs(
        [
            (output, profile_text(result)),
            *timeline_files(measured, timeline, timeline_csv),
            ("-", import_summary(len(spans), len(traces), measured, result)),
        ]
    )


# ---------------------------------------------------------------------------
# crosscheck


@click.command("crosscheck")
@click.argument("scenario", type=click.Path(dir_okay=False))
@set_option
@click.option(
    "--runs",
    type=WholeNumber(min=1),
    default=5,
    show_default=True,
    help="Timed runs per schedule.",
)
@click.option(
    "--ops",
    type=click.Choice(["real", "synthetic"]),
    default="real",
    show_default=True,
    help="Run real layers (see --real-ops), or sleeps of the scenario's own costs.",
)
@click.option(
    "--real-ops",
    type=click.Choice(["mlp", "transformer"]),
    default="mlp",
    show_default=True,
    help="With --ops real: MLP or GPT blocks at the given shapes.",
)
@_shape_options
@click.option(
    "--profile",
    "profile_path",
    default=None,
    help="Predict from this profile instead of timing ops now.",
)
@click.option(
    "--schedules", default=None, help="Comma-separated schedules to rank alongside the scenario's."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="Print the errors as a table, or as JSON with every figure.",
)
@click.option(
    "--trace", "trace_path", default=None, help="Perfetto trace, measured and simulated (.json)."
)
@click.option("--gantt", default=None, help="Comparison Gantt chart (.png, .svg, .pdf).")
@click.option(
    "--save-runs",
    default=None,
    type=click.Path(file_okay=False),
    help="Folder for the raw runs (for fit).",
)
@_user_errors
def crosscheck_command(
    scenario,
    overrides,
    runs,
    ops,
    real_ops,
    profile_path,
    schedules,
    fmt,
    trace_path,
    gantt,
    save_runs,
    **shapes,
) -> None:
    """Run the scenario's schedule for real, simulate it, and report the errors."""
    check_outputs(
        Output("--trace", trace_path, (".json",)),
        Output("--gantt", gantt, FIGURE_SUFFIXES),
        inputs=(*scenario_inputs(scenario, overrides), profile_path),
    )
    check_folder("--save-runs", save_runs)
    _require_torch()

    loaded = load_scenario(scenario, list(overrides))
    specs = stage_specs(loaded, "synthetic" if ops == "synthetic" else real_ops, shapes)
    profile = load_profile(profile_path) if profile_path else None
    names = [s.strip() for s in schedules.split(",") if s.strip()] if schedules else []
    plan = [loaded.schedule] + other_schedules(loaded.schedule, names)
    outcome = check_schedules(plan, specs, runs=runs, profile=profile, save_runs=save_runs)
    files = crosscheck_files(outcome, trace_path, gantt)
    write_outputs([*files, ("-", crosscheck_text(outcome, fmt))])


# ---------------------------------------------------------------------------
# fit


@click.command("fit")
@click.argument("runs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, help="Profile file to write (.json).")
@click.option(
    "--profile",
    "base",
    default=None,
    help="Profile to add the host fit to (else op medians of the runs).",
)
@_user_errors
def fit_command(runs, output, base) -> None:
    """Fit per-action host overhead and per-hop cost from saved real runs (crosscheck --save-runs)."""
    check_outputs(Output("-o", output, (".json",)), inputs=(*runs, base))
    measured = []
    for path in runs:
        try:
            measured.append(MeasuredRun.read(path))
        except FileNotFoundError:
            raise CalibrationError(f"{path}: no such run file") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise CalibrationError(f"{path}: not a pipesim run file ({exc})") from None
    if base:
        profile = load_profile(base)
        stages = timeline(measured[0]).schedule.model_stages
        host: HostOverhead = fit_host(
            measured, costs_from_profile(replace(profile, host=None), stages)
        )
        result = replace(profile, host=host)
    else:
        host = fit_host(measured)  # the op medians come from these runs: scale 1
        lines = [timeline(run) for run in measured]
        costs = measured_costs(lines)
        timings = tuple(
            StageTiming(
                s,
                {
                    k: Spread(
                        getattr(costs, f)[s], getattr(costs, f)[s], getattr(costs, f)[s], len(lines)
                    )
                    for k, f in (
                        ("F", "forward_ms"),
                        ("B", "backward_ms"),
                        ("I", "backward_input_ms"),
                        ("W", "backward_weight_ms"),
                    )
                },
            )
            for s in range(costs.stages)
        )
        result = Profile(timings, (), host, {"source": "pipesim fit", "runs": list(runs)})
    write_outputs([(output, profile_text(result)), ("-", fit_summary(host, len(measured)))])


COMMANDS = (profile_command, import_trace_command, crosscheck_command, fit_command)
