"""Cross-check several schedules in one go and render the results.

``check_schedules`` times the stage ops (the harness, in this process) unless a profile is
given, runs every schedule for real in one process group, and compares each with its
simulation (``crosscheck.cross_check``). Ops timed in isolation plus a host overhead and
hop fitted on each schedule's calibration step (a step the reported figures do not use)
make the prediction; a profile with a ``host`` section replaces that fit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pipesim.calibrate.crosscheck import (
    CrossCheck,
    cross_check,
    measured_trace,
    median_run,
    rankings_agree,
    side_by_side_chrome,
)
from pipesim.calibrate.fit import timeline
from pipesim.calibrate.harness import profile_stages
from pipesim.calibrate.ops import StageSpec
from pipesim.calibrate.realrun import Job, MeasuredRun, run_jobs
from pipesim.scenario.profile import Profile, costs_from_profile, write_atomic
from pipesim.schedules import get_schedule
from pipesim.schedules.ir import Schedule


@dataclass(frozen=True)
class Outcome:
    results: list[CrossCheck]
    measured: list[object]  # Trace of each schedule's median run
    simulated: list[object]  # Trace of each schedule's prediction

    @property
    def rankings_agree(self) -> bool:
        spread = max(r.measured_spread for r in self.results)
        return rankings_agree(self.results, tolerance=spread)

    def to_dict(self) -> dict:
        first = self.results[0].to_dict()
        return {
            **first,
            "schedules": [r.to_dict() for r in self.results],
            "rankings_agree": self.rankings_agree,
            "measured_order": [
                r.schedule for r in sorted(self.results, key=lambda r: r.measured_makespan_ms)
            ],
            "simulated_order": [
                r.schedule for r in sorted(self.results, key=lambda r: r.simulated_makespan_ms)
            ],
        }

    def render_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def render_table(self) -> str:
        return (
            render_table(self.results)
            + f"rankings agree: {'yes' if self.rankings_agree else 'no'}\n"
        )

    def chrome_trace(self) -> dict:
        return side_by_side_chrome(self.measured[0], self.simulated[0])


def render_table(results: list[CrossCheck]) -> str:
    """One row per schedule: every error figure, percentages signed.

    ``stall ms``: median time per step the ranks sat blocked posting sends and receives
    (``fit.post_stalls_ms``); well above zero, the machine was shared with other work.
    """
    head = (
        f"{'schedule':<18} {'p':>2} {'m':>3} {'measured ms':>11} {'spread':>7} {'simulated ms':>12} "
        f"{'pred err':>8} {'replay err':>10} {'start p50 ms':>12} {'start p90 ms':>12} {'stall ms':>8}"
    )
    lines = [head]
    for r in results:
        lines.append(
            f"{r.schedule:<18} {r.devices:>2} {r.microbatches:>3} {r.measured_makespan_ms:>11.2f} "
            f"{r.measured_spread:>7.1%} {r.simulated_makespan_ms:>12.2f} {r.prediction_error:>+8.1%} "
            f"{r.replay_error:>+10.1%} {r.start_error_p50_ms:>12.2f} {r.start_error_p90_ms:>12.2f} "
            f"{r.post_stall_ms:>8.1f}"
        )
    return "\n".join(lines) + "\n"


def other_schedules(base: Schedule, names: list[str]) -> list[Schedule]:
    """The named schedules at the base schedule's size (virtual stages kept where allowed)."""

    virtual = base.stages // base.devices
    out = []
    for name in names:
        if name == base.name:
            continue
        try:
            out.append(get_schedule(name, base.devices, base.microbatches, virtual))
        except Exception:
            out.append(get_schedule(name, base.devices, base.microbatches, 1))
    return out


def check_schedules(
    schedules: list[Schedule],
    specs: list[StageSpec],
    *,
    runs: int = 5,
    profile: Profile | None = None,
    save_runs: str | None = None,
    timeout_s: float = 600.0,
) -> Outcome:
    """Run, simulate and compare each schedule (module docstring)."""

    model_stages = {s.model_stages for s in schedules}
    if len(model_stages) != 1 or len(specs) not in (1, *model_stages):
        raise ValueError("every schedule must have the same model stages as the stage specs")
    if profile is None:
        profile = profile_stages(specs if len(specs) > 1 else specs * model_stages.pop())
    costs = costs_from_profile(profile, schedules[0].model_stages)
    jobs = [Job(s, tuple(specs), runs=runs) for s in schedules]
    measured = run_jobs(jobs, timeout_s=timeout_s)
    results, measured_traces, simulated_traces = [], [], []
    for schedule, (calibration, timed) in zip(schedules, measured, strict=True):
        if save_runs:
            _save_runs(save_runs, schedule.name, calibration + timed)
        result, simulated = cross_check(timed, costs, host=profile.host, calibration=calibration)
        results.append(result)
        simulated_traces.append(simulated)
        measured_traces.append(measured_trace(timeline(median_run(timed))))
    return Outcome(results, measured_traces, simulated_traces)


def _save_runs(folder: str, name: str, runs: list[MeasuredRun]) -> None:

    Path(folder).mkdir(parents=True, exist_ok=True)
    for index, run in enumerate(runs):
        write_atomic(Path(folder, f"{name}-run{index}.json"), json.dumps(run.to_dict()))
