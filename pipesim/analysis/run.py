"""Scenario in, Trace and Report out: the one call the CLI, sweeps and notebooks share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipesim.analysis.monte_carlo import MonteCarlo, monte_carlo
from pipesim.scenario.build import Scenario
from pipesim.sim.engine import DurationScale, simulate
from pipesim.sim.memory import MemoryTimeline, memory_timelines
from pipesim.sim.metrics import Report, build_report
from pipesim.sim.trace import Trace
from pipesim.sim.variability import Variability


@dataclass(frozen=True, slots=True)
class Result:
    scenario: Scenario
    trace: Trace
    report: Report
    memory: tuple[MemoryTimeline, ...] = ()  # activation bytes per device over time


def run_scenario(
    scenario: Scenario,
    *,
    duration_scale: DurationScale | None = None,
    link_scale: Callable[[int, int], float] | None = None,
) -> Result:
    """Simulate one step of ``scenario`` and measure it (``duration_scale`` and
    ``link_scale``: one random step of a Monte Carlo study, see ``pipesim.variability``)."""
    trace = simulate(
        scenario.schedule,
        scenario.costs,
        scenario.topology,
        duration_scale=duration_scale,
        link_scale=link_scale,
        tail_ms=scenario.tail_ms,
        tail_after_flush=scenario.tail_after_flush,
    )
    memory = memory_timelines(trace, scenario.schedule, scenario.costs)
    report = build_report(
        trace,
        scenario.schedule,
        scenario.costs,
        scenario.microbatch_size,
        scenario=scenario.name,
        seq_len=scenario.seq_len,
        topology=scenario.topology,
        accounting=scenario.accounting,
        memory=memory,
    )
    return Result(scenario, trace, report, memory)


def study(scenario: Scenario, runs: int, seed: int) -> MonteCarlo:
    """A Monte Carlo study of a Scenario under its ``variability`` (none: every run is the
    deterministic step)."""

    def run_step(duration_scale, link_scale):
        report = run_scenario(scenario, duration_scale=duration_scale, link_scale=link_scale).report
        return report.makespan_ms, report.bubble_fraction

    variability = scenario.variability or Variability()
    return monte_carlo(variability, scenario.schedule, run_step, runs, seed)
