"""Each ledger row's error, and the errors summed up per regime.

A training row's error is pipesim's step time over the step time the publication implies,
less one (+0.05: pipesim's step is 5 % slower than the real one). A ratio row's error is
pipesim's ratio of the two schedules' throughputs over the published ratio, less one.

A regime is a GPU type and a kind of row (``training``, ``moe`` for a mixture-of-experts
training run, or ``ratio``); for each, and for each role, ``summarise`` gives the count and
the median and largest |error|.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipesim.analysis.run import run_scenario
from pipesim.cluster.hardware import gpu_profile
from pipesim.cluster.model import TransformerModel
from pipesim.cluster.transformer import layer_flops, model_flops_per_step
from pipesim.scenario.build import build_scenario, parse_spec
from pipesim.scenario.schema import ParallelSpec
from tests.cluster.ledger.rows import RatioRow, Row, TrainingRow
from tests.cluster.ledger.scenarios import Setting, ratio_scenario, training_scenario


def transformer(row: TrainingRow) -> TransformerModel:
    return TransformerModel(
        layers=row.layers,
        hidden=row.hidden,
        heads=row.heads,
        kv_heads=row.kv_heads,
        ffn_hidden=row.ffn_hidden,
        mlp=row.mlp,
        seq_len=row.seq_len,
        vocab=row.vocab,
        recompute=row.recompute,
        flash_attention=row.flash_attention,
    )


def published_flops(row: TrainingRow) -> float:
    """The FLOPs of one step as the publication counted them: Megatron-LM's
    ``num_floating_point_operations`` (pipesim's ``model_flops_per_step``), plus one more
    forward of every layer where the publication counted the recomputation (Narayanan et
    al. 2021, eq. 3: ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``)."""
    if row.moe is not None:
        raise ValueError(f"{row.id}: a mixture-of-experts row gives a step time or tokens/s")
    model = transformer(row)
    flops = model_flops_per_step(model, row.global_batch)
    if row.flops_counted == "recompute":
        flops += layer_flops(model, 1).forward * row.layers * row.global_batch
    elif row.flops_counted != "model":
        raise ValueError(f"{row.id}: unknown flops_counted {row.flops_counted!r}")
    return flops


def published_step_ms(row: TrainingRow) -> float:
    """The step time the publication implies, in milliseconds."""
    if row.metric == "step_s":
        return row.value * 1e3
    if row.metric == "tokens_per_s_per_gpu":
        return row.global_batch * row.seq_len / (row.value * row.gpus) * 1e3
    if row.metric == "tflops_per_gpu":
        rate = row.value * 1e12
    elif row.metric == "mfu":
        rate = row.value * gpu_profile(row.gpu).peak_tflops * 1e12
    else:
        raise ValueError(f"{row.id}: unknown metric {row.metric!r}")
    return published_flops(row) / (rate * row.gpus) * 1e3


def missing_feature(row: Row) -> str | None:
    """What the row needs that this pipesim's scenario schema lacks, or None."""
    if (
        isinstance(row, TrainingRow)
        and row.context > 1
        and "context" not in ParallelSpec.model_fields
    ):
        return "parallel.context"
    return None


def simulate(scenario: dict):
    """The report of one simulated step of a scenario dict."""
    spec = parse_spec(scenario, scenario["name"])
    return run_scenario(build_scenario(spec, scenario["name"])).report


def predicted_step_ms(row: TrainingRow, settings: Sequence[Setting] = ()) -> float:
    return simulate(training_scenario(row, settings)).makespan_ms


def predicted_ratio(row: RatioRow, settings: Sequence[Setting] = ()) -> float:
    """The baseline's step over the schedule's (a throughput ratio). A memory limit is
    ``memory_limit_x`` times the most activation memory a device holds under the baseline."""
    base = simulate(ratio_scenario(row, row.baseline, settings))
    limit = None
    if row.memory_limit_x is not None:
        limit = row.memory_limit_x * max(d.peak_activation_bytes for d in base.per_device)
    other = simulate(ratio_scenario(row, row.schedule, settings, limit))
    return base.makespan_ms / other.makespan_ms


def row_error(row: Row, settings: Sequence[Setting] = ()) -> float:
    if isinstance(row, RatioRow):
        return predicted_ratio(row, settings) / row.published_ratio - 1
    return predicted_step_ms(row, settings) / published_step_ms(row) - 1


@dataclass(frozen=True, slots=True)
class Outcome:
    """One row's result: its error, or None with the feature it waits for."""

    row: Row
    error: float | None
    pending: str | None = None

    @property
    def regime(self) -> str:
        return f"{self.row.gpu} {self.row.regime_kind}"


def evaluate(rows: Sequence[Row], settings: Sequence[Setting] = ()) -> list[Outcome]:
    outcomes = []
    for row in rows:
        feature = missing_feature(row)
        if feature is not None:
            outcomes.append(Outcome(row, None, feature))
        else:
            outcomes.append(Outcome(row, row_error(row, settings)))
    return outcomes


def _stats(errors: list[float]) -> dict[str, float | int]:
    absolute = np.abs(errors)
    return {
        "count": len(errors),
        "median_abs_error": float(np.median(absolute)),
        "max_abs_error": float(np.max(absolute)),
    }


def summarise(outcomes: Sequence[Outcome]) -> list[dict]:
    """Per regime (GPU x kind, mixture-of-experts runs a kind of their own) and role, then
    per kind over every GPU: count, median and max |error| of the rows that were simulated."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    for o in outcomes:
        if o.error is None:
            continue
        for gpu in (o.row.gpu, "all"):
            groups.setdefault((gpu, o.row.regime_kind, o.row.role), []).append(o.error)
    return [
        {"gpu": gpu, "kind": kind, "role": role, **_stats(errors)}
        for (gpu, kind, role), errors in sorted(
            groups.items(), key=lambda item: (item[0][0] == "all", item[0])
        )
    ]
