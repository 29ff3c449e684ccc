"""The calibration commands' output: profile files, their summaries, and the cross-check.

Rendering only: the timings, fits and errors were measured or computed by
``pipesim.calibrate``.
"""

from __future__ import annotations

import json

from pipesim.calibrate.suite import Outcome
from pipesim.cli.output import Files, figure_bytes, suffix_of
from pipesim.plot.figures import crosscheck_figure
from pipesim.scenario.profile import HostOverhead, Profile, profile_to_dict
from pipesim.sim.export import to_chrome_trace, to_csv
from pipesim.sim.trace import Trace


def profile_text(profile: Profile) -> str:
    """The profile file's content (``pipesim.scenario.profile.load_profile`` reads it)."""
    return json.dumps(profile_to_dict(profile), indent=2) + "\n"


def profile_summary(result: Profile) -> str:
    """Median F, B, I and W per stage, then each link's fitted latency and bandwidth."""
    lines = [f"{'stage':>5} {'F ms':>9} {'B ms':>9} {'I ms':>9} {'W ms':>9}"]
    for timing in result.stages:
        cells = [
            f"{timing.median_ms(k):9.3f}" if timing.median_ms(k) is not None else f"{'-':>9}"
            for k in "FBIW"
        ]
        lines.append(f"{timing.stage:>5} " + " ".join(cells))
    for fit in result.links:
        lines.append(
            f"link {fit.name}: latency {fit.latency_us:.1f} us, "
            f"bandwidth {fit.bandwidth_gbps:.2f} GB/s"
        )
    return "\n".join(lines) + "\n"


def import_summary(spans: int, traces: int, measured: Trace, profile: Profile) -> str:
    """What ``import-trace`` read, and the profile it made of it."""
    head = f"{spans} PP spans from {traces} rank(s), makespan {measured.makespan_ms:.3f} ms\n"
    return head + profile_summary(profile)


def fit_summary(host: HostOverhead, runs: int) -> str:
    return (
        f"host overhead {host.overhead_ms:.4f} ms per action, hop {host.hop_ms:.4f} ms, "
        f"from {runs} run(s) ({host.samples} samples)\n"
    )


def crosscheck_text(outcome: Outcome, fmt: str) -> str:
    """The cross-check's errors as a table, or as JSON with every figure."""
    return outcome.render_json() if fmt == "json" else outcome.render_table()


def crosscheck_files(outcome: Outcome, trace: str | None, gantt: str | None) -> Files:
    """The measured and simulated timelines side by side, as a Perfetto trace and as a
    Gantt chart of the first schedule, if asked for."""
    files: Files = []
    if trace:
        files.append((trace, json.dumps(outcome.chrome_trace())))
    if gantt:
        first = outcome.results[0].schedule
        figure = crosscheck_figure(outcome.measured[0], outcome.simulated[0], first)
        files.append((gantt, figure_bytes(figure, suffix_of(gantt))))
    return files


def timeline_files(measured: Trace, timeline: str | None, timeline_csv: str | None) -> Files:
    """The measured timeline of ``import-trace`` as a Perfetto trace and as CSV, if asked."""
    files: Files = []
    if timeline:
        files.append((timeline, json.dumps(to_chrome_trace(measured, label="measured"))))
    if timeline_csv:
        files.append((timeline_csv, to_csv(measured)))
    return files
