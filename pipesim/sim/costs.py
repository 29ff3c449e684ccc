"""How long each action takes and how many bytes it moves and keeps.

Costs are given per *model stage* (layer group): ``forward_ms[k]`` is the forward time
of layer group ``k`` for one microbatch. Two chains of a bidirectional schedule run the
same layer groups, so they share the same costs. The engine asks three questions of a
``Costs``: the duration of an action, the bytes sent at a stage boundary, and the
activation memory an action takes or frees.

Backward conventions: a full backward ``B`` computes both gradients; a split backward
runs ``I`` (input gradient, on the critical path) and ``W`` (weight gradient, can wait).
Given only ``backward_ms``, I and W are taken as half of it each; given I and W, ``B``
is their sum.

Runtime posts (torch's lowered schedules, ``pipesim.schedules.posts``) cost nothing
unless given: ``reduce_grad_ms`` is a stage's data-parallel gradient reduction
(``REDUCE_GRAD``), ``unshard_ms`` and ``reshard_ms`` its FSDP parameter gather and free;
``optimizer_ms`` is the optimizer step a stage's ``REDUCE_GRAD`` runs after its reduction
(torch steps a rank's optimizer once its last reduction is done).

Mixture-of-experts stages may also say how their passes split into sub-layer parts
(``moe_parts``, one ``pipesim.sim.sublayers.StageParts`` per stage, None for a dense one):
attention and experts on the compute stream, dispatch and combine all-to-alls on the
communication stream. A lone pass still takes its total (its all-to-alls exposed); an
overlapped pair of a forward and a backward, and a forward with an input-gradient
backward and its delayed weight gradient, take the length of their two-stream timeline
(``group_timeline``), unless ``overlapped_fb_ms`` gives a pair's time outright.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pipesim.schedules.ir import Kind
from pipesim.schedules.posts import REDUCE_GRAD, RESHARD, UNSHARD, PostKind
from pipesim.sim.sublayers import (
    PartTime,
    PassParts,
    StageParts,
    makespan_ms,
    pair_timeline,
    single,
)


@dataclass(frozen=True, slots=True)
class Costs:
    """Per model stage durations (ms) and sizes (bytes); every tuple has one entry per stage."""

    forward_ms: tuple[float, ...]
    backward_ms: tuple[float, ...]
    backward_input_ms: tuple[float, ...]
    backward_weight_ms: tuple[float, ...]
    activation_bytes: tuple[float, ...]
    activation_memory_bytes: tuple[float, ...]
    weight_grad_memory_bytes: tuple[float, ...]
    overlapped_fb_ms: tuple[float, ...] | None = None
    overhead_ms: float = 0.0
    reduce_grad_ms: tuple[float, ...] | None = None
    unshard_ms: tuple[float, ...] | None = None
    reshard_ms: tuple[float, ...] | None = None
    optimizer_ms: tuple[float, ...] | None = None  # run at the stage's REDUCE_GRAD post
    moe_parts: tuple[StageParts | None, ...] | None = None  # MoE stages' sub-layer parts

    @property
    def stages(self) -> int:
        return len(self.forward_ms)

    def duration_ms(self, kind: Kind, model_stage: int) -> float:
        match kind:
            case Kind.F:
                return self.forward_ms[model_stage]
            case Kind.B:
                return self.backward_ms[model_stage]
            case Kind.I:
                return self.backward_input_ms[model_stage]
            case Kind.W:
                return self.backward_weight_ms[model_stage]
        raise ValueError(f"no duration for kind {kind}")

    def scaled(self, factor: float) -> Costs:
        """The same costs with every compute duration multiplied by ``factor`` (sizes and
        the posts' communication unchanged)."""
        times = lambda values: tuple(v * factor for v in values)  # noqa: E731
        return replace(
            self,
            forward_ms=times(self.forward_ms),
            backward_ms=times(self.backward_ms),
            backward_input_ms=times(self.backward_input_ms),
            backward_weight_ms=times(self.backward_weight_ms),
            overlapped_fb_ms=None
            if self.overlapped_fb_ms is None
            else times(self.overlapped_fb_ms),
            moe_parts=None
            if self.moe_parts is None
            else tuple(None if p is None else p.scaled(factor) for p in self.moe_parts),
        )

    def overlapped_ms(self, forward_stage: int, backward_kind: Kind, backward_stage: int) -> float:
        """An overlapped forward+backward pair: its own figure if given, else the length of
        its two streams' timeline where either stage has sub-layer parts, else F + B."""
        if self.overlapped_fb_ms is not None:
            return self.overlapped_fb_ms[forward_stage]
        members = ((Kind.F, forward_stage), (backward_kind, backward_stage))
        timeline = self.group_timeline(members)
        if timeline is not None:
            return makespan_ms(timeline)
        return self.forward_ms[forward_stage] + self.duration_ms(backward_kind, backward_stage)

    def group_ms(self, members: Sequence[tuple[Kind, int]]) -> float:
        """A group of compute actions run as one (``OVERLAP_F_B``), given as (kind, model
        stage) pairs: a forward-then-backward pair is ``overlapped_ms``; a forward, an I and
        that I's W overlap where a stage has sub-layer parts (``group_timeline``); any
        other group takes its members' durations added up, as torch's runtime runs them
        one by one."""
        if len(members) == 2 and members[0][0] == Kind.F and members[1][0] in (Kind.B, Kind.I):
            (_, forward_stage), (backward_kind, backward_stage) = members
            return self.overlapped_ms(forward_stage, backward_kind, backward_stage)
        if self.overlapped_fb_ms is None and _delayed_weight(members):
            timeline = self.group_timeline(members)
            if timeline is not None:
                return makespan_ms(timeline)
        return sum(self.duration_ms(kind, stage) for kind, stage in members)

    def pass_parts(self, kind: Kind, model_stage: int) -> PassParts:
        """A simple action's sub-layer parts, adding up to its duration: one compute part
        for a dense stage and for a weight gradient (``pipesim.sim.sublayers``)."""
        total = self.duration_ms(kind, model_stage)
        stage = None if self.moe_parts is None else self.moe_parts[model_stage]
        if stage is None or kind == Kind.W:
            return single(total)
        if kind == Kind.F:
            return stage.forward.fitted(total)
        return (stage.backward_input if kind == Kind.I else stage.backward()).fitted(total)

    def group_timeline(self, members: Sequence[tuple[Kind, int]]) -> tuple[PartTime, ...] | None:
        """The two-stream timeline of an overlapped group where one of its stages has
        sub-layer parts: a forward with a backward (B or I), or a forward, an I and that
        I's W (the weight gradient delayed into the pair); None otherwise."""
        if self.moe_parts is None or not any(self.moe_parts[stage] for _, stage in members):
            return None
        pair = len(members) == 2 and members[0][0] == Kind.F and members[1][0] in (Kind.B, Kind.I)
        if not pair and not _delayed_weight(members):
            return None
        forward = self.pass_parts(Kind.F, members[0][1])
        backward_kind, backward_stage = members[1]
        backward = self.pass_parts(backward_kind, backward_stage)
        if pair:
            return pair_timeline(forward, backward)
        weight_ms = self.backward_weight_ms[backward_stage]
        stage = self.moe_parts[backward_stage]
        weight = (weight_ms,) if stage is None else stage.weight_fitted(weight_ms)
        return pair_timeline(forward, backward, weight)

    def post_ms(self, kind: PostKind, model_stage: int) -> float:
        """The time a post takes: REDUCE_GRAD, UNSHARD, RESHARD as given, else (and SEND/RECV,
        whose time is the link's) zero."""
        values = {
            REDUCE_GRAD: self.reduce_grad_ms,
            UNSHARD: self.unshard_ms,
            RESHARD: self.reshard_ms,
        }.get(kind)
        return 0.0 if values is None else values[model_stage]


def _delayed_weight(members: Sequence[tuple[Kind, int]]) -> bool:
    """Whether a group is a forward, an I, and the W of that I's stage (delay_wgrad)."""
    kinds = tuple(kind for kind, _ in members)
    return kinds == (Kind.F, Kind.I, Kind.W) and members[1][1] == members[2][1]


class StageCountError(ValueError):
    """A per-stage list whose length is not the number of stages."""

    def __init__(self, key: str, entries: int, stages: int) -> None:
        self.key, self.entries, self.stages = key, entries, stages
        super().__init__(f"{key} has {entries} entries, expected {stages} (one per stage)")


def per_stage(value: float | Sequence[float], stages: int, key: str = "value") -> tuple[float, ...]:
    """A number or one per stage, as one float per stage: a number applies to every
    stage, a list (or tuple) of ``stages`` entries is taken as given, any other length is
    a ``StageCountError`` naming ``key``."""
    if isinstance(value, list | tuple):
        if len(value) != stages:
            raise StageCountError(key, len(value), stages)
        return tuple(float(v) for v in value)
    return (float(value),) * stages


def uniform_costs(
    stages: int,
    forward_ms: float | list[float] = 1.0,
    backward_ms: float | list[float] | None = None,
    *,
    backward_input_ms: float | list[float] | None = None,
    backward_weight_ms: float | list[float] | None = None,
    activation_bytes: float | list[float] = 0.0,
    activation_memory_bytes: float | list[float] = 0.0,
    weight_grad_memory_bytes: float | list[float] = 0.0,
    overlapped_fb_ms: float | list[float] | None = None,
    overhead_ms: float = 0.0,
    reduce_grad_ms: float | list[float] | None = None,
    unshard_ms: float | list[float] | None = None,
    reshard_ms: float | list[float] | None = None,
) -> Costs:
    """Costs from scalars or per-stage lists (a scalar applies to every stage)."""

    def per_stage_or_none(value, key: str) -> tuple[float, ...] | None:
        return None if value is None else per_stage(value, stages, key)

    fwd = per_stage_or_none(forward_ms, "forward_ms")
    if backward_input_ms is not None or backward_weight_ms is not None:
        if backward_input_ms is None or backward_weight_ms is None:
            raise ValueError("give both backward_input_ms and backward_weight_ms, or neither")
        inp = per_stage_or_none(backward_input_ms, "backward_input_ms")
        wgt = per_stage_or_none(backward_weight_ms, "backward_weight_ms")
        full = (
            per_stage_or_none(backward_ms, "backward_ms")
            if backward_ms is not None
            else tuple(a + b for a, b in zip(inp, wgt, strict=True))
        )
    else:
        full = per_stage_or_none(2.0 if backward_ms is None else backward_ms, "backward_ms")
        inp = tuple(b / 2 for b in full)
        wgt = inp
    return Costs(
        forward_ms=fwd,
        backward_ms=full,
        backward_input_ms=inp,
        backward_weight_ms=wgt,
        activation_bytes=per_stage_or_none(activation_bytes, "activation_bytes"),
        activation_memory_bytes=per_stage_or_none(
            activation_memory_bytes, "activation_memory_bytes"
        ),
        weight_grad_memory_bytes=per_stage_or_none(
            weight_grad_memory_bytes, "weight_grad_memory_bytes"
        ),
        overlapped_fb_ms=per_stage_or_none(overlapped_fb_ms, "overlapped_fb_ms"),
        overhead_ms=overhead_ms,
        reduce_grad_ms=per_stage_or_none(reduce_grad_ms, "reduce_grad_ms"),
        unshard_ms=per_stage_or_none(unshard_ms, "unshard_ms"),
        reshard_ms=per_stage_or_none(reshard_ms, "reshard_ms"),
    )


__all__ = ["Costs", "StageCountError", "per_stage", "uniform_costs"]
