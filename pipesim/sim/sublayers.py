"""Mixture-of-experts passes at sub-layer grain, and how two of them overlap.

A MoE layer's forward runs attention, then the *dispatch* all-to-all that takes every token
to the GPUs holding its experts, the experts, then the *combine* all-to-all that brings the
results back; its backward runs the reverse (combine's gradient, the experts' backward,
dispatch's gradient, attention's backward). Compute runs on the device's compute stream,
the all-to-alls on its communication stream. One stage's pass is so a chain of parts that
alternate compute and communication, ``c0 m0 c1 m1 ... ck`` (``PassParts``), each part
needing the one before it.

* **Alone**, a pass runs its chain in order: its time is the sum of its parts, every
  all-to-all exposed, as plain 1F1B runs a MoE layer.
* **An overlapped pair** (the forward of one microbatch and the backward of another:
  DualPipe's overlapped chunk, Megatron-Core's combined 1F1B) runs both chains at once on
  the two streams, each stream in a fixed issue order (``pair_timeline``): on the compute
  stream the backward's part ``j``, then the forward's part ``j``, then the backward's
  ``j + 1``; on the communication stream the backward's all-to-all ``j``, then the
  forward's ``j``. So the forward's attention runs under the backward's combine, the
  backward's experts under the forward's dispatch, the forward's experts under the
  backward's dispatch, and the backward's attention under the forward's combine, as in the
  DeepSeek-V3 report's figure 4. A part starts when the part before it in its chain and the
  part before it on its stream have ended; the pair ends with its last part. That is never
  later than ``F + B`` (any chain of waits passes each part once at most) and never
  earlier than either stream's work or either chain alone.
* **Delayed weight gradients** (Megatron-Core's ``--delay-wgrad-compute``): a pair of a
  forward with an input-gradient backward ``I`` and that backward's ``W`` runs W's
  compute beside each of I's compute parts (``StageParts.weight_ms``), issued on the
  compute stream after the forward's part that follows it and needing only that I part:
  it fills the compute stream while the backward's next all-to-all runs.

Without parts (a dense stage) a pass is one compute part; a pair of two such passes takes
``F + B``, as pipesim always had. ``pass_timeline`` and ``pair_timeline`` are pure
functions of the parts, shared by the SimPy engine, the fast evaluator, the trace's
sub-layer rows and the analyses (``pipesim.sim.costs.Costs.group_ms``), so every reader
agrees to the bit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum


class Stream(IntEnum):
    """Where a part runs: the device's compute stream or its communication stream."""

    COMPUTE = 0
    COMM = 1


class Role(IntEnum):
    """Which pass of a group a part belongs to."""

    FORWARD = 0
    BACKWARD = 1
    WEIGHT = 2  # a delayed weight gradient's part


@dataclass(frozen=True, slots=True)
class PassParts:
    """One pass of one stage as parts: ``compute_ms[j]`` then ``comm_ms[j]`` in turn, ending
    with ``compute_ms[-1]`` (so one more compute part than all-to-alls), and what each part
    is called (``attention``, ``experts``, ``dispatch``, ``combine``; empty: generic)."""

    compute_ms: tuple[float, ...]
    comm_ms: tuple[float, ...] = ()
    compute_names: tuple[str, ...] = ()
    comm_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.compute_ms) != len(self.comm_ms) + 1:
            raise ValueError(
                f"a pass alternates compute and all-to-all, starting and ending with compute: "
                f"{len(self.compute_ms)} compute parts for {len(self.comm_ms)} all-to-alls"
            )

    @property
    def compute_total_ms(self) -> float:
        return sum(self.compute_ms)

    @property
    def comm_total_ms(self) -> float:
        return sum(self.comm_ms)

    @property
    def total_ms(self) -> float:
        return self.compute_total_ms + self.comm_total_ms

    def scaled(self, factor: float) -> PassParts:
        return replace(
            self,
            compute_ms=tuple(c * factor for c in self.compute_ms),
            comm_ms=tuple(m * factor for m in self.comm_ms),
        )

    def fitted(self, total_ms: float) -> PassParts:
        """The parts of a pass that takes ``total_ms`` in all: what the parts leave over
        (work beside the MoE layers that a later pass added, e.g. ZeRO-3's gathers) joins
        the first compute part; parts that add up to more are scaled down to it."""
        have = self.total_ms
        if total_ms == have:
            return self
        if total_ms > have:
            first = self.compute_ms[0] + (total_ms - have)
            return replace(self, compute_ms=(first, *self.compute_ms[1:]))
        return self.scaled(total_ms / have) if have > 0 else self

    def name(self, stream: Stream, index: int) -> str:
        names = self.compute_names if stream == Stream.COMPUTE else self.comm_names
        if index < len(names):
            return names[index]
        return "compute" if stream == Stream.COMPUTE else "all-to-all"


def single(total_ms: float) -> PassParts:
    """A pass of one compute part (a dense stage, a weight gradient)."""
    return PassParts((total_ms,))


@dataclass(frozen=True, slots=True)
class StageParts:
    """One MoE stage's passes at sub-layer grain: the forward, the input-gradient backward
    ``backward_input``, and the weight gradient ``weight_ms`` split beside each of I's
    compute parts (a full backward B is I with them added part by part)."""

    forward: PassParts
    backward_input: PassParts
    weight_ms: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.weight_ms) != len(self.backward_input.compute_ms):
            raise ValueError(
                f"weight_ms has {len(self.weight_ms)} parts, backward_input "
                f"{len(self.backward_input.compute_ms)} compute parts"
            )

    def backward(self) -> PassParts:
        """B: each of I's compute parts with its weight gradient beside it."""
        parts = self.backward_input
        merged = tuple(c + w for c, w in zip(parts.compute_ms, self.weight_ms, strict=True))
        return replace(parts, compute_ms=merged)

    def weight_fitted(self, total_ms: float) -> tuple[float, ...]:
        """``weight_ms`` scaled to add up to ``total_ms`` (all of it in the last part
        where the parts hold none)."""
        have = sum(self.weight_ms)
        if have > 0:
            return tuple(w * total_ms / have for w in self.weight_ms)
        return (0.0,) * (len(self.weight_ms) - 1) + (total_ms,)

    def scaled(self, factor: float) -> StageParts:
        return StageParts(
            self.forward.scaled(factor),
            self.backward_input.scaled(factor),
            tuple(w * factor for w in self.weight_ms),
        )


@dataclass(frozen=True, slots=True)
class PartTime:
    """One part of a group's timeline: which pass (``role``), stream, its index among that
    pass's parts on that stream, and when it runs (ms from the group's start)."""

    role: Role
    stream: Stream
    index: int
    start_ms: float
    end_ms: float


def pass_timeline(parts: PassParts, role: Role = Role.FORWARD) -> tuple[PartTime, ...]:
    """A pass alone: its parts one after the other."""
    times, now = [], 0.0
    for j, compute in enumerate(parts.compute_ms):
        times.append(PartTime(role, Stream.COMPUTE, j, now, now + compute))
        now += compute
        if j < len(parts.comm_ms):
            times.append(PartTime(role, Stream.COMM, j, now, now + parts.comm_ms[j]))
            now += parts.comm_ms[j]
    return tuple(times)


def pair_timeline(
    forward: PassParts, backward: PassParts, weight_ms: tuple[float, ...] = ()
) -> tuple[PartTime, ...]:
    """A forward and a backward (of other microbatches) overlapped on two streams in
    DualPipe's issue order (module docstring); ``weight_ms``: delayed weight-gradient parts,
    one beside each of ``backward``'s compute parts (empty: none)."""
    nodes: list[tuple[Role, Stream, int, float]] = []
    chain_before: list[int] = []

    def chain(parts: PassParts, role: Role) -> tuple[list[int], list[int]]:
        computes, comms = [], []
        for j, compute in enumerate(parts.compute_ms):
            chain_before.append(len(nodes) - 1 if j else -1)
            computes.append(len(nodes))
            nodes.append((role, Stream.COMPUTE, j, compute))
            if j < len(parts.comm_ms):
                chain_before.append(len(nodes) - 1)
                comms.append(len(nodes))
                nodes.append((role, Stream.COMM, j, parts.comm_ms[j]))
        return computes, comms

    forward_compute, forward_comm = chain(forward, Role.FORWARD)
    backward_compute, backward_comm = chain(backward, Role.BACKWARD)
    weights = []
    for j, ms in enumerate(weight_ms):
        chain_before.append(backward_compute[j])  # needs only its own I part
        weights.append(len(nodes))
        nodes.append((Role.WEIGHT, Stream.COMPUTE, j, ms))
    compute_order = _interleave(backward_compute, forward_compute, weights)
    comm_order = _interleave(backward_comm, forward_comm, [])
    return _run_two_streams(nodes, chain_before, (compute_order, comm_order))


def _interleave(first: list[int], second: list[int], third: list[int]) -> list[int]:
    """``first[0] second[0] third[0] first[1] ...``, each list's rest when the others end."""
    order = []
    for j in range(max(len(first), len(second), len(third))):
        order += [ids[j] for ids in (first, second, third) if j < len(ids)]
    return order


def _run_two_streams(
    nodes: list[tuple[Role, Stream, int, float]],
    chain_before: list[int],
    orders: tuple[list[int], list[int]],
) -> tuple[PartTime, ...]:
    """Each stream runs its order; a part starts when its chain predecessor and its stream
    predecessor have ended. The issue orders keep both chains' own orders, so some
    stream's next part is always ready (a ValueError otherwise)."""
    start_at, end = [0.0] * len(nodes), [-1.0] * len(nodes)
    cursor, free = [0, 0], [0.0, 0.0]
    left = len(nodes)
    while left:
        moved = False
        for stream, order in enumerate(orders):
            while cursor[stream] < len(order):
                node = order[cursor[stream]]
                before = chain_before[node]
                if before >= 0 and end[before] < 0:
                    break
                start = max(free[stream], end[before] if before >= 0 else 0.0)
                start_at[node], end[node] = start, start + nodes[node][3]
                free[stream] = end[node]
                cursor[stream] += 1
                left -= 1
                moved = True
        if not moved:
            raise ValueError("the two streams' issue orders wait for each other")
    return tuple(
        PartTime(role, stream, index, start_at[node], end[node])
        for node, (role, stream, index, _) in enumerate(nodes)
    )


def makespan_ms(timeline: tuple[PartTime, ...]) -> float:
    """When a group's last part ends."""
    return max((part.end_ms for part in timeline), default=0.0)


def exposed_comm_ms(timeline: tuple[PartTime, ...]) -> float:
    """The time a group's compute stream waits on its all-to-alls: its length less its
    compute."""
    compute = sum(p.end_ms - p.start_ms for p in timeline if p.stream == Stream.COMPUTE)
    return max(makespan_ms(timeline) - compute, 0.0)


__all__ = [
    "PartTime",
    "PassParts",
    "Role",
    "StageParts",
    "Stream",
    "exposed_comm_ms",
    "makespan_ms",
    "pair_timeline",
    "pass_timeline",
    "single",
]
