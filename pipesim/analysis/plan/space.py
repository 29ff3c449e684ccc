"""The planner's search space: every way to lay a model out on N GPUs, as candidates.

A training job on N GPUs is a product of three parallel sizes, ``N = tensor x pipeline x
data``. Tensor parallelism splits every layer's matrices across GPUs of one node (it must
divide the attention heads, the key/value heads and the FFN width, and fit in the node);
pipeline parallelism cuts the layers into stages (at most one stage per layer); data
parallelism copies the pipeline, each copy taking ``1/data`` of the global batch. On top of
the layout come the choices of one pipeline: the schedule policy, the number of virtual
stages (chunks per device), the microbatch size (the microbatch count follows from the
global batch: ``G = microbatches x microbatch_size x data``), activation recomputation,
the ZeRO stage, how layers are spread over stages (``even`` or ``balanced``), and whether
the data-parallel and the tensor-parallel communication overlap compute. Context
parallelism (``parallel.context``) is not an axis: it stays at the scenario's value, and
the GPUs are ``tensor x context x pipeline x data``. A MoE model adds expert parallelism
(``parallel.expert``): by default every power of two that divides its experts (with
redundant ones, its expert slots) up to the GPUs; its EP groups are carved out of the data
x context ranks (``pipesim.cluster.expert_parallel``), so a size that does not divide the
experts or data x context, or exceeds the GPUs, is pruned with that reason. It also adds
the combined-1F1B schedules (``1f1b-a2a-overlap``, ``interleaved-1f1b-a2a-overlap``, whose
merged units overlap the all-to-alls) to the schedule axis; without expert parallelism they
have nothing to overlap and are pruned. Those two are tried with and without their
delayed weight gradient (``pipeline.delay_wgrad``); a schedule without the option runs as
if it were off, so it is taken only where the axis holds false. A dense model's space has
none of them.

Each axis is named by the scenario key it sets (``parallel.tensor``,
``pipeline.schedule``, ...), so ``--space KEY=V1,V2`` narrows or widens it in the same
words a scenario is written in. ``parallel.data`` and ``pipeline.microbatches`` are derived;
narrowing them keeps only candidates that take those values.

The space is the product of the axes, where a policy with a fixed chunk count (1F1B: one,
ZB-V: two) is taken only at the ``pipeline.virtual_stages`` values it runs with. A
combination that cannot run (the batch does not split, more stages than layers, a
schedule's own constraint), or that is another candidate under another name (a ZeRO stage
with one replica, tensor-parallel overlap without tensor parallelism), is a candidate
pruned with its reason, so the counts add up: ``space_size = pruned + bounded + scored``
(``bounded``: see ``bounding``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pipesim.analysis.plan.axes import (
    AXIS_ATTRIBUTES,
    Candidate,
    PlanError,
    parse_space,
)
from pipesim.cluster.fabric import DEFAULT_ORDER, FabricError, rank_layout
from pipesim.scenario.derive import check_context_parallel
from pipesim.scenario.schema import Mode, ScenarioError, ScenarioSpec
from pipesim.schedules import POLICIES, fit_virtual_stages
from pipesim.schedules.policies import A2A_OVERLAP_POLICIES
from pipesim.search import AUTO_POLICIES

DEFAULT_MICROBATCH_SIZES = (1, 2, 4, 8)
DEFAULT_VIRTUAL_STAGES = (1, 2, 4)
# Every ZeRO stage: 1 and 2 cost what plain data parallelism costs, 3 gathers the weights
# before every pass (pipesim.cluster.pass_time.with_parameter_gathers), so it wins only
# where its memory saving buys a faster layout.
DEFAULT_ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True, slots=True)
class Space:
    """The values of every axis, and the job around them (GPUs, global batch, layers)."""

    gpus: int
    global_batch: int
    layers: int
    axes: dict[str, tuple[Any, ...]]
    derived: dict[str, tuple[Any, ...] | None]  # parallel.data, pipeline.microbatches filters
    widths: tuple[int, ...] = ()  # what tensor parallelism must divide: heads, kv heads, FFN
    node_gpus: int = 0  # GPUs per node (tensor parallelism stays inside one)
    max_actions: int = 10_000_000  # the scenario's size guard (pipeline.max_actions)
    context: int = 1  # parallel.context, fixed at the scenario's value
    context_widths: tuple[int, ...] = ()  # all-to-all: split over tensor x context
    experts: int = 0  # a MoE model's expert slots (experts + redundant); 0: a dense model


def _divisors(number: int) -> list[int]:
    return [k for k in range(1, number + 1) if number % k == 0]


def default_axes(spec: ScenarioSpec, gpus: int) -> dict[str, tuple[Any, ...]]:
    """Every axis's values when ``--space`` says nothing about it."""
    par = spec.parallel
    node, widths = spec.hardware.gpus_per_node or gpus, _widths(spec)
    tensors = [t for t in _divisors(node) if gpus % t == 0 and all(w % t == 0 for w in widths)]
    moe = bool(_expert_slots(spec))
    schedules = [n for n in POLICIES if moe or n not in A2A_OVERLAP_POLICIES]
    return {
        "parallel.tensor": tuple(tensors),
        "pipeline.devices": (),  # empty: every divisor of gpus / tensor, up to the layers
        "pipeline.schedule": tuple(schedules),
        "pipeline.virtual_stages": DEFAULT_VIRTUAL_STAGES,
        "pipeline.microbatch_size": DEFAULT_MICROBATCH_SIZES,
        "model.recompute": (False, True),
        "parallel.zero_stage": DEFAULT_ZERO_STAGES,
        "model.partition": ("even", "balanced"),
        "parallel.sequence_parallel": (par.sequence_parallel,),
        "parallel.dp_overlap": (False, True),
        "parallel.tp_overlap": (False, True),
        "parallel.expert": _expert_sizes(_expert_slots(spec), gpus),  # (None,): dense
        "pipeline.delay_wgrad": (False, True) if moe else (None,),
    }


def _expert_slots(spec: ScenarioSpec) -> int:
    moe = spec.model.moe
    return 0 if moe is None else moe.experts + moe.redundant_experts


def _expert_sizes(slots: int, gpus: int) -> tuple[int | None, ...]:
    """Powers of two that divide the expert slots, up to the GPUs; a dense model has no
    expert axis (None)."""
    if not slots:
        return (None,)
    sizes, size = [1], 2
    while size <= gpus and slots % size == 0:
        sizes.append(size)
        size *= 2
    return tuple(sizes)


def _widths(spec: ScenarioSpec) -> tuple[int, ...]:
    model = spec.model
    return (model.heads, model.kv_heads or model.heads, model.ffn_hidden or 4 * model.hidden)


def build_space(spec: ScenarioSpec, source: str, gpus: int, items: Sequence[str]) -> Space:
    """The space for ``gpus`` GPUs: the default axes, with each ``--space KEY=V1,V2``
    replacing its axis's values. PlanError names a bad key or value."""
    if spec.model is None or spec.hardware.gpu is None:
        raise PlanError(
            f"{source}: model: pipesim plan needs a model: section and hardware.gpu "
            "(costs are derived from the model)"
        )
    if spec.model.global_batch is None:
        raise PlanError(f"{source}: model.global_batch: required by pipesim plan")
    if spec.pipeline.mode != Mode.TRAIN:
        raise PlanError(f"{source}: pipeline.mode: pipesim plan plans training steps (mode: train)")
    for name, given in (
        ("hardware.placement", spec.hardware.placement),
        ("variability", spec.variability),
    ):
        if given is not None:
            raise PlanError(
                f"{source}: {name}: not used by pipesim plan, which lays the devices out "
                "itself and scores deterministic steps; remove it"
            )
    if gpus < 1:
        raise PlanError(f"--gpus {gpus}: must be a positive number of GPUs")
    _check_fabric(spec, source, gpus)
    axes: dict[str, tuple[Any, ...]] = default_axes(spec, gpus)
    derived: dict[str, tuple[Any, ...] | None] = {
        "parallel.data": None,
        "pipeline.microbatches": None,
    }
    for key, values in _given_axes(spec, items).items():
        if key in derived:
            derived[key] = values
        else:
            axes[key] = values
    node, par = spec.hardware.gpus_per_node or gpus, spec.parallel
    try:  # tensor is an axis here: each size the heads cannot take is pruned by _layout
        one = spec.model_copy(update={"parallel": par.model_copy(update={"tensor": 1})})
        check_context_parallel(one, source)
    except ScenarioError as exc:
        raise PlanError(str(exc)) from None
    space = Space(
        gpus,
        spec.model.global_batch,
        spec.model.layers,
        axes,
        derived,
        _widths(spec),
        node,
        spec.pipeline.max_actions,
        par.context,
        _widths(spec)[:2] if par.context_mode == "all-to-all" else (),
        _expert_slots(spec),
    )
    check_size(space)
    return space


def _given_axes(spec: ScenarioSpec, items: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    """``--space`` read; a dense model takes no ``pipeline.delay_wgrad`` axis (off: ignored)."""
    given = parse_space(items)
    if not _expert_slots(spec):
        if True in given.get("pipeline.delay_wgrad", ()):
            raise PlanError(
                "--space pipeline.delay_wgrad: only the combined-1F1B schedules take it, "
                "which need model.moe (a mixture-of-experts model); allowed: false"
            )
        given.pop("pipeline.delay_wgrad", None)
    return given


def _check_fabric(spec: ScenarioSpec, source: str, gpus: int) -> None:
    """Whether ``gpus`` GPUs fill whole pods of ``hardware.topology`` (every candidate
    uses all of them, so one that does not fits none)."""
    hw = spec.hardware
    if hw.topology is None:
        return
    if hw.gpus_per_node is None:
        raise PlanError(f"{source}: hardware.topology: needs hardware.gpus_per_node")
    fabric = replace(hw.topology.fabric(), order=DEFAULT_ORDER)
    try:
        rank_layout(fabric, {"dp": gpus}, hw.gpus_per_node)
    except FabricError as exc:
        raise PlanError(f"{source}: {exc} (with --gpus {gpus})") from None


def policy_chunks(name: str, virtual_stages: Sequence[int]) -> list[int]:
    """The chunk counts of the axis that ``name`` runs with (a searched policy: its own)."""
    if name in AUTO_POLICIES:
        return [v for v in virtual_stages if v == AUTO_POLICIES[name]]
    return [v for v in virtual_stages if fit_virtual_stages(name, v) == v]


MAX_SPACE = 2_000_000  # candidates: enumerating more would hold gigabytes before scoring


def check_size(space: Space) -> None:
    """Refuse, before enumerating, a space larger than ``MAX_SPACE`` candidates (counted
    from the axes: an upper bound of what ``enumerate_space`` yields)."""
    pipelines = max(len(pipeline_sizes(space, t)) for t in space.axes["parallel.tensor"])
    bound = len(space.axes["parallel.tensor"]) * pipelines
    for key, values in space.axes.items():
        if key not in ("parallel.tensor", "pipeline.devices"):
            bound *= len(values)
    if bound > MAX_SPACE:
        raise PlanError(
            f"--space: up to {bound:,} candidates, over the limit of {MAX_SPACE:,}; "
            "narrow an axis with --space KEY=V1,V2"
        )


def enumerate_space(space: Space) -> Iterator[tuple[Candidate | None, str | None]]:
    """Every point of the space in a fixed order, as ``(candidate, None)`` or, for a
    combination that cannot form a job, ``(None, reason)``."""
    axes = space.axes
    layouts = [(t, p) for t in axes["parallel.tensor"] for p in pipeline_sizes(space, t)]
    rest = [
        axes[k]
        for k in (
            "model.recompute",
            "parallel.zero_stage",
            "model.partition",
            "parallel.sequence_parallel",
            "parallel.dp_overlap",
            "parallel.tp_overlap",
        )
    ]
    for tensor, devices in layouts:
        for name in axes["pipeline.schedule"]:
            for chunks in policy_chunks(name, axes["pipeline.virtual_stages"]):
                for size in axes["pipeline.microbatch_size"]:
                    layout = _layout(space, tensor, devices, chunks, size)
                    point = (tensor, devices, name, chunks, size)
                    for expert, delay in itertools.product(
                        axes["parallel.expert"], _delays(axes["pipeline.delay_wgrad"], name)
                    ):
                        yield from _candidates(space, point, layout, (expert, delay), rest)


def _delays(values: tuple[Any, ...], name: str) -> tuple[bool | None, ...]:
    """The ``pipeline.delay_wgrad`` values ``name`` is tried at: the axis's where it takes
    the option (dense: None, pruned later), else None (off) where the axis allows off."""
    if name in A2A_OVERLAP_POLICIES:
        return tuple(v for v in values if v is not None) or (None,)
    return (None,) if any(v in (None, False) for v in values) else ()


def _candidates(
    space: Space,
    point: tuple[int, int, str, int, int],
    layout: tuple[str | None, int, int],
    moe: tuple[int | None, bool | None],
    rest: list[tuple[Any, ...]],
) -> Iterator[tuple[Candidate | None, str | None]]:
    """One layout's candidates at one EP size and delay_wgrad (``moe``), every combination
    of the ``rest`` axes: ``point`` is (tensor, devices, schedule, chunks, microbatch size),
    ``layout`` what ``_layout`` says of it."""
    tensor, devices, name, chunks, size = point
    expert, delay = moe
    reason, data, count = layout
    reason = reason or _expert_reason(space, expert, data) or _overlap_reason(space, name, expert)
    for combo in itertools.product(*rest):
        if reason is not None:
            yield None, reason
            continue
        if (expert or 1) > 1 and combo[1] == 3:  # combo: recompute, zero_stage, ...
            yield None, "ZeRO-3 with expert parallelism (not modelled)"
            continue
        replicas = data * space.context  # ZeRO shards over data x context
        if (same := _same_as_another(tensor, replicas, combo)) is not None:
            yield None, same
            continue
        found = Candidate(tensor, devices, data, name, chunks, size, count, *combo, expert, delay)
        yield found, None


def _expert_reason(space: Space, expert: int | None, data: int) -> str | None:
    """Why an EP size cannot run with ``data`` replicas (module docstring), or None."""
    if expert in (None, 1):
        return None
    if not space.experts:
        return "expert parallelism without model.moe"
    if space.experts % expert:
        return "expert size does not divide the experts"
    if expert > space.gpus:
        return "expert size exceeds the GPUs"
    if (data * space.context) % expert:
        return "expert size does not divide data x context"
    return None


def _overlap_reason(space: Space, name: str, expert: int | None) -> str | None:
    """Why a combined-1F1B schedule has nothing to overlap here, or None."""
    if name not in A2A_OVERLAP_POLICIES:
        return None
    if not space.experts:
        return "all-to-all overlap without model.moe"
    if expert in (None, 1):
        return "all-to-all overlap without expert parallelism (no all-to-all)"
    return None


def _same_as_another(tensor: int, data: int, combo: tuple[Any, ...]) -> str | None:
    """Why ``combo`` is another candidate of the space under another name, or None.

    ZeRO shards over the data-parallel replicas, so with one replica stages 1 to 3 are
    stage 0 (same memory, same time); tensor-parallel overlap hides tensor-parallel
    communication, which one GPU per layer does not have. Scoring both would count one
    configuration twice."""
    _, zero_stage, _, _, _, tp_overlap = combo
    if zero_stage > 0 and data == 1:
        return "ZeRO stage > 0 with one replica (nothing to shard: it is stage 0)"
    if tp_overlap and tensor == 1:
        return "tp_overlap without tensor parallelism (nothing to overlap: it is false)"
    return None


def pipeline_sizes(space: Space, tensor: int) -> tuple[int, ...]:
    """The ``pipeline.devices`` values tried with ``tensor``: the axis as given, or by
    default every divisor of ``gpus / (tensor x context)`` up to the number of layers."""
    given = space.axes["pipeline.devices"]
    if given:
        return given
    if space.gpus % (tensor * space.context):
        return (1,)  # pruned by _layout with its reason
    return tuple(p for p in _divisors(space.gpus // (tensor * space.context)) if p <= space.layers)


def _layout(
    space: Space, tensor: int, devices: int, chunks: int, size: int
) -> tuple[str | None, int, int]:
    """``(reason it cannot run or None, data size, microbatches)``."""
    if space.node_gpus % tensor or any(w % tensor for w in space.widths):
        return "tensor size does not divide the heads, kv heads, FFN width or node", 0, 0
    model_gpus = tensor * space.context * devices
    if any(w % (tensor * space.context) for w in space.context_widths):
        return "tensor x context does not divide the heads or kv heads (all-to-all)", 0, 0
    if space.gpus % model_gpus:
        return "tensor x context x pipeline does not divide the GPUs", 0, 0
    data = space.gpus // model_gpus
    if devices * chunks > space.layers:
        return "more stages than layers", data, 0
    count, rest = divmod(space.global_batch, size * data)
    if rest or count == 0:
        return "global batch does not split into microbatch_size x data", data, 0
    if devices * count * chunks * 3 > space.max_actions:
        return "over pipeline.max_actions (the size guard)", data, count
    for key, value in (("parallel.data", data), ("pipeline.microbatches", count)):
        wanted = space.derived[key]
        if wanted is not None and value not in wanted:
            return f"{key} not among the --space values", data, count
    return None, data, count


__all__ = [
    "AXIS_ATTRIBUTES",
    "Candidate",
    "PlanError",
    "Space",
    "build_space",
    "default_axes",
    "enumerate_space",
    "parse_space",
]
