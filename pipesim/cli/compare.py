"""``pipesim compare``: one scenario under several schedules, side by side.

Parse, call ``pipesim.analysis.compare.compare_schedules``, render
(``pipesim.cli.render.compare``).
"""

from __future__ import annotations

import click

from pipesim.analysis.compare import CompareError, compare_schedules, default_schedules
from pipesim.cli.formats import format_option, output_format
from pipesim.cli.html import check_html, html_option, html_output
from pipesim.cli.options import (
    evaluator_option,
    no_progress_option,
    runs_option,
    seed_option,
    set_option,
)
from pipesim.cli.output import (
    FIGURE_SUFFIXES,
    Output,
    UserError,
    check_outputs,
    note,
    nothing_ran,
    scenario_inputs,
    user_errors,
    write_outputs,
)
from pipesim.cli.progress import progress_bar
from pipesim.cli.render.compare import compare_files, compare_notes, render_compare
from pipesim.scenario.build import apply_overrides, read_mapping

FORMATS = ("table", "json", "csv")


@click.command("compare")
@click.argument("scenario")
@set_option
@click.option(
    "--schedules",
    "names",
    default=None,
    help="Comma-separated schedule names (default: every policy, and zb-auto and v-auto "
    "when the scenario trains).",
)
@format_option(FORMATS)
@click.option("-o", "--output", default="-", metavar="PATH|-")
@click.option(
    "--gantt",
    metavar="PATH",
    help="All Gantt charts stacked on one figure with a shared time axis.",
)
@html_option
@runs_option
@seed_option
@evaluator_option
@no_progress_option
@user_errors
def compare_command(
    scenario, overrides, names, fmt, output, gantt, html_path, runs, seed, evaluator, no_progress
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
    check_outputs(
        Output("-o", output, stdout=True),
        Output("--gantt", gantt, FIGURE_SUFFIXES),
        html_output(html_path),
        inputs=scenario_inputs(scenario, overrides),
    )
    check_html(html_path)
    fmt = output_format(fmt, output, FORMATS)
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
    refused = nothing_ran([(row.schedule, row.error) for row in comparison.rows], "schedules")
    if refused is not None:  # no schedule ran: a refusal, not a report of nothing
        raise UserError(f"{scenario}: {refused}")
    for text in compare_notes(comparison, gantt):
        note(text)
    files = compare_files(comparison, gantt, html_path)
    write_outputs([*files, (output, render_compare(comparison, fmt))])
