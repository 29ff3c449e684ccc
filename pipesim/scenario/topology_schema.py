"""``hardware.topology``: the network above the node, as a scenario file writes it.

    hardware:
      gpus_per_node: 8
      inter_node_link: ib-ndr
      topology:
        kind: rail-optimized      # or fat-tree
        nodes_per_pod: 32         # a DGX SuperPOD scalable unit; Meta's pods: 384
        oversubscription: 7       # what leaves a pod runs at 1/7 of the network link
        order: tp-cp-ep-dp-pp     # Megatron-LM's rank order (the default)

What each key means, and where the numbers come from: ``pipesim.cluster.fabric``. The keys
are checked here on their own (a known kind, a ratio of at least 1, known dimension names);
whether they fit the job's GPUs (whole pods, every dimension in use named in ``order``) is
checked where the job is laid out.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from pipesim.cluster.fabric import DEFAULT_ORDER, Fabric, check_order
from pipesim.scenario.fields import Count, Strict


class TopologySpec(Strict):
    """The fabric's keys (module docstring); ``nodes_per_pod`` left out: one pod."""

    kind: Literal["rail-optimized", "fat-tree"] = "fat-tree"
    nodes_per_pod: Count | None = None
    oversubscription: float = Field(default=1.0, ge=1, le=1e6)
    order: str = Field(default=DEFAULT_ORDER, max_length=100)

    @field_validator("order")
    @classmethod
    def _known_names(cls, value: str) -> str:
        check_order(value)
        return value

    def fabric(self) -> Fabric:
        return Fabric(self.kind, self.nodes_per_pod, self.oversubscription, self.order)


__all__ = ["TopologySpec"]
