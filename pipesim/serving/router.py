"""The router: which replica a request goes to.

A router is any object with the two methods of :class:`Router`; ``ROUTERS`` maps the
names a scenario's ``serving.router`` may give to a factory ``(replicas) -> Router``.

* ``round_robin``: replicas in turn, whatever their load;
* ``least_outstanding``: the replica with the fewest requests assigned and not yet
  finished (lowest index on a tie), the usual "least requests" of load balancers.

A new policy is one class (in its own module, when it grows) plus one line in
``ROUTERS``. Inside a replica the request then goes to the virtual engine with the fewest
unfinished requests, as vLLM does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Router(Protocol):
    """What the serving engine asks of a router: a replica for each arriving request, and
    word when one of a replica's requests finished (rejected requests are never routed)."""

    def assign(self) -> int:
        """The replica (an index in ``[0, replicas)``) for the next request."""
        ...

    def finished(self, replica: int) -> None:
        """A request that ``assign`` sent to ``replica`` has finished."""
        ...


class RoundRobinRouter:
    """Replicas in turn: 0, 1, ..., replicas - 1, 0, ..."""

    __slots__ = ("replicas", "turn")

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self.turn = 0

    def assign(self) -> int:
        replica = self.turn
        self.turn = (replica + 1) % self.replicas
        return replica

    def finished(self, replica: int) -> None:
        pass


class LeastOutstandingRouter:
    """The replica with the fewest requests assigned and not finished (lowest index on a
    tie)."""

    __slots__ = ("outstanding",)

    def __init__(self, replicas: int) -> None:
        self.outstanding = [0] * replicas

    def assign(self) -> int:
        count = self.outstanding
        replica = min(range(len(count)), key=count.__getitem__)
        count[replica] += 1
        return replica

    def finished(self, replica: int) -> None:
        self.outstanding[replica] -= 1


RouterFactory = Callable[[int], Router]

ROUTERS: dict[str, RouterFactory] = {
    "round_robin": RoundRobinRouter,
    "least_outstanding": LeastOutstandingRouter,
}


def make_router(name: str, replicas: int) -> Router:
    """The router registered as ``name``, over ``replicas`` replicas."""
    if name not in ROUTERS:
        raise ValueError(f"router: must be one of {', '.join(ROUTERS)}, got {name!r}")
    return ROUTERS[name](replicas)
