"""Why the winner wins: the step time of the two best plans taken apart, term by term.

Every device's step is its busy time plus its idle time, and the idle time has causes
(``pipesim.analysis.critical``): waiting for an upstream activation or a downstream
gradient, or blocked in order behind one that waits (the pipeline bubble, except while the
awaited transfer is on its way: that part is communication); a busy link or a blocking
send (communication); the end-of-step work (the gradient all-reduce where there is data
parallelism, and the optimizer step: the "end-of-step tail"). Taking the device
that finishes last (the one that sets the step's end; of those, the busiest) and splitting
its step that way gives

    step = compute + tensor-parallel communication + expert all-to-all + recompute
           + bubble + communication + end-of-step tail (+ done early)

where the busy time is split by running the same plan again: with an ideal link inside the
node, what the tensor-parallel all-reduces cost; on that link without recomputation, what
the forward pass run again inside the backward costs; a MoE model's dispatch and combine
all-to-alls are their own term (``pipesim.analysis.experts``), taken out of the others, and
the explanation says where its EP group sits (inside a node, or over how many nodes). Subtracting the runner-up's
terms from the winner's says where the difference comes from.

Some choices are not made for speed but forced by memory. For the winner and the
runner-up, each knob that trades memory for time (recomputation on, a higher ZeRO stage, a
smaller microbatch) is turned back one step the other way; where that candidate is pruned
for memory (the same walk as the planner's pruning), the choice was forced, and the
explanation says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pipesim.analysis.critical import (
    BUSY_LINK,
    COLLECTIVE,
    DONE,
    DOWNSTREAM,
    GATHER,
    IN_ORDER,
    SENDING,
    UPSTREAM,
)
from pipesim.analysis.experts import moe_fields, step_all_to_all_ms
from pipesim.analysis.plan.planner import run_emitted
from pipesim.analysis.plan.prune import capacity_reason, usable_text
from pipesim.analysis.plan.rank import describe, emit_mapping
from pipesim.analysis.plan.row import PlanRow
from pipesim.analysis.plan.score import Scorer
from pipesim.analysis.plan.space import Candidate
from pipesim.analysis.run import Result
from pipesim.cluster.fabric import crossings
from pipesim.scenario.vary import vary
from pipesim.sim.metrics import Accounting
from pipesim.sim.trace import Lane

TERMS = (
    "compute",
    "tensor-parallel communication",
    "expert all-to-all",
    "recompute",
    "bubble",
    "communication",
    "end-of-step tail",
    "done early",
)
_CAUSE_TERM = {
    UPSTREAM: "bubble",
    DOWNSTREAM: "bubble",
    IN_ORDER: "bubble",
    BUSY_LINK: "communication",
    SENDING: "communication",
    GATHER: "communication",
    COLLECTIVE: "end-of-step tail",
    DONE: "done early",
}


@dataclass(frozen=True, slots=True)
class Breakdown:
    """One plan's step on its pace-setting device, in milliseconds per term."""

    label: str
    step_time_ms: float
    device: int
    terms_ms: dict[str, float]
    forced: tuple[str, ...]  # memory-forced choices, as sentences
    memory: str = ""  # "memory: 71.2 of 76.0 GiB usable (80 GiB less 5% headroom)"
    network: str = ""  # "across pods: data-parallel groups span 4 pods ...: 812.000 ms ..."
    experts: str = ""  # "experts: EP 64 over 8 nodes (8 per node), all-to-all ... a step"


@dataclass(frozen=True, slots=True)
class PlanExplanation:
    """The winner's and the runner-up's breakdowns, and what tells them apart."""

    winner: Breakdown
    runner_up: Breakdown | None

    def sentences(self) -> list[str]:
        lines = [_describe(1, self.winner)]
        if self.runner_up is None:
            return [*lines, "no runner-up: only one candidate was scored"]
        lines.append(_describe(2, self.runner_up))
        gap = self.runner_up.step_time_ms - self.winner.step_time_ms
        lines.append(f"the winner is {gap:.3f} ms faster; by term (runner-up minus winner):")
        deltas = {t: self.runner_up.terms_ms[t] - self.winner.terms_ms[t] for t in TERMS}
        for term, delta in sorted(deltas.items(), key=lambda item: -abs(item[1])):
            if abs(delta) > 1e-9:
                lines.append(f"  {term}: {delta:+.3f} ms")
        return lines

    def to_dict(self) -> dict[str, Any]:
        def one(b: Breakdown | None) -> dict[str, Any] | None:
            if b is None:
                return None
            return {
                "label": b.label,
                "step_time_ms": b.step_time_ms,
                "device": b.device,
                "terms_ms": b.terms_ms,
                "memory_forced": list(b.forced),
                "memory": b.memory,
                "network": b.network,
                "experts": b.experts,
            }

        return {"winner": one(self.winner), "runner_up": one(self.runner_up)}


def _describe(rank: int, b: Breakdown) -> str:
    terms = ", ".join(f"{t} {b.terms_ms[t]:.3f}" for t in TERMS if b.terms_ms[t] > 1e-9)
    forced = "".join(f"; {f}" for f in (b.memory, b.network, b.experts, *b.forced) if f)
    return f"#{rank} {b.label}: {b.step_time_ms:.3f} ms on device {b.device}: {terms}{forced}"


def explain_plan(base: dict[str, Any], source: str, results: list[PlanRow]) -> PlanExplanation:
    """Break down the winner and the runner-up (the best result with another step time,
    else the second) of ranked ``results``."""
    winner = _breakdown(base, source, results[0])
    fastest = round(results[0].step_time_ms, 6)  # a nanosecond apart: float noise
    others = [r for r in results[1:] if round(r.step_time_ms, 6) != fastest]
    second = others[0] if others else (results[1] if len(results) > 1 else None)
    runner_up = _breakdown(base, source, second) if second is not None else None
    return PlanExplanation(winner, runner_up)


def _run(base: dict[str, Any], source: str, c: Candidate, critical: bool = False) -> Result:
    return run_emitted(emit_mapping(base, c, source=source), source, critical_path=critical)


def _breakdown(base: dict[str, Any], source: str, row: PlanRow) -> Breakdown:
    result = _run(base, source, row.candidate, critical=True)
    report = result.report
    idle = result.explanation.idle_by_cause()
    device = min(
        report.per_device, key=lambda d: (idle.get(d.device, {}).get(DONE, 0.0), -d.busy_ms)
    ).device
    terms = dict.fromkeys(TERMS, 0.0)
    for term, ms in _idle_terms(result, device).items():
        terms[term] += ms
    terms |= _busy_terms(base, source, row.candidate, device, result)
    forced = _memory_forced(base, source, row.candidate)
    memory = _memory_words(result.scenario.accounting, row.peak_memory_bytes)
    network = _network_words(base, source, row.candidate, report.step_time_ms)
    experts = _expert_words(result, device)
    step = report.step_time_ms
    return Breakdown(describe(row), step, device, terms, forced, memory, network, experts)


def _expert_words(result: Result, device: int) -> str:
    """Where a MoE plan's EP group sits and what its all-to-alls cost the device."""
    moe = moe_fields(result.scenario, result.report.step_time_ms)
    if moe is None:
        return ""
    a2a = step_all_to_all_ms(result.scenario, result.trace)[device]
    return (
        f"experts: {moe['placement']}, imbalance {moe['imbalance']:.3f}, all-to-all "
        f"{a2a:.3f} ms a step on device {device} (exposed)"
    )


def _memory_words(accounting: Accounting | None, peak_bytes: float) -> str:
    """The fullest device's peak against the usable memory, the headroom named."""
    if accounting is None or not accounting.memory_capacity_bytes:
        return ""
    return f"memory: {peak_bytes / 2**30:.1f} of {usable_text(accounting)}"


def _network_words(base: dict[str, Any], source: str, c: Candidate, step_ms: float) -> str:
    """What of the plan's communication leaves a pod, and what the oversubscription above
    the pods costs the step: the same plan on a non-blocking network (oversubscription 1)
    is that much faster."""
    job = Scorer(base, source).candidate_job(c)
    fabric = job.hardware.fabric
    if fabric is None:
        return ""
    lines = crossings(job.rank_layout(c.devices), c.devices)
    if not lines:
        return f"across pods: nothing ({fabric.kind}, all of it inside one pod)"
    words = f"across pods: {'; '.join(lines)}"
    if fabric.oversubscription == 1:
        return words
    flat = vary(base, {"hardware.topology.oversubscription": 1.0}, source=source)
    exposed = step_ms - _run(flat, source, c).report.step_time_ms
    return f"{words}: {exposed:.3f} ms of the step exposed (against a non-blocking network)"


def _busy_terms(
    base: dict[str, Any], source: str, c: Candidate, device: int, result: Result
) -> dict[str, float]:
    """The device's busy time split into compute, tensor-parallel communication (what an
    ideal link inside the node would save), the expert all-to-alls, and recompute (what
    turning it off saves, on that ideal link, so no millisecond is counted twice); each
    run's own all-to-alls are taken out before two runs are compared."""
    busy_ms = _busy_without_all_to_all(result, device)
    ideal_base = vary(base, {"hardware.intra_node_link": "ideal"}, source=source)
    tensor_ms, ideal_busy = 0.0, busy_ms
    if c.tensor > 1:
        ideal_busy = _busy_without_all_to_all(_run(ideal_base, source, c), device)
        tensor_ms = busy_ms - ideal_busy
    recompute_ms = 0.0
    if c.recompute:
        plain = _run(ideal_base, source, replace(c, recompute=False))
        recompute_ms = ideal_busy - _busy_without_all_to_all(plain, device)
    return {
        "compute": busy_ms - tensor_ms - recompute_ms,
        "tensor-parallel communication": tensor_ms,
        "expert all-to-all": step_all_to_all_ms(result.scenario, result.trace)[device],
        "recompute": recompute_ms,
    }


def _busy_without_all_to_all(result: Result, device: int) -> float:
    busy = result.report.per_device[device].busy_ms
    if result.scenario.expert_parallel is None:
        return busy
    return busy - step_all_to_all_ms(result.scenario, result.trace)[device]


def _idle_terms(result: Result, device: int) -> dict[str, float]:
    """The device's idle time by term. A wait for an activation or a gradient is bubble,
    except while the transfer carrying it is on its way: that part is communication."""
    trace = result.trace
    comm = np.flatnonzero(trace.lane == Lane.COMM)
    in_flight = {trace.name(r): (float(trace.start[r]), float(trace.end[r])) for r in comm}
    terms: dict[str, float] = {}
    for gap in result.explanation.gaps:
        if gap.device != device:
            continue
        term = _CAUSE_TERM.get(gap.cause, "bubble")
        sent = 0.0
        if gap.cause in (UPSTREAM, DOWNSTREAM) and gap.via in in_flight:
            start, end = in_flight[gap.via]
            sent = max(0.0, min(gap.end_ms, end) - max(gap.start_ms, start))
        terms["communication"] = terms.get("communication", 0.0) + sent
        terms[term] = terms.get(term, 0.0) + gap.duration_ms - sent
    return terms


def _memory_forced(base: dict[str, Any], source: str, candidate: Candidate) -> tuple[str, ...]:
    """The plan's memory-saving choices that memory forced: the other way, it does not
    fit (the same walk as the pruning)."""
    flips = []
    if candidate.recompute:
        flips.append(("recompute on", "without it", replace(candidate, recompute=False)))
    if candidate.zero_stage > 0:
        lower = candidate.zero_stage - 1
        flips.append(
            (
                f"ZeRO stage {candidate.zero_stage}",
                f"at ZeRO stage {lower}",
                replace(candidate, zero_stage=lower),
            )
        )
    double = candidate.microbatch_size * 2
    if candidate.microbatches % 2 == 0:
        flips.append(
            (
                f"microbatch size {candidate.microbatch_size}",
                f"with microbatch size {double}",
                replace(
                    candidate, microbatch_size=double, microbatches=candidate.microbatches // 2
                ),
            )
        )
    scorer = Scorer(base, source)
    too_big = capacity_reason(scorer.accounting)  # the reason memory pruning gives
    forced = []
    for choice, how, other in flips:
        outcome = scorer.score(other)
        if outcome.reason is not None and outcome.reason.startswith(too_big):
            forced.append(f"{choice} is forced by memory: {how} the peak would {outcome.reason}")
    return tuple(forced)
