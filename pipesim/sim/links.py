"""Links between devices and the topology that says which link joins two devices.

A link follows the LogGP model: a message of ``n`` bytes occupies its channel for
``n / bandwidth`` (plus an optional per-message gap), then arrives ``latency`` later.
Latency is a pure delay, so several messages can be in flight on one link; only the
bandwidth time queues. Links that share a physical channel (several GPUs behind one PCIe
switch) carry the same ``channel`` name and share one queue.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Link:
    """One directed link. ``bandwidth_gbps`` is in GB/s (1e9 bytes/s); inf means no size cost."""

    latency_us: float = 0.0
    bandwidth_gbps: float = math.inf
    name: str = "ideal"

    def transfer_ms(self, nbytes: float) -> float:
        size_ms = 0.0 if math.isinf(self.bandwidth_gbps) else nbytes / (self.bandwidth_gbps * 1e6)
        return self.latency_us / 1000.0 + size_ms

    @property
    def is_ideal(self) -> bool:
        return self.latency_us == 0 and math.isinf(self.bandwidth_gbps)


IDEAL = Link()


@dataclass(frozen=True, slots=True)
class Topology:
    """Which link joins two devices, and which links share a queue.

    ``links[(src, dst)]`` overrides ``default`` for one directed pair; ``channels`` maps a
    directed pair to a shared queue name (default: each pair its own queue).
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
