"""A serving deployment: replicas behind a router, each running a replica scheduler.

A serving run is described by a :class:`ServeConfig` (``replicas`` copies of a
:class:`~pipesim.serving.replica.ReplicaConfig` behind a router, each copy's virtual
engines scheduled by one replica-scheduler policy) and a sequence of
:class:`~pipesim.serving.request.Request`; ``pipesim.serving.engine.simulate_serving``
plays it out. Routers and schedulers are picked by name from their registries
(``pipesim.serving.router.ROUTERS``, ``pipesim.serving.scheduler.SCHEDULERS``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipesim.serving.replica import IterationCosts, ReplicaConfig, at_least
from pipesim.serving.router import ROUTERS
from pipesim.serving.scheduler import DEFAULT_SCHEDULER, SCHEDULERS


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """``replicas`` copies of ``replica`` behind a ``router`` (a name in ``ROUTERS``:
    ``round_robin``, or ``least_outstanding``: fewest requests assigned and not finished,
    lowest index on a tie), each virtual engine run by the replica scheduler ``scheduler``
    (a name in ``SCHEDULERS``; ``vllm``: vLLM v0's continuous batching).

    The copies hold the same model and scheduler, but need not sit on the same links: a
    replica whose stages span two nodes pays the inter-node link where another stays inside
    one. ``replica_costs``, when given, holds one cost model per replica (same number of
    stages as ``replica.costs``); empty means every replica costs as ``replica``.
    """

    replica: ReplicaConfig
    replicas: int = 1
    router: str = "round_robin"
    replica_costs: tuple[IterationCosts, ...] = ()
    scheduler: str = DEFAULT_SCHEDULER

    def __post_init__(self) -> None:
        at_least("replicas", self.replicas, 1)
        if self.router not in ROUTERS:
            raise ValueError(f"router: must be one of {', '.join(ROUTERS)}, got {self.router!r}")
        if self.scheduler not in SCHEDULERS:
            raise ValueError(
                f"scheduler: must be one of {', '.join(SCHEDULERS)}, got {self.scheduler!r}"
            )
        costs = self.replica_costs
        if costs and len(costs) != self.replicas:
            raise ValueError(
                f"replicas: {self.replicas} replicas but {len(costs)} per-replica cost models"
            )
        for r, c in enumerate(costs):
            if c.stages != self.replica.stages:
                raise ValueError(
                    f"replicas: replica {r} has {c.stages} stages, the first "
                    f"{self.replica.stages}; every replica must have the same pipeline"
                )

    def replica_config(self, index: int) -> ReplicaConfig:
        """Replica ``index``'s configuration: ``replica`` with its own costs."""
        if not self.replica_costs:
            return self.replica
        return replace(self.replica, costs=self.replica_costs[index])
