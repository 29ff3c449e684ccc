"""Channels: where transfers queue.

Under LogGP only a message's time on its channel (``bytes / bandwidth`` plus the link's
gap) queues; latency is a pure delay after it leaves. A channel serves one message at a
time, first come, first served, and remembers when it next falls free and which
transfer holds it until then; a message that finds it busy starts when that transfer
leaves the channel (cause ``Cause.CHANNEL``), otherwise when its producer ends
(``Cause.PRODUCER``).

Each directed link is its own channel with a single sender, whose requests arrive in its
program order, so the engine serves them the moment they are made. A channel shared by
several senders (GPUs behind one PCIe switch, ``Topology.channels``) is different: two
senders may offer a message at the same instant, and SimPy's event order between them
is an accident. So a shared channel collects the requests of an instant and serves them
after every other event of that instant has run, in order of (request time, sender
device, program order), an explicit tie rule that ``tests/oracle.py`` repeats.

"After every other event of that instant" is kept with SimPy's public API alone: one
zero-delay timeout per run, the closing call, goes to the back of the instant's queue
and, while ``env.peek()`` shows more events at this instant, goes to the back again;
when it is the last, it serves the channel that asked first, and comes back for the next
(so each channel's service sees the events the one before it caused, as a lower event
priority would give).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING

from pipesim.schedules.ir import Action, B, F, I
from pipesim.sim.links import Topology
from pipesim.sim.trace import Cause, RowKind, TraceBuilder

if TYPE_CHECKING:  # simpy is imported where an environment is made (``run.Run``)
    import simpy

SEND_CODE = {F: int(RowKind.SEND_F), B: int(RowKind.SEND_B), I: int(RowKind.SEND_B)}
_PRODUCER, _CHANNEL = int(Cause.PRODUCER), int(Cause.CHANNEL)
_SERVICE_ORDER = attrgetter("ready", "device")  # (request time, sender device); a stable sort


@dataclass(slots=True)
class Request:
    """One message offered to a channel: ready at ``ready`` (ms) on ``device``, the output
    of ``atom``, to become input ``key`` on ``dst`` after ``occupancy`` ms on the channel
    and ``latency`` ms more; ``producer``: the row that released it. ``arrival`` and
    ``row`` (its transfer row) are filled in when the channel serves it; ``grant`` is the
    event that says so (a shared channel serves at the end of the instant)."""

    ready: float
    device: int
    atom: Action
    key: int
    dst: int
    occupancy: float
    latency: float
    producer: int
    arrival: float | None = None
    row: int | None = None
    grant: simpy.Event | None = None


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
        # shared channel -> this instant's requests, in the order the channels first asked
        self.pending: dict[int, list[Request]] = {}
        self.grants: dict[int, simpy.Event] = {}
        self.closing: simpy.Event | None = None  # the instant's last call, while one waits

    def index(self, name: str) -> tuple[int, bool]:
        """The channel called ``name`` (registered on first use), and whether it is shared."""
        if name not in self.names:
            self.names[name] = len(self.free)
            self.free.append(0.0)
            self.holder.append(-1)
        return self.names[name], name in self.shared_names

    def send(self, channel: int, request: Request) -> Request:
        """Put one message on ``channel`` now; record its row, deliver it, and fill in its
        arrival time and row."""
        free = self.free[channel]
        if free > request.ready:
            begin, cause, cause_row = free, _CHANNEL, self.holder[channel]
        else:
            begin, cause, cause_row = request.ready, _PRODUCER, request.producer
        leave = self.free[channel] = begin + request.occupancy
        arrival = request.arrival = leave + request.latency
        row = request.row = self.holder[channel] = self.next_row()
        atom = request.atom
        code = SEND_CODE[atom.kind]
        device, dst = request.device, request.dst
        self.out.rows.append(
            (device, atom.stage, atom.microbatch, code, begin, arrival, dst, cause, cause_row)
        )
        self.out.actions.append(atom)
        self.deliver(request.key, arrival, row)
        return request

    def request(self, channel: int, request: Request) -> Request:
        """Offer a message to a shared channel; it is served at the end of this instant,
        when ``request.grant`` succeeds."""
        queue = self.pending.get(channel)
        if queue is None:
            queue = self.pending[channel] = []
            self.grants[channel] = self.env.event()
            if self.closing is None:
                self._call_last()
        request.grant = self.grants[channel]
        queue.append(request)
        return request

    def _call_last(self) -> None:
        self.closing = self.env.timeout(0)
        self.closing.callbacks.append(self._close)

    def _close(self, _event: simpy.Event) -> None:
        """The back of the instant's queue: serve one channel once nothing else is left."""
        if self.env.peek() > self.env.now:
            channel = next(iter(self.pending))
            self.grants.pop(channel).succeed()  # its waiters resume once it is served
            for request in sorted(self.pending.pop(channel), key=_SERVICE_ORDER):
                self.send(channel, request)
        if self.pending:
            self._call_last()
        else:
            self.closing = None


__all__ = ["SEND_CODE", "Channels", "Request"]
