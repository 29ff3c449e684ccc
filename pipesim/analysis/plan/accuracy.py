"""How far a plan's ranking can be trusted: the winner's step-time band
(``pipesim.analysis.accuracy``), and whether the runner-up's step time lies outside the
typical error of that band. Every candidate of a plan has the same GPUs and model, so one
band holds for the whole ranking.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipesim.analysis.accuracy import AccuracyBand, band, ledger, parameter_count
from pipesim.analysis.plan.planner import Plan
from pipesim.analysis.plan.rank import distinct
from pipesim.scenario.build import parse_spec


@dataclass(frozen=True, slots=True)
class PlanAccuracy:
    """The winner's step-time band, and whether the runner-up's step time lies outside
    the typical error (``runner_up_pct``: how much slower it is, in percent; None with
    fewer than two distinct outcomes)."""

    band: AccuracyBand
    typical_pct: float | None  # the median |error| the ranking is weighed against
    runner_up_pct: float | None
    ranking: str

    def to_dict(self) -> dict[str, Any]:
        return self.band.to_dict() | {
            "typical_pct": self.typical_pct,
            "runner_up_slower_pct": self.runner_up_pct,
            "ranking": self.ranking,
        }


def plan_accuracy(result: Plan) -> PlanAccuracy | None:
    """The band of a plan's winner (None when no candidate fits): every candidate has the
    same GPUs and model, so one band holds for the whole ranking."""
    if not result.results:
        return None
    winner = result.results[0].candidate
    spec = parse_spec(result.winner_mapping(0), result.source)
    gpus = winner.tensor * winner.devices * winner.data
    params = parameter_count(spec, result.source)
    moe = spec.model is not None and spec.model.moe is not None
    found = band("step_time", spec.hardware.gpu, gpus, params, moe=moe)
    typical = found.median_pct
    if typical is None and found.nearest is not None:
        near = next(r for r in ledger()["regimes"] if r["key"] == found.nearest)
        typical = near["held_out_median_pct"] if near["held_out"] else near["median_pct"]
    rows = distinct(result.results)
    gap = None
    if len(rows) > 1:
        gap = (rows[1].step_time_ms / rows[0].step_time_ms - 1) * 100
    return PlanAccuracy(found, typical, gap, ranking_text(typical, gap))


def ranking_text(typical: float | None, gap: float | None) -> str:
    if typical is None:
        return "no published row to weigh ranking differences against"
    text = f"step-time differences under the typical ±{typical:.1f}% are not significant"
    if gap is None:
        return text
    if gap < typical:
        return f"{text}: the runner-up, {gap:.2f}% slower, is not told apart from the winner"
    return f"{text}; the runner-up is {gap:.2f}% slower, outside it"
