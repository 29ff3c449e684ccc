"""Scenario in, Result out: the one call the CLI, sweeps and notebooks share.

A ``Result`` is the Report of one simulated step plus what the analyses on top attach to
it, each as its own typed field: the Monte Carlo percentiles (``monte_carlo``), the
critical path and idle causes (``explanation``), and notes a user should read
(``notes``, e.g. that hand-typed costs are per chunk). ``Result.to_dict()`` flattens it
all for JSON, keeping the keys reports always had (``makespan_ms_p50``, ``critical_path``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from pipesim.analysis.critical import Explanation, explain
from pipesim.analysis.experts import moe_fields
from pipesim.analysis.monte_carlo import MonteCarlo, MonteCarloSummary, Progress, monte_carlo
from pipesim.cluster.expert_draws import routing_hook, varies
from pipesim.scenario.build import Scenario
from pipesim.scenario.schema import Mode, ScenarioError
from pipesim.schedules.columns import performed_kinds
from pipesim.schedules.ir import Kind
from pipesim.search import SearchResult
from pipesim.sim.decode import DecodeMetrics, decode_metrics
from pipesim.sim.engine import DurationScale
from pipesim.sim.fast import Evaluator, EvaluatorCache, fast_unsupported, simulate_with
from pipesim.sim.memory import MemoryTimeline, memory_timelines
from pipesim.sim.metrics import Report, build_report
from pipesim.sim.trace import Trace
from pipesim.sim.variability import Variability


@dataclass(frozen=True, slots=True)
class Result:
    """One simulated step of a scenario, and what was learnt about it."""

    scenario: Scenario
    trace: Trace
    report: Report
    memory: tuple[MemoryTimeline, ...] = ()  # activation bytes per device over time
    monte_carlo: MonteCarloSummary | None = None
    explanation: Explanation | None = None
    notes: tuple[str, ...] = ()
    decode: DecodeMetrics | None = None  # pipeline.mode: decode: TTFT, TPOT, tokens/s

    @property
    def search(self) -> SearchResult | None:
        """How zb-auto / v-auto found the schedule (None for a fixed policy)."""
        return self.scenario.search

    def to_dict(self) -> dict:
        """The report's fields, then the Monte Carlo percentiles (``makespan_ms_p50``, ...)
        and the critical path with idle time per device and cause, where present."""
        data = self.report.to_dict()
        data["memory_capacity_bytes"] = memory_capacity_bytes(self.scenario)
        data.update(parameter_fields(self.scenario))
        moe = moe_fields(self.scenario, self.report.step_time_ms, self.trace)
        if moe is not None:
            data["moe"] = moe
        if self.monte_carlo is not None:
            data.update(self.monte_carlo.to_dict())
        if self.explanation is not None:
            data["critical_path"] = list(self.explanation.critical_path)
            data["idle_by_cause"] = {
                str(d): causes for d, causes in self.explanation.idle_by_cause().items()
            }
        if self.search is not None:
            data["search"] = search_dict(self.search)
        split = split_notes(self.scenario)  # the per-chunk note stays on stderr only
        if split:
            data["notes"] = list(split)
        if self.decode is not None:
            data.update(self.decode.to_dict())
            if self.decode.analytic is not None:
                data["analytic"] = {**(data["analytic"] or {}), **asdict(self.decode.analytic)}
        return data

    def scalars(self) -> dict[str, float | int | str | None]:
        """The report's flat fields and the Monte Carlo percentiles (one table row); memory
        as the most any device holds: static, activations, runtime, all, and the OOM flag."""
        data = self.report.scalars()
        per_device = self.report.per_device
        data["static_memory_bytes_max"] = max(d.static_memory_bytes for d in per_device)
        data["runtime_memory_bytes_max"] = max(d.runtime_memory_bytes for d in per_device)
        data["memory_capacity_bytes"] = memory_capacity_bytes(self.scenario)
        moe = moe_fields(self.scenario, self.report.step_time_ms, self.trace)
        keys = ("imbalance", "dropped_fraction", "all_to_all_share", "exposed_all_to_all_share")
        for key in keys if moe else ():
            if key in moe:
                data[f"moe_{key}"] = moe[key]
        if self.monte_carlo is not None:
            data.update(self.monte_carlo.to_dict())
        if self.decode is not None:
            data.update({k: v for k, v in self.decode.to_dict().items() if "group" not in k})
        return data


def run_scenario(
    scenario: Scenario,
    *,
    runs: int | None = None,
    seed: int = 0,
    critical_path: bool = False,
    progress: Progress | None = None,
    evaluator: Evaluator | str = Evaluator.AUTO,
    cache: EvaluatorCache | None = None,
) -> Result:
    """Simulate one step of ``scenario`` and measure it.

    ``runs``: also run a Monte Carlo study of that many random steps under the scenario's
    variability (``seed`` makes it reproducible; ``progress(1)`` after each step; always
    on the SimPy engine). ``critical_path``: also walk the critical path and the cause of
    every idle gap. ``evaluator``: ``auto``, ``fast`` or ``simpy`` for the step
    (``pipesim.sim.fast``; ScenarioError where ``fast`` cannot run it). ``cache``: what
    the fast evaluator keeps between calls (a sweep worker holds one for its points).
    """
    if runs is not None:
        check_study_size(scenario, runs)
    result = simulate_step(scenario, evaluator=evaluator, cache=cache)
    summary = study(scenario, runs, seed, progress).summary() if runs is not None else None
    return Result(
        scenario,
        result.trace,
        result.report,
        result.memory,
        monte_carlo=summary,
        explanation=_explain(result) if critical_path else None,
        notes=cost_notes(scenario) + split_notes(scenario),
        decode=result.decode,
    )


def memory_capacity_bytes(scenario: Scenario) -> float | None:
    """One GPU's memory, against which the Report flags OOM (None: unknown, no check)."""
    accounting = scenario.accounting
    if accounting is None or not accounting.memory_capacity_bytes:
        return None
    return accounting.memory_capacity_bytes


def parameter_fields(scenario: Scenario) -> dict[str, int | None]:
    """The model's ``parameters`` (total, the main model's) and ``activated_parameters``
    (per token), and its MTP modules' own (``mtp_parameters``); None without a model."""
    count = scenario.parameters
    return {
        "parameters": None if count is None else count.total,
        "activated_parameters": None if count is None else count.activated,
        "mtp_parameters": None if count is None else count.mtp,
    }


def check_study_size(scenario: Scenario, runs: int) -> None:
    """The size guard of a Monte Carlo study: ``runs`` steps simulate ``runs`` times the
    schedule's actions, held to the same ``pipeline.max_actions`` as one step."""
    actions = sum(len(actions) for actions in scenario.schedule.device_actions)
    limit = scenario.spec.pipeline.max_actions
    if runs * actions > limit:
        raise ScenarioError(
            f"--runs {runs:,} x {actions:,} actions a step = "
            f"{runs * actions:,} actions, over the limit of {limit:,}; raise "
            f"pipeline.max_actions (e.g. --set pipeline.max_actions={runs * actions}) to run it"
        )


def explain_scenario(scenario: Scenario) -> Result:
    """``pipesim explain``: one step with its critical path and idle-gap causes."""
    return run_scenario(scenario, critical_path=True)


def simulate_step(
    scenario: Scenario,
    duration_scale: DurationScale | None = None,
    link_scale: Callable[[int, int], float] | None = None,
    evaluator: Evaluator | str = Evaluator.AUTO,
    cache: EvaluatorCache | None = None,
) -> Result:
    """Simulate one step, bare (``duration_scale`` and ``link_scale``: one random step of a
    Monte Carlo study, see ``pipesim.sim.variability``), with the ``evaluator`` asked for
    (``report.evaluator`` says which ran); ``cache``: see ``run_scenario``."""
    cache = cache or EvaluatorCache()  # one schedule index for the choice and the step
    trace, evaluator = simulate_with(
        scenario.schedule,
        scenario.costs,
        scenario.topology,
        evaluator=choose_evaluator(scenario, evaluator, duration_scale or link_scale, cache),
        duration_scale=duration_scale,
        link_scale=link_scale,
        tail_ms=scenario.tail_ms,
        tail_after_flush=scenario.tail_after_flush,
        optimizer_ms=scenario.optimizer_ms,
        cache=cache,
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
    report = replace(report, evaluator=evaluator)
    decode = None
    if scenario.mode == Mode.DECODE:
        decode = decode_metrics(
            trace, scenario.schedule, scenario.costs, scenario.microbatch_size, scenario.topology
        )
    return Result(scenario, trace, report, memory, decode=decode)


def study(scenario: Scenario, runs: int, seed: int, progress: Progress | None = None) -> MonteCarlo:
    """A Monte Carlo study of a Scenario under its ``variability`` and, for a MoE model
    with expert parallelism (or a capacity factor), its routing drawn per microbatch
    (``pipesim.cluster.expert_draws``); with neither, every run is the deterministic step."""

    def run_step(duration_scale, link_scale):
        report = simulate_step(scenario, duration_scale, link_scale, evaluator="simpy").report
        return report.makespan_ms, report.bubble_fraction

    variability = scenario.variability or Variability()
    ep, routing = scenario.expert_parallel, None
    if varies(ep):  # a MoE model's routing, drawn per microbatch and stage

        def routing(rng):
            return routing_hook(ep, scenario.schedule, scenario.costs, rng)

    return monte_carlo(variability, scenario.schedule, run_step, runs, seed, progress, routing)


def choose_evaluator(
    scenario: Scenario,
    evaluator: Evaluator | str,
    random_step: object = None,
    cache: EvaluatorCache | None = None,
) -> Evaluator:
    """The evaluator to run a step of ``scenario`` with: ``auto`` keeps the engine for a
    scenario with ``variability:`` (its steps are random); ScenarioError, one line, where
    ``fast`` is asked for and cannot run the scenario exactly."""
    if evaluator not in tuple(Evaluator):
        raise ScenarioError(f"--evaluator {evaluator!r}: allowed: {', '.join(Evaluator)}")
    evaluator = Evaluator(evaluator)
    if evaluator is Evaluator.SIMPY or random_step:
        return evaluator
    reason = fast_unsupported(scenario.schedule, scenario.costs, scenario.topology, cache=cache)
    if reason is None and scenario.variability is not None:
        reason = "the scenario has a variability: section (random steps), run by the engine"
    if reason is None:
        return evaluator
    if evaluator is Evaluator.FAST:
        raise ScenarioError(f"{scenario.name}: --evaluator fast cannot run it: {reason}")
    return Evaluator.SIMPY


def _explain(result: Result) -> Explanation:
    scenario = result.scenario
    return explain(result.trace, scenario.schedule, scenario.topology, scenario.costs)


def search_dict(search: SearchResult) -> dict[str, float | int | str | bool | None]:
    """The search's numbers for JSON: limit, peak reached, candidates, seconds, source, and
    the lower bound with the gap to it (``makespan_ms / lower_bound_ms - 1``) and the part
    of the bound that gives it; the mode (``heuristic`` or ``exact``), and in exact mode
    whether the order is proven optimal and the heuristic's own makespan and gap."""
    exact = search.mode == "exact"
    return {
        "mode": search.mode,
        "optimal": search.optimal if exact else None,
        "heuristic_makespan_ms": search.heuristic_makespan_ms if exact else search.makespan_ms,
        "heuristic_gap": search.heuristic_gap,
        "memory_limit_bytes": search.limit_bytes,
        "peak_activation_bytes": search.peak_activation_bytes,
        "makespan_ms": search.makespan_ms,
        "candidates": search.candidates,
        "seconds": search.seconds,
        "source": search.source,
        "lower_bound_ms": search.lower_bound_ms,
        "gap": search.gap,
        "lower_bound_part": search.lower_bound_part,
    }


def cost_notes(scenario: Scenario) -> tuple[str, ...]:
    """What a reader of the numbers should know about the costs: hand-typed costs are per
    chunk, so more virtual stages mean more work, not the same model cut finer."""
    schedule, spec = scenario.schedule, scenario.spec
    chunks = schedule.stages // schedule.devices
    if (
        chunks <= 1
        or spec.model is not None
        or spec.costs.profile is not None
        or scenario.mode == Mode.DECODE
    ):
        return ()
    return (
        f"costs are per chunk: {schedule.devices} devices x {chunks} chunks = "
        f"{schedule.stages} stages, each costing the forward_ms/backward_ms given; more chunks "
        f"cut the same model finer only if the per-chunk costs shrink in proportion "
        f"(pipesim compare scales them)",
    )


def split_notes(scenario: Scenario) -> tuple[str, ...]:
    """That hand-typed ``backward_ms`` was split in half for a schedule that runs the
    input- and weight-gradient halves (I and W) apart; model-derived costs split by FLOPs."""
    if not backward_split_in_half(scenario):
        return ()
    return (split_note(scenario.schedule.name),)


def split_note(schedules: str) -> str:
    """The note for ``schedules`` (one name, or several joined), as run and compare say it."""
    return (
        "costs.backward_ms split as backward_input_ms = backward_weight_ms = B/2 for "
        f"{schedules}'s I and W; give both to set the split"
    )


def backward_split_in_half(scenario: Scenario) -> bool:
    """Whether the schedule runs I or W actions on costs that gave ``backward_ms`` alone."""
    spec = scenario.spec
    costs = spec.costs
    if (
        spec.model is not None
        or costs.profile is not None
        or scenario.mode == Mode.DECODE
        or costs.backward_ms is None
        or costs.backward_input_ms is not None
        or costs.backward_weight_ms is not None
    ):
        return False
    return bool({Kind.I, Kind.W} & performed_kinds(scenario.schedule))
