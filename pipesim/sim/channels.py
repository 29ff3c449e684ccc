"""Channels: where transfers queue.

Under LogGP only a message's time on its channel (``bytes / bandwidth`` plus the link's
gap) queues; latency is a pure delay after it leaves. A channel serves one message at a
time, first come, first served, and remembers when it next falls free and which
transfer holds it until then; a message that finds it busy starts when that transfer
leaves the channel (cause ``CAUSE_CHANNEL``), otherwise when its producer ends
(``CAUSE_PRODUCER``).

Each directed link is its own channel with a single sender, whose requests arrive in its
program order, so the engine serves them the moment they are made. A channel shared by
several senders (GPUs behind one PCIe switch, ``Topology.channels``) is different: two
senders may offer a message at the same instant, and SimPy's event order between them
is an accident. So a shared channel collects the requests of an instant and serves them
after every other event of that instant has run, in order of (request time, sender
device, program order), an explicit tie rule that ``tests/oracle.py`` repeats.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from operator import itemgetter

import simpy

from pipesim.schedules.ir import B, F, I
from pipesim.sim.links import Topology
from pipesim.sim.trace import (
    CAUSE_CHANNEL,
    CAUSE_PRODUCER,
    SEND_B,
    SEND_F,
    TraceBuilder,
)

SEND_CODE = {F: SEND_F, B: SEND_B, I: SEND_B}
_AFTER_INSTANT = 2  # a SimPy priority after NORMAL: the event runs last in its instant
_SERVICE_ORDER = itemgetter(3, 4)  # (request time, sender device); the sort is stable

# A shared-channel request: [arrival, row, grant event, request time, sender, atom,
# input key, receiver, channel ms, latency ms, producer row]; arrival and row are filled
# in when the channel serves it.
ARRIVAL, ROW, GRANT = 0, 1, 2


class Channels:
    """The channels of one run: ``free[c]`` (ms) and ``holder[c]`` (a row) per channel."""

    def __init__(
        self,
        env: simpy.Environment,
        topology: Topology,
        out: TraceBuilder,
        next_row: Callable[[], int],
        deliver: Callable[[int, float, int], None],
    ) -> None:
        self.env, self.out, self.next_row, self.deliver = env, out, next_row, deliver
        senders: dict[str, set[int]] = {}
        for (src, _), name in topology.channels.items():
            senders.setdefault(name, set()).add(src)
        self.shared_names = {name for name, found in senders.items() if len(found) > 1}
        self.names: dict[str, int] = {}
        self.free: list[float] = []
        self.holder: list[int] = []
        self.pending: dict[int, list[list]] = {}  # shared channel -> this instant's requests
        self.grants: dict[int, simpy.Event] = {}

    def index(self, name: str) -> tuple[int, bool]:
        """The channel called ``name`` (registered on first use), and whether it is shared."""
        if name not in self.names:
            self.names[name] = len(self.free)
            self.free.append(0.0)
            self.holder.append(-1)
        return self.names[name], name in self.shared_names

    def send(self, channel, device, atom, key, ready, dst, occupancy, latency, producer):
        """Put one message, ready at ``ready``, on ``channel``; record its row, deliver it,
        and return its arrival time and row."""
        free = self.free[channel]
        if free > ready:
            begin, cause, cause_row = free, CAUSE_CHANNEL, self.holder[channel]
        else:
            begin, cause, cause_row = ready, CAUSE_PRODUCER, producer
        leave = self.free[channel] = begin + occupancy
        arrival = leave + latency
        row = self.holder[channel] = self.next_row()
        code = SEND_CODE[atom.kind]
        self.out.rows.append(
            (device, atom.stage, atom.microbatch, code, begin, arrival, dst, cause, cause_row)
        )
        self.out.actions.append(atom)
        self.deliver(key, arrival, row)
        return arrival, row

    def request(self, channel: int, record: list) -> list:
        """Offer a message to a shared channel; it is served at the end of this instant."""
        queue = self.pending.get(channel)
        if queue is None:
            queue = self.pending[channel] = []
            grant = simpy.Event(self.env)
            grant.callbacks.append(partial(self._serve, channel))
            grant._ok, grant._value = True, None  # triggered, as Event.succeed would do
            self.env.schedule(grant, _AFTER_INSTANT)
            self.grants[channel] = grant
        record[GRANT] = self.grants[channel]
        queue.append(record)
        return record

    def _serve(self, channel: int, _event: simpy.Event) -> None:
        for record in sorted(self.pending.pop(channel), key=_SERVICE_ORDER):
            args = record[3:]
            ready, device, atom, key, dst, occupancy, latency, producer = args
            record[ARRIVAL], record[ROW] = self.send(
                channel, device, atom, key, ready, dst, occupancy, latency, producer
            )


__all__ = ["ARRIVAL", "GRANT", "ROW", "SEND_CODE", "Channels"]
