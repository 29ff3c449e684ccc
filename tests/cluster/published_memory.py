"""Published peak memory as pipesim scenarios: the memory rows behind docs/validation.md.

Each row of ``data/published_memory.csv`` is one training run whose peak memory per GPU
was measured and published, with its model, parallel layout, schedule, optimizer and what
the number measures:

* ``allocated``: the allocator's peak of live tensors (``torch.cuda.max_memory_allocated``,
  Megatron-LM's "max allocated"): pipesim's static memory plus peak activations;
* ``reserved``: what the caching allocator holds (``max_memory_reserved``, torchtitan's
  ``memory:`` line): the allocated bytes and ``hardware.fragmentation`` on top;
* ``device``: the whole process on the GPU (``nvidia-smi``): pipesim's peak, CUDA context
  and communication buffers (``hardware.runtime_bytes``) included.

The prediction is the largest over devices (the sources report the worst rank). Roles were
set before any comparison: ``calibrate`` rows may be used to fit the runtime-memory
defaults, ``held_out`` rows never are.

    python -m tests.cluster.published_memory      # every row's error with the defaults
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, fields
from pathlib import Path

from pipesim.analysis.run import run_scenario
from pipesim.cluster.hardware import DEFAULT_RUNTIME_BYTES
from pipesim.scenario.build import build_scenario, parse_spec

DATA = Path(__file__).parent / "data" / "published_memory.csv"
GIB = 2**30
MEASURES = ("allocated", "reserved", "device")


@dataclass(frozen=True, slots=True)
class PublishedMemory:
    id: str
    role: str  # calibrate | held_out
    source: str
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
    microbatches: int
    schedule: str
    pipeline_layout: str
    flash_attention: bool
    recompute: bool
    sequence_parallel: bool
    optimizer: str
    dtype: str
    measure: str
    peak_gib: float
    recorded_error: float  # this row's error when last recorded (+: pipesim holds more)


def _parse(raw: dict[str, str]) -> PublishedMemory:
    values: dict[str, object] = {}
    for field in fields(PublishedMemory):
        text = raw[field.name]
        if field.type in ("int", "int | None"):
            values[field.name] = int(text) if text else None
        elif field.type == "bool":
            values[field.name] = text == "true"
        elif field.type == "float":
            values[field.name] = float(text)
        else:
            values[field.name] = text
    return PublishedMemory(**values)  # type: ignore[arg-type]


def load_rows() -> list[PublishedMemory]:
    with DATA.open(newline="") as handle:
        return [_parse(raw) for raw in csv.DictReader(handle)]


def scenario_data(row: PublishedMemory) -> dict:
    """The row as a scenario: its schedule over ``pipeline`` devices, its model, layout
    and optimizer on ``tensor x data`` GPUs per stage."""
    pipeline: dict[str, object] = {
        "schedule": row.schedule,
        "devices": row.pipeline,
        "microbatches": row.microbatches,
        "microbatch_size": row.microbatch_size,
        "virtual_stages": row.virtual_stages,
    }
    model: dict[str, object] = {
        "layers": row.layers,
        "hidden": row.hidden,
        "heads": row.heads,
        "ffn_hidden": row.ffn_hidden,
        "mlp": row.mlp,
        "seq_len": row.seq_len,
        "vocab": row.vocab,
        "dtype": row.dtype,
        "flash_attention": row.flash_attention,
        "recompute": row.recompute,
    }
    if row.kv_heads is not None:
        model["kv_heads"] = row.kv_heads
    if row.pipeline_layout:
        model["pipeline_layout"] = row.pipeline_layout
    return {
        "schema_version": 1,
        "name": row.id,
        "pipeline": pipeline,
        "model": model,
        "parallel": {
            "tensor": row.tensor,
            "data": row.data,
            "sequence_parallel": row.sequence_parallel,
            "optimizer": row.optimizer,
        },
        "hardware": {"gpu": row.gpu, "gpus_per_node": 8},
    }


def predicted_peak_gib(row: PublishedMemory) -> float:
    """pipesim's peak for what the row measures, the largest over devices, in GiB."""
    if row.measure not in MEASURES:
        raise ValueError(f"{row.id}: unknown measure {row.measure!r}")
    spec = parse_spec(scenario_data(row), row.id)
    report = run_scenario(build_scenario(spec, row.id)).report
    peaks = []
    for device in report.per_device:
        allocated = device.static_memory_bytes + device.peak_activation_bytes
        if row.measure == "allocated":
            peaks.append(allocated)
        elif row.measure == "reserved":
            peaks.append(device.peak_memory_bytes - DEFAULT_RUNTIME_BYTES)
        else:
            peaks.append(device.peak_memory_bytes)
    return max(peaks) / GIB


def error(row: PublishedMemory) -> float:
    """Relative error of the predicted peak (+0.05: pipesim predicts 5 % more)."""
    return predicted_peak_gib(row) / row.peak_gib - 1


def _report() -> None:
    rows = load_rows()
    errs = [error(r) for r in rows]
    for row, err in zip(rows, errs, strict=True):
        predicted = (1 + err) * row.peak_gib
        print(
            f"{row.id:24s} {row.role:9s} {row.gpu:14s} {row.measure:9s} "
            f"measured {row.peak_gib:6.1f} GiB  predicted {predicted:6.1f} GiB  {err:+7.1%}"
        )
    for role in ("calibrate", "held_out"):
        sub = sorted(abs(e) for r, e in zip(rows, errs, strict=True) if r.role == role)
        within = sum(e <= 0.10 for e in sub)
        print(
            f"{role}: {within} of {len(sub)} within 10 %, median |error| {sub[len(sub) // 2]:.1%}"
        )


if __name__ == "__main__":
    _report()
