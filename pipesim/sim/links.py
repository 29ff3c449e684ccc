"""Links between devices and the topology that says which link joins two devices.

A link follows the LogGP model. A message of ``n`` bytes occupies its channel for
``n / bandwidth`` plus an optional per-message gap (LogGP's g), then arrives ``latency``
later. Latency is a pure delay, so several messages can be in flight on one link; only
the time on the channel queues. Each directed link is its own channel; links that share a
physical channel (several GPUs behind one PCIe switch) carry the same channel name in
``Topology.channels`` and share one queue, first come first served.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Link:
    """One directed link: ``latency_us`` of pure delay, ``bandwidth_gbps`` in GB/s (1e9
    bytes/s; inf means no size cost) and ``gap_us`` of channel time per message."""

    latency_us: float = 0.0
    bandwidth_gbps: float = math.inf
    name: str = "ideal"
    gap_us: float = 0.0

    def occupancy_ms(self, nbytes: float) -> float:
        """How long a message holds the channel: ``nbytes / bandwidth + gap``."""
        size_ms = 0.0 if math.isinf(self.bandwidth_gbps) else nbytes / (self.bandwidth_gbps * 1e6)
        return size_ms + self.gap_us / 1000.0

    @property
    def latency_ms(self) -> float:
        return self.latency_us / 1000.0

    def transfer_ms(self, nbytes: float) -> float:
        """The time of one message on an idle link: channel time, then latency."""
        return self.occupancy_ms(nbytes) + self.latency_ms

    @property
    def is_ideal(self) -> bool:
        return self.latency_us == 0 and math.isinf(self.bandwidth_gbps) and self.gap_us == 0


IDEAL = Link()


@dataclass(frozen=True, slots=True)
class Topology:
    """Which link joins two devices, and which links share a channel.

    ``links[(src, dst)]`` overrides ``default`` for one directed pair; ``channels`` maps a
    directed pair to a shared channel name (default: each pair its own channel).
    """

    devices: int
    default: Link = IDEAL
    links: dict[tuple[int, int], Link] = field(default_factory=dict)
    channels: dict[tuple[int, int], str] = field(default_factory=dict)
    comm_overlap: bool = True

    def link(self, src: int, dst: int) -> Link:
        if src == dst:
            return IDEAL
        return self.links.get((src, dst), self.default)

    def channel(self, src: int, dst: int) -> str:
        return self.channels.get((src, dst), f"{src}->{dst}")
