"""A ledger row as the pipesim scenario a user would write for it.

The hardware comes from the row (``gpu``, ``intra_node_link``, ``inter_node_link``, GPUs
per node); a link name pipesim has no profile for is spelled out here with its source.
The schedule is the one the publication ran: 1F1B, interleaved 1F1B with
``virtual_stages`` > 1 (Megatron-LM's virtual pipeline), GPipe order where there is one
stage (the same step), or a ratio row's own schedule (``zb-auto`` under a memory limit for
the Zero Bubble paper's ZB-1p and ZB-2p), or the one a mixture-of-experts row names
(``dualpipe``, the combined-1F1B ``1f1b-a2a-overlap`` and ``interleaved-1f1b-a2a-overlap``,
with ``delay_wgrad``). ``parallel.context`` is written only when a row has context
parallelism, and ``model.fp8``, ``parallel.optimizer`` and the mixture-of-experts keys
(``model.moe``, ``model.mla``, ``model.head_dim``, ``model.mtp_layers``,
``model.pipeline_layout``, ``parallel.expert``, ``parallel.expert_tensor``) only when a row
names them, so rows without them build on every version of the schema.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from pipesim.cluster.efficiency import Efficiency
from tests.cluster.ledger.rows import RatioRow, TrainingRow

# Links pipesim has no named profile for, as {latency_us, bandwidth_gbps} per GPU.
CUSTOM_LINKS: dict[str, dict[str, float]] = {
    # Jean Zay's A100 nodes (BLOOM-176B): 4 Omni-Path 100 Gb/s links per node of 8 GPUs
    # (bigscience-workshop/bigscience, train/tr11-176B-ml/README.md: "4x 100 Gbps
    # Omni-Path"), 50 GB/s a node, 6.25 GB/s a GPU at line rate; 6.0 achievable by the
    # 24-of-25 GB/s rule of pipesim's ib-hdr profile; the network latency of ib-hdr.
    "omnipath-4x100": {"latency_us": 14.0, "bandwidth_gbps": 6.0},
    # H800 SXM: the H100 with its NVLink cut to 400 GB/s both directions, 200 GB/s each way
    # (DeepSeek-V3 technical report, arXiv:2412.19437, section 3.1); achievable 169 GB/s by
    # NVLink 4's measured ratio (380 of 450 GB/s, pipesim's nvlink4 profile).
    "nvlink-h800": {"latency_us": 3.4, "bandwidth_gbps": 169.0},
}


@dataclass(frozen=True, slots=True)
class Parameter:
    """A number a fit may set: its name, how it enters a scenario (``apply(scenario,
    value)`` edits the scenario's dict in place), its bounds and where a fit starts."""

    name: str
    apply: Callable[[dict, float], None]
    low: float
    high: float
    start: float


Setting = tuple[Parameter, float]


def apply_settings(scenario: dict, settings: Sequence[Setting]) -> dict:
    for parameter, value in settings:
        parameter.apply(scenario, value)
    return scenario


def _link(name: str) -> str | dict[str, float]:
    return dict(CUSTOM_LINKS[name]) if name in CUSTOM_LINKS else name


def _partition(text: str) -> list[int] | str:
    if text in ("", "balanced"):
        return text or "even"
    return [int(part) for part in text.split()]


def _pairs(text: str) -> dict[str, int | float]:
    """``"experts=128 top_k=8"`` as ``{"experts": 128, "top_k": 8}`` (numbers only)."""
    found: dict[str, int | float] = {}
    for pair in text.split():
        key, _, value = pair.partition("=")
        found[key] = float(value) if "." in value else int(value)
    return found


def _mixture(row: TrainingRow) -> dict:
    """The model keys of a mixture-of-experts row, those it gives."""
    model: dict[str, object] = {}
    if row.moe is not None:
        model["moe"] = _pairs(row.moe)
    if row.mla is not None:
        model.update(attention="mla", mla=_pairs(row.mla))
    if row.head_dim is not None:
        model["head_dim"] = row.head_dim
    if row.mtp_layers:
        model["mtp_layers"] = row.mtp_layers
    return model


def _hardware(row: TrainingRow | RatioRow) -> dict:
    return {
        "gpu": row.gpu,
        "gpus_per_node": row.gpus_per_node,
        "intra_node_link": _link(row.intra_node_link),
        "inter_node_link": _link(row.inter_node_link),
    }


def _model(row: TrainingRow | RatioRow, microbatch_size: int, global_batch: int) -> dict:
    model = {
        "layers": row.layers,
        "hidden": row.hidden,
        "heads": row.heads,
        "ffn_hidden": row.ffn_hidden,
        "seq_len": row.seq_len,
        "vocab": row.vocab,
        "dtype": row.dtype,
        "flash_attention": row.flash_attention,
        "partition": _partition(row.partition),
        "microbatch_size": microbatch_size,
        "global_batch": global_batch,
        "efficiency": {},
    }
    if isinstance(row, TrainingRow):
        model.update(mlp=row.mlp, recompute=row.recompute)
        if row.kv_heads is not None:
            model["kv_heads"] = row.kv_heads
        if row.fp8 is not None:
            model["fp8"] = row.fp8
        model.update(_mixture(row))
        if row.pipeline_layout is not None:
            del model["partition"]
            model["pipeline_layout"] = row.pipeline_layout
    return model


def _pipeline(row: TrainingRow) -> dict[str, object]:
    """The row's schedule: its own where it names one, else 1F1B, interleaved 1F1B with
    virtual stages, GPipe order with one stage."""
    pipe: dict[str, object] = {"schedule": "1f1b", "devices": row.pipeline}
    if row.schedule is not None:
        pipe["schedule"] = row.schedule
    elif row.pipeline == 1:
        pipe["schedule"] = "gpipe"
    elif row.virtual_stages > 1:
        pipe["schedule"] = "interleaved-1f1b"
    if row.virtual_stages > 1 and pipe["schedule"] != "gpipe":
        pipe["virtual_stages"] = row.virtual_stages
    if row.delay_wgrad:
        pipe["delay_wgrad"] = True
    return pipe


def training_scenario(row: TrainingRow, settings: Sequence[Setting] = ()) -> dict:
    """The training run as a scenario, with the fit's ``settings`` applied."""
    pipe = _pipeline(row)
    parallel: dict[str, object] = {
        "tensor": row.tensor,
        "data": row.data,
        "zero_stage": row.zero_stage,
        "sequence_parallel": row.sequence_parallel,
        "tp_overlap": row.tp_overlap,
        "dp_overlap": row.dp_overlap,
    }
    if row.scatter_gather:
        parallel["pipeline_scatter_gather"] = True
    if row.context > 1:
        parallel["context"] = row.context
    if row.optimizer is not None:
        parallel["optimizer"] = row.optimizer
    if row.expert is not None:
        parallel["expert"] = row.expert
    if row.expert_tensor is not None:
        parallel["expert_tensor"] = row.expert_tensor
    scenario = {
        "schema_version": 1,
        "name": row.id,
        "pipeline": pipe,
        "model": _model(row, row.microbatch_size, row.global_batch),
        "parallel": parallel,
        "hardware": _hardware(row),
    }
    return apply_settings(scenario, settings)


def ratio_scenario(
    row: RatioRow,
    schedule: str,
    settings: Sequence[Setting] = (),
    memory_limit_bytes: float | None = None,
) -> dict:
    """One side of a schedule ratio: the row's model on its pipeline under ``schedule``
    (no tensor or data parallelism: the Zero Bubble paper's runs are pipeline-only)."""
    pipe: dict[str, object] = {"schedule": schedule, "devices": row.pipeline}
    if memory_limit_bytes is not None:
        pipe["memory_limit_bytes"] = memory_limit_bytes
    global_batch = row.microbatch_size * row.microbatches
    scenario = {
        "schema_version": 1,
        "name": f"{row.id}-{schedule}",
        "pipeline": pipe,
        "model": _model(row, row.microbatch_size, global_batch),
        "hardware": _hardware(row),
    }
    return apply_settings(scenario, settings)


def efficiency_field(
    name: str, low: float = 0.05, high: float = 1.0, start: float | None = None
) -> Parameter:
    """A field of ``model.efficiency`` as a fit parameter, starting at ``start``, by
    default pipesim's default for it."""

    def apply(scenario: dict, value: float) -> None:
        scenario["model"]["efficiency"][name] = value

    begin = getattr(Efficiency(), name) if start is None else start
    return Parameter(name, apply, low, high, float(begin))


def for_gpu(gpu: str, parameter: Parameter) -> Parameter:
    """``parameter`` applied to the rows on ``gpu`` only, named ``name@gpu``: a per-GPU
    fit, e.g. ``for_gpu("a100-sxm-80gb", efficiency_field("max_fraction"))``."""

    def apply(scenario: dict, value: float) -> None:
        if scenario["hardware"]["gpu"] == gpu:
            parameter.apply(scenario, value)

    return replace(parameter, name=f"{parameter.name}@{gpu}", apply=apply)
