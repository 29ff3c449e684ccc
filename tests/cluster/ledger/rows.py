"""The ledger's rows: published training runs and published schedule ratios, as read from
``tests/cluster/data``.

Two files, one row each:

* ``published_runs.csv``: a training run someone measured and published (the model's
  shape, the parallel layout, the batch, the hardware and what was achieved: TFLOP/s per
  GPU, MFU, a step time or tokens per second per GPU).
* ``schedule_ratios.csv``: one schedule's throughput over another's on the same model and
  hardware (the Zero Bubble paper's ZB-1p and ZB-2p over 1F1B).

Every row has a ``role``: ``calibrate`` (a fit may use it), ``held_out`` (no fit ever
sees it: chosen before any error was computed, see the files' notes) or ``excluded``
(what pipesim does not model yet: a GPU without a profile, an attention it has no model
of; kept for the record with the reason and not parsed further).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

DATA = Path(__file__).parent.parent / "data"
TRAINING_FILE = DATA / "published_runs.csv"
RATIO_FILE = DATA / "schedule_ratios.csv"
ROLES = ("calibrate", "held_out", "excluded")
USED = ("calibrate", "held_out")


@dataclass(frozen=True, slots=True)
class TrainingRow:
    """One published training run. ``metric`` says what ``value`` is: ``tflops_per_gpu``,
    ``mfu`` (of the GPU's dense bf16 peak), ``step_s`` or ``tokens_per_s_per_gpu``;
    ``flops_counted`` says whether the publication's FLOPs count the recomputed forward
    (``recompute``: Megatron-LM's hardware FLOPs of 2021-2022) or not (``model``)."""

    id: str
    role: str
    source: str
    gpu: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int | None
    ffn_hidden: int
    mlp: str
    vocab: int
    seq_len: int
    dtype: str
    gpus_per_node: int
    intra_node_link: str
    inter_node_link: str
    tensor: int
    pipeline: int
    data: int
    context: int
    virtual_stages: int
    partition: str
    microbatch_size: int
    global_batch: int
    recompute: bool
    flash_attention: bool
    sequence_parallel: bool
    tp_overlap: bool
    dp_overlap: bool
    scatter_gather: bool  # Megatron-LM's pipeline scatter/gather (before Megatron-Core)
    zero_stage: int
    optimizer: str | None  # parallel.optimizer where the run names one (FSDP2: fsdp)
    fp8: str | None  # model.fp8: tensorwise or blockwise GEMMs; empty for bf16 or fp16
    # Mixture-of-experts runs (empty for a dense one): the schedule where it is not the one
    # the layout implies (dualpipe, the combined-1F1B ones), its delayed weight gradient,
    # Megatron-LM's --pipeline-model-parallel-layout, a head width other than hidden / heads,
    # model.moe and model.mla as "key=value" pairs, MTP modules and the expert degrees
    schedule: str | None
    delay_wgrad: bool | None
    pipeline_layout: str | None
    head_dim: int | None
    moe: str | None
    mla: str | None
    mtp_layers: int | None
    expert: int | None
    expert_tensor: int | None
    flops_counted: str
    metric: str
    value: float
    recorded_error: float | None

    kind = "training"

    @property
    def gpus(self) -> int:
        return self.tensor * self.pipeline * self.data * self.context

    @property
    def regime_kind(self) -> str:
        """``moe`` for a mixture-of-experts run, summed up apart from the dense ones."""
        return "moe" if self.moe is not None else self.kind


@dataclass(frozen=True, slots=True)
class RatioRow:
    """One published schedule ratio: ``value / baseline_value`` is the throughput of
    ``schedule`` over that of ``baseline`` (samples per GPU per second, same model, same
    GPUs, same microbatches). ``memory_limit_x`` is the searched schedule's activation
    memory limit as a multiple of what ``baseline`` holds (ZB-1p: 1, ZB-2p: 2); empty for
    a fixed schedule."""

    id: str
    role: str
    source: str
    gpu: str
    layers: int
    hidden: int
    heads: int
    ffn_hidden: int
    vocab: int
    seq_len: int
    dtype: str
    gpus_per_node: int
    intra_node_link: str
    inter_node_link: str
    pipeline: int
    partition: str
    microbatch_size: int
    microbatches: int
    flash_attention: bool
    baseline: str
    schedule: str
    memory_limit_x: float | None
    baseline_value: float
    value: float
    recorded_error: float | None

    kind = "ratio"

    @property
    def published_ratio(self) -> float:
        return self.value / self.baseline_value

    @property
    def regime_kind(self) -> str:
        return self.kind


Row = TrainingRow | RatioRow


def _convert(text: str, kind: str, where: str) -> object:
    if kind.endswith("| None") and text == "":
        return None
    kind = kind.removesuffix(" | None")
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "bool":
        if text not in ("true", "false"):
            raise ValueError(f"{where}: expected true or false, got {text!r}")
        return text == "true"
    return text


def _parse(cls: type, raw: dict[str, str], line: int) -> Row:
    values = {}
    for field in fields(cls):
        where = f"{cls.__name__} line {line}, {field.name}"
        values[field.name] = _convert(raw[field.name].strip(), str(field.type), where)
    return cls(**values)


def read_raw(path: Path) -> list[dict[str, str]]:
    """Every row of a ledger file as text, excluded rows included."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for line, raw in enumerate(rows, start=2):
        if raw["role"] not in ROLES:
            raise ValueError(f"{path.name} line {line}: role {raw['role']!r} not in {ROLES}")
    return rows


def load_training(roles: Sequence[str] = USED) -> list[TrainingRow]:
    """The training rows of the given roles (excluded rows cannot be asked for: they are
    not parsed)."""
    raw = read_raw(TRAINING_FILE)
    return [_parse(TrainingRow, r, i) for i, r in enumerate(raw, start=2) if r["role"] in roles]


def load_ratios(roles: Sequence[str] = USED) -> list[RatioRow]:
    raw = read_raw(RATIO_FILE)
    return [_parse(RatioRow, r, i) for i, r in enumerate(raw, start=2) if r["role"] in roles]


def load_rows(roles: Sequence[str] = USED) -> list[Row]:
    """Every used row of both files: training runs first, then schedule ratios."""
    return [*load_training(roles), *load_ratios(roles)]


def excluded_rows() -> list[dict[str, str]]:
    """The excluded rows of both files, as text (id, source and the reason in notes)."""
    return [
        r for path in (TRAINING_FILE, RATIO_FILE) for r in read_raw(path) if r["role"] == "excluded"
    ]
