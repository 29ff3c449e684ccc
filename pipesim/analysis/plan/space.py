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
the GPUs are ``tensor x context x pipeline x data``.

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

from pipesim.analysis.grid import parse_grid
from pipesim.cluster.fabric import DEFAULT_ORDER, FabricError, rank_layout
from pipesim.scenario.derive import check_context_parallel
from pipesim.scenario.schema import Mode, ScenarioError, ScenarioSpec
from pipesim.schedules import POLICIES, fit_virtual_stages
from pipesim.search import AUTO_POLICIES


class PlanError(ValueError):
    """A plan that cannot be made as asked (a bad --space key or value, bad --gpus); one
    line."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One configuration of the job: a point of the space, in the scenario's own terms."""

    tensor: int
    devices: int
    data: int
    schedule: str
    virtual_stages: int
    microbatch_size: int
    microbatches: int
    recompute: bool
    zero_stage: int
    partition: str
    sequence_parallel: bool
    dp_overlap: bool
    tp_overlap: bool

    def keys(self) -> dict[str, Any]:
        """The scenario keys this candidate sets, named as ``--space`` names them."""
        return {key: getattr(self, attr) for key, attr in AXIS_ATTRIBUTES.items()}


# Scenario key -> Candidate attribute, in the order results show them.
AXIS_ATTRIBUTES = {
    "parallel.tensor": "tensor",
    "pipeline.devices": "devices",
    "parallel.data": "data",
    "pipeline.schedule": "schedule",
    "pipeline.virtual_stages": "virtual_stages",
    "pipeline.microbatch_size": "microbatch_size",
    "pipeline.microbatches": "microbatches",
    "model.recompute": "recompute",
    "parallel.zero_stage": "zero_stage",
    "model.partition": "partition",
    "parallel.sequence_parallel": "sequence_parallel",
    "parallel.dp_overlap": "dp_overlap",
    "parallel.tp_overlap": "tp_overlap",
}
COUNT_KEYS = (
    "parallel.tensor",
    "pipeline.devices",
    "parallel.data",
    "pipeline.virtual_stages",
    "pipeline.microbatch_size",
    "pipeline.microbatches",
)
BOOL_KEYS = (
    "model.recompute",
    "parallel.sequence_parallel",
    "parallel.dp_overlap",
    "parallel.tp_overlap",
)
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


def _divisors(number: int) -> list[int]:
    return [k for k in range(1, number + 1) if number % k == 0]


def default_axes(spec: ScenarioSpec, gpus: int) -> dict[str, tuple[Any, ...]]:
    """Every axis's values when ``--space`` says nothing about it."""
    par = spec.parallel
    node, widths = spec.hardware.gpus_per_node or gpus, _widths(spec)
    tensors = [t for t in _divisors(node) if gpus % t == 0 and all(w % t == 0 for w in widths)]
    return {
        "parallel.tensor": tuple(tensors),
        "pipeline.devices": (),  # empty: every divisor of gpus / tensor, up to the layers
        "pipeline.schedule": tuple(POLICIES),
        "pipeline.virtual_stages": DEFAULT_VIRTUAL_STAGES,
        "pipeline.microbatch_size": DEFAULT_MICROBATCH_SIZES,
        "model.recompute": (False, True),
        "parallel.zero_stage": DEFAULT_ZERO_STAGES,
        "model.partition": ("even", "balanced"),
        "parallel.sequence_parallel": (par.sequence_parallel,),
        "parallel.dp_overlap": (False, True),
        "parallel.tp_overlap": (False, True),
    }


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
    for key, values in parse_space(items).items():
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
    )
    check_size(space)
    return space


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


def parse_space(items: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    """``["parallel.tensor=4,8", ...]`` -> ``{key: values}``, each value checked."""
    try:
        grid = parse_grid(items)
    except ValueError as exc:
        raise PlanError(str(exc).replace("--grid", "--space")) from None
    parsed = {}
    for axis in grid:
        if axis.key not in AXIS_ATTRIBUTES:
            raise PlanError(
                f"--space {axis.key}: not an axis of the plan; allowed: "
                + ", ".join(AXIS_ATTRIBUTES)
            )
        values = [
            _checked(axis.key, raw, value) for raw, value in zip(axis.raw, axis.values, strict=True)
        ]
        parsed[axis.key] = tuple(dict.fromkeys(values))  # a value given twice counts once
    return parsed


def _checked(key: str, raw: str, value: Any) -> Any:
    """One value of an axis, or PlanError saying what the axis allows."""
    if key in COUNT_KEYS:
        ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1 << 20
        allowed = "whole numbers from 1 to 1048576"
    elif key in BOOL_KEYS:
        ok, allowed = isinstance(value, bool), "true, false"
    elif key == "parallel.zero_stage":
        ok = value in (0, 1, 2, 3) and not isinstance(value, bool)
        allowed = "0, 1, 2, 3"
    elif key == "model.partition":
        ok, allowed = value in ("even", "balanced"), "even, balanced"
    else:  # pipeline.schedule
        ok = isinstance(value, str) and (value in POLICIES or value in AUTO_POLICIES)
        allowed = ", ".join([*POLICIES, *AUTO_POLICIES])
    if not ok:
        raise PlanError(f"--space {key}: {raw!r} is not allowed; allowed: {allowed}")
    return value


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
                    reason, data, count = _layout(space, tensor, devices, chunks, size)
                    for combo in itertools.product(*rest):
                        if reason is not None:
                            yield None, reason
                            continue
                        replicas = data * space.context  # ZeRO shards over data x context
                        if (same := _same_as_another(tensor, replicas, combo)) is not None:
                            yield None, same
                            continue
                        yield (
                            Candidate(tensor, devices, data, name, chunks, size, count, *combo),
                            None,
                        )


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
