"""The engine's lookup tables: the dependency rule and the costs, laid out per stage.

The hot loop never asks what an action waits for: it indexes one ``Rule`` per kind,
built once per run from ``pipesim.schedules.dependencies`` (the rule) and the costs.
Inputs are known by an integer key at their receiver, ``2 * (stage * width +
microbatch) + message`` (``width``: the microbatch range of a stage; ``message``: 0 for
an activation, 1 for a gradient), so a rule holds only each stage's key base and adds
``2 * microbatch``.
"""

from __future__ import annotations

from typing import NamedTuple

from pipesim.schedules.dependencies import Dependencies, Hop, Message
from pipesim.schedules.ir import Kind
from pipesim.schedules.validity import CELL_STEPS
from pipesim.sim.costs import Costs
from pipesim.sim.links import Topology
from pipesim.sim.trace import KIND_CODE, RowKind


class Target(NamedTuple):
    """Where an action's output goes: the input key base at the receiver (add ``2 *
    microbatch``), the receiving device, the channel time and latency (ms), and the
    channel's index (None: the same device or an ideal link, there at once) and whether
    several senders share it."""

    key: int
    dst: int
    occupancy: float
    latency: float
    channel: int | None
    shared: bool


class Rule(NamedTuple):
    """One kind of action, per stage: the input key base it waits for (None: nothing
    from another stage), where its output goes (None: nowhere), its duration (ms), the
    cell states before and after it (``pipesim.schedules.validity.CELL_STEPS``), its row
    kind and its transfers' row kind."""

    inputs: list[int | None]
    outputs: list[Target | None]
    durations: list[float]
    before: int
    after: int
    code: int
    send_code: int | None


def input_key(stage: int, message: Message, microbatch: int, width: int) -> int:
    """The key of ``message`` for ``microbatch`` at its receiving ``stage``."""
    return 2 * (stage * width + microbatch) + message


def key_parts(key: int, width: int) -> tuple[Message, int, int]:
    """``input_key`` undone: the message, the receiving stage and the microbatch."""
    stage, microbatch = divmod(key // 2, width)
    return Message(key % 2), stage, microbatch


def stage_rules(deps: Dependencies, costs: Costs, model_stage: list[int], width: int, link):
    """``{kind: Rule}`` for one run. ``link(hop)``: the hop's Target fields after the key
    base (receiver, channel ms, latency ms, channel, shared)."""
    stages = range(len(model_stage))

    def base(hop: Hop | None) -> int | None:
        return None if hop is None else input_key(hop.receiver, hop.message, 0, width)

    def target(hop: Hop | None) -> Target | None:
        return None if hop is None else Target(base(hop), *link(hop))

    sends = {Kind.F: RowKind.SEND_F, Kind.B: RowKind.SEND_B, Kind.I: RowKind.SEND_B}
    rules = {}
    for kind in (Kind.F, Kind.B, Kind.I, Kind.W):
        send = sends.get(kind)
        rules[kind] = Rule(
            [base(hop) for hop in deps.incoming_table(kind)],
            [target(hop) for hop in deps.outgoing_table(kind)],
            [costs.duration_ms(kind, model_stage[s]) for s in stages],
            *CELL_STEPS[kind],
            int(KIND_CODE[kind]),
            None if send is None else int(send),
        )
    return rules


def plain_rules(rules: dict[Kind, Rule]) -> dict[Kind, tuple]:
    """The rules as exact tuples, targets too, for the common step's hot loop: CPython
    unpacks an exact tuple on a fast path that a NamedTuple (a subclass) misses."""
    plain = {}
    for kind, rule in rules.items():
        outputs = [None if target is None else tuple(target) for target in rule.outputs]
        plain[kind] = (rule.inputs, outputs, *rule[2:])
    return plain


def hop_link(topology: Topology, costs: Costs, channels, model_stage: list[int]):
    """``link`` for ``stage_rules``: a hop's receiver, channel time, latency, channel."""

    def link(hop: Hop) -> tuple:
        src, dst = hop.src, hop.dst
        found = topology.link(src, dst)
        if src == dst or found.is_ideal:
            return (dst, 0.0, 0.0, None, False)
        nbytes = costs.activation_bytes[model_stage[hop.boundary]]
        channel, shared = channels.index(topology.channel(src, dst))
        return (dst, found.occupancy_ms(nbytes), found.latency_ms, channel, shared)

    return link


__all__ = ["Rule", "Target", "hop_link", "input_key", "key_parts", "plain_rules", "stage_rules"]
