"""What each action waits for: a schedule's dependency rule, stated once.

A microbatch walks its chain of stages forward and back, like a bucket passed along a
line and handed back. Each action waits for at most one message from a neighbouring
stage, and for at most one earlier action of its own stage on its own device:

* ``F(s,i)`` takes the **activation** of ``F(s-1,i)``, sent by the device that holds
  stage ``s-1`` (nothing at a chain's first stage: the data is there at time 0);
* ``B(s,i)`` and ``I(s,i)`` take the **gradient** of ``B/I(s+1,i)`` (nothing at a chain's
  last stage) and need ``F(s,i)`` done on their own device;
* ``W(s,i)`` needs only ``I(s,i)``, done on its own device.

So the message an action sends goes the other way: ``F(s,i)`` sends its activation to
stage ``s+1``, ``B/I(s,i)`` its gradient to stage ``s-1``. "Previous" and "next" are
within a chain (``Schedule.chains``), so two chains (DualPipe, Chimera) never talk.

``dependencies(schedule)`` lays the rule out as per-stage tables (``Dependencies``), so
the engine's hot loop, the fast evaluator's arrays, the critical path and the validator
read one answer instead of working out ``stage - 1`` and ``stage + 1`` themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from pipesim.schedules.ir import Action, B, F, I, Kind, Schedule, W


class Message(IntEnum):
    """What crosses between neighbouring stages. The value is the engine's direction bit."""

    ACTIVATION = 0  # a forward's output, for the next stage's forward
    GRADIENT = 1  # a backward's input gradient, for the previous stage's backward

    @property
    def word(self) -> str:
        return self.name.lower()


MESSAGE_OF: dict[Kind, Message] = {F: Message.ACTIVATION, B: Message.GRADIENT, I: Message.GRADIENT}
"""The message an action of each kind takes from a neighbour, and sends to the other."""

SENDER_KINDS: dict[Message, tuple[Kind, ...]] = {
    Message.ACTIVATION: (F,),
    Message.GRADIENT: (B, I),
}
"""The kinds of action whose output each message is (a gradient: a B or an I)."""

LOCAL_INPUT: dict[Kind, Kind] = {B: F, I: F, W: I}
"""The action of the same stage and microbatch that each kind waits for on its device."""


class Hop(NamedTuple):
    """One message between two neighbouring stages, and the devices that hold them."""

    message: Message
    sender: int  # stage
    receiver: int  # stage
    src: int  # device of the sender
    dst: int  # device of the receiver

    @property
    def boundary(self) -> int:
        """The stage boundary it crosses, named by its lower stage (the activation of
        stage ``boundary``, or its gradient, is what it carries)."""
        return min(self.sender, self.receiver)

    def producers(self, microbatch: int) -> tuple[tuple[int, Kind, int], ...]:
        """The ``(stage, kind, microbatch)`` of the actions that may send it."""
        return tuple((self.sender, kind, microbatch) for kind in SENDER_KINDS[self.message])


@dataclass(frozen=True, slots=True)
class Dependencies:
    """The rule for one schedule, per stage. ``upstream[s]``: the stage whose activation
    stage ``s`` takes, and whose gradient it sends (-1: a chain's first stage);
    ``downstream[s]``: the stage its activation goes to and its gradient comes from (-1: a
    chain's last stage). Stages outside every chain have -1 in both."""

    placement: tuple[int, ...]
    upstream: tuple[int, ...]
    downstream: tuple[int, ...]

    def sender(self, message: Message, stage: int) -> int | None:
        """The stage whose ``message`` stage ``stage`` takes (None: it takes none)."""
        other = (self.upstream if message == Message.ACTIVATION else self.downstream)[stage]
        return None if other < 0 else other

    def receiver(self, message: Message, stage: int) -> int | None:
        """The stage that takes ``message`` from stage ``stage`` (None: it sends none)."""
        other = (self.downstream if message == Message.ACTIVATION else self.upstream)[stage]
        return None if other < 0 else other

    def takes_from(self, message: Message) -> tuple[int, ...]:
        """Per stage, the stage whose ``message`` it takes (-1: none), for array lookups."""
        return self.upstream if message == Message.ACTIVATION else self.downstream

    def sends_to(self, message: Message) -> tuple[int, ...]:
        """Per stage, the stage its ``message`` goes to (-1: none), for array lookups."""
        return self.downstream if message == Message.ACTIVATION else self.upstream

    def incoming(self, kind: Kind, stage: int) -> Hop | None:
        """The message an action of ``kind`` on ``stage`` waits for, if any."""
        message = MESSAGE_OF.get(kind)
        if message is None:
            return None
        other = self.sender(message, stage)
        if other is None:
            return None
        return Hop(message, other, stage, self.placement[other], self.placement[stage])

    def outgoing(self, kind: Kind, stage: int) -> Hop | None:
        """The message an action of ``kind`` on ``stage`` sends, if any."""
        message = MESSAGE_OF.get(kind)
        if message is None:
            return None
        other = self.receiver(message, stage)
        if other is None:
            return None
        return Hop(message, stage, other, self.placement[stage], self.placement[other])

    def incoming_table(self, kind: Kind) -> list[Hop | None]:
        """``incoming`` for every stage: what the engine's hot loop indexes."""
        return [self.incoming(kind, s) for s in range(len(self.placement))]

    def outgoing_table(self, kind: Kind) -> list[Hop | None]:
        """``outgoing`` for every stage."""
        return [self.outgoing(kind, s) for s in range(len(self.placement))]

    def message_producers(self, atom: Action) -> tuple[tuple[int, Kind, int], ...]:
        """The ``(stage, kind, microbatch)`` of the actions whose message ``atom`` (a simple
        action) waits for: none, one forward, or the B or the I of the next stage."""
        hop = self.incoming(atom.kind, atom.stage)
        return () if hop is None else hop.producers(atom.microbatch)

    def local_input(self, atom: Action) -> tuple[int, Kind, int] | None:
        """The action of ``atom``'s own stage it waits for on its device, if any."""
        kind = LOCAL_INPUT.get(atom.kind)
        return None if kind is None else (atom.stage, kind, atom.microbatch)

    def waits_for(self, atom: Action) -> tuple[tuple[int, Kind, int], ...]:
        """Every ``(stage, kind, microbatch)`` that ``atom`` may wait for (a gradient: one
        of the two producers, whichever the schedule runs)."""
        local = self.local_input(atom)
        return self.message_producers(atom) + (() if local is None else (local,))


def dependencies(schedule: Schedule) -> Dependencies:
    """The per-stage tables of ``schedule``'s rule (O(stages), cheap to rebuild)."""
    stages = len(schedule.placement)
    upstream, downstream = [-1] * stages, [-1] * stages
    for chain in schedule.chains:
        for stage in chain.stages:
            if 0 <= stage < stages:
                upstream[stage] = stage - 1 if stage > chain.first_stage else -1
                downstream[stage] = stage + 1 if stage < chain.last_stage else -1
    return Dependencies(tuple(schedule.placement), tuple(upstream), tuple(downstream))


__all__ = [
    "LOCAL_INPUT",
    "MESSAGE_OF",
    "SENDER_KINDS",
    "Dependencies",
    "Hop",
    "Message",
    "dependencies",
]
