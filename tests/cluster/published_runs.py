"""Published training runs as pipesim scenarios: the data behind docs/validation.md.

Each row of ``data/published_runs.csv`` is one run someone measured and published: the
model's shape, the parallel layout, the batch and what was achieved (TFLOP/s per GPU, MFU
or tokens per second per GPU). ``published_step_ms`` turns the achievement into a step time
with the FLOPs formula the source used; ``predicted_step_ms`` builds the same run as a
pipesim scenario and simulates one step. ``fit`` refits the cost model's three calibrated
fractions on the ``calibrate`` rows.

    python -m tests.cluster.published_runs          # every row's error with the defaults
    python -m tests.cluster.published_runs --fit    # refit on the calibration rows
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from pipesim.analysis.run import run_scenario
from pipesim.cluster.hardware import gpu_profile
from pipesim.cluster.model import Efficiency, TransformerModel, model_flops_per_step
from pipesim.scenario.build import build_scenario, parse_spec

DATA = Path(__file__).parent / "data" / "published_runs.csv"
FITTED = ("max_fraction", "memory_fraction", "tensor_overlap_fraction")


@dataclass(frozen=True, slots=True)
class PublishedRun:
    id: str
    role: str  # calibrate | holdout | excluded
    layers: int
    hidden: int
    heads: int
    kv_heads: int | None
    ffn_hidden: int
    mlp: str
    vocab: int
    seq_len: int
    gpu: str
    tensor: int
    pipeline: int
    data: int
    virtual_stages: int
    microbatch_size: int
    global_batch: int
    recompute: bool
    sequence_parallel: bool
    tp_overlap: bool
    dp_overlap: bool
    zero_stage: int
    metric: str  # tflops_per_gpu | mfu
    value: float

    @property
    def gpus(self) -> int:
        return self.tensor * self.pipeline * self.data

    @property
    def model(self) -> TransformerModel:
        return TransformerModel(
            layers=self.layers,
            hidden=self.hidden,
            heads=self.heads,
            kv_heads=self.kv_heads,
            ffn_hidden=self.ffn_hidden,
            mlp=self.mlp,
            seq_len=self.seq_len,
            vocab=self.vocab,
            recompute=self.recompute,
            flash_attention=True,
        )


def _parse(raw: dict[str, str]) -> PublishedRun:
    values: dict[str, object] = {}
    for field in fields(PublishedRun):
        text = raw[field.name]
        if field.type in ("int", "int | None"):
            values[field.name] = int(text) if text else None
        elif field.type == "bool":
            values[field.name] = text == "true"
        elif field.type == "float":
            values[field.name] = float(text)
        else:
            values[field.name] = text
    return PublishedRun(**values)  # type: ignore[arg-type]


def load_runs(roles: Sequence[str] = ("calibrate", "holdout")) -> list[PublishedRun]:
    """The rows of the given roles. Excluded rows (what pipesim does not model: FP8, context
    parallelism, GPUs without a profile) stay in the file for the record, unparsed."""
    with DATA.open(newline="") as handle:
        return [_parse(raw) for raw in csv.DictReader(handle) if raw["role"] in roles]


def published_step_ms(run: PublishedRun) -> float:
    """The step time the publication implies. Megatron-LM reports model TFLOP/s per GPU and
    MFU from ``num_floating_point_operations`` (megatron/training/training.py),
    ``12 B s L h^2 (1 + g/a + s/h + k f/h + V/(2 L h))``, which is exactly
    ``model_flops_per_step`` (tests/cluster/test_architectures.py): step = FLOPs / (rate
    x GPUs). MFU is taken against the H100 SXM's 989.4 TFLOP/s (408.8 TFLOP/s is the
    table's 41 %)."""
    flops = model_flops_per_step(run.model, run.global_batch)
    if run.metric == "tflops_per_gpu":
        rate = run.value * 1e12
    elif run.metric == "mfu":
        rate = run.value * gpu_profile(run.gpu).peak_tflops * 1e12
    else:
        raise ValueError(f"{run.id}: unknown metric {run.metric!r}")
    return flops / (rate * run.gpus) * 1e3


def scenario_data(run: PublishedRun, efficiency: dict[str, float] | None = None) -> dict:
    """The run as a scenario: DGX H100 nodes (8 GPUs on NVLink 4, one NDR NIC per GPU),
    1F1B (GPipe order when there is one stage: the same step), interleaved 1F1B with
    ``virtual_stages`` > 1."""
    pipe: dict[str, object] = {"schedule": "1f1b", "devices": run.pipeline}
    if run.pipeline == 1:
        pipe["schedule"] = "gpipe"
    elif run.virtual_stages > 1:
        pipe.update(schedule="interleaved-1f1b", virtual_stages=run.virtual_stages)
    model = {
        "layers": run.layers,
        "hidden": run.hidden,
        "heads": run.heads,
        "ffn_hidden": run.ffn_hidden,
        "mlp": run.mlp,
        "seq_len": run.seq_len,
        "vocab": run.vocab,
        "flash_attention": True,
        "recompute": run.recompute,
        "microbatch_size": run.microbatch_size,
        "global_batch": run.global_batch,
        "efficiency": dict(efficiency or {}),
    }
    if run.kv_heads is not None:
        model["kv_heads"] = run.kv_heads
    return {
        "schema_version": 1,
        "name": run.id,
        "pipeline": pipe,
        "model": model,
        "parallel": {
            "tensor": run.tensor,
            "data": run.data,
            "zero_stage": run.zero_stage,
            "sequence_parallel": run.sequence_parallel,
            "tp_overlap": run.tp_overlap,
            "dp_overlap": run.dp_overlap,
        },
        "hardware": {
            "gpu": run.gpu,
            "gpus_per_node": 8,
            "intra_node_link": "nvlink4",
            "inter_node_link": "ib-ndr",
        },
    }


def predicted_step_ms(run: PublishedRun, efficiency: dict[str, float] | None = None) -> float:
    """pipesim's step time for the run: one simulated step of its scenario."""
    spec = parse_spec(scenario_data(run, efficiency), run.id)
    return run_scenario(build_scenario(spec, run.id)).report.makespan_ms


def errors(runs: Sequence[PublishedRun], efficiency: dict[str, float] | None = None):
    """Relative error of pipesim's step time for each run (+0.05: 5 % slower than real)."""
    return np.array([predicted_step_ms(r, efficiency) / published_step_ms(r) - 1 for r in runs])


def objective(runs: Sequence[PublishedRun], values: Sequence[float]) -> float:
    """What the fit minimises: the median plus half the largest |error|."""
    if any(not 0.05 <= v <= 1 for v in values):
        return float("inf")
    errs = np.abs(errors(runs, dict(zip(FITTED, map(float, values), strict=True))))
    return float(np.median(errs) + 0.5 * np.max(errs))


def nelder_mead(f: Callable[[np.ndarray], float], start: Sequence[float], iterations: int):
    """Plain Nelder-Mead (reflect, expand, contract, shrink), no dependency beyond NumPy."""
    points = [np.asarray(start, float)]
    points += [points[0] + 0.1 * np.eye(len(start))[i] for i in range(len(start))]
    values = [f(p) for p in points]
    for _ in range(iterations):
        order = np.argsort(values)
        points, values = [points[i] for i in order], [values[i] for i in order]
        centre = np.mean(points[:-1], axis=0)
        reflected = 2 * centre - points[-1]
        f_reflected = f(reflected)
        if f_reflected < values[0]:
            expanded = 3 * centre - 2 * points[-1]
            f_expanded = f(expanded)
            best = (expanded, f_expanded) if f_expanded < f_reflected else (reflected, f_reflected)
            points[-1], values[-1] = best
        elif f_reflected < values[-2]:
            points[-1], values[-1] = reflected, f_reflected
        else:
            contracted = (centre + points[-1]) / 2
            f_contracted = f(contracted)
            if f_contracted < values[-1]:
                points[-1], values[-1] = contracted, f_contracted
            else:
                points = [points[0]] + [(p + points[0]) / 2 for p in points[1:]]
                values = [values[0]] + [f(p) for p in points[1:]]
    best = int(np.argmin(values))
    return points[best], values[best]


def fit(runs: Sequence[PublishedRun], iterations: int = 150) -> dict[str, float]:
    """The three fractions that minimise ``objective`` on ``runs``, from pipesim's defaults
    (Nelder-Mead finds a local minimum: docs/validation.md tried several starts)."""
    defaults = Efficiency()
    start = [getattr(defaults, name) for name in FITTED]
    best, _ = nelder_mead(lambda x: objective(runs, x), start, iterations)
    return dict(zip(FITTED, map(float, best), strict=True))


def _report(efficiency: dict[str, float] | None) -> None:
    runs = load_runs()
    errs = errors(runs, efficiency)
    for run, err in zip(runs, errs, strict=True):
        print(f"{run.id:28s} {run.role:9s} {published_step_ms(run):10.1f} ms  {err:+7.1%}")
    for role in ("calibrate", "holdout"):
        sub = np.abs([e for r, e in zip(runs, errs, strict=True) if r.role == role])
        print(f"{role}: median |error| {np.median(sub):.1%}, max {np.max(sub):.1%}")
    print(f"all: median |error| {np.median(np.abs(errs)):.1%}, max {np.max(np.abs(errs)):.1%}")


if __name__ == "__main__":
    fitted = None
    if "--fit" in sys.argv:
        fitted = fit(load_runs(("calibrate",)))
        print("fitted:", ", ".join(f"{k}={v:.4f}" for k, v in fitted.items()))
    _report(fitted)
